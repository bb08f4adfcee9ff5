"""The LLM as a judge of negatives: may this concept have the property after all?

A negative that has the property ("A banana is used for making smoothies.") makes a pair's label
wrong; so can a translation (Arabic مفاتيح is also a violin's tuning pegs). One request per language
and concept-property lists the unacceptable sentences of its negatives; the reply is a verdict with a
reason for each, structured and cached like every LLM reply, so a re-run costs nothing. What to do
about a verdict is not decided here: `builder.audits.run` flags it for curators.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from builder.llm.client import LLMClient, Request
from builder.prompts import load
from builder.records import Language


class Verdict(BaseModel):
    id: str  # pair id
    may_have_property: bool
    reason: str


class VerdictBatch(BaseModel):
    verdicts: list[Verdict]


class Statement(BaseModel):
    """A negative as the judge sees it."""

    id: str  # pair id
    concept: str  # the verified word in the language
    concept_en: str
    statement: str  # the unacceptable sentence
    english: str  # the English unacceptable sentence


def request_for(lang: Language, property_en: str, prop: str, statements: list[Statement]) -> Request:
    prompt = load("judge")
    fields = {"language": lang.name, "native_name": lang.native_name or lang.name, "code": lang.code}
    payload = json.dumps([s.model_dump() for s in statements], ensure_ascii=False, indent=1)
    return Request((("system", prompt.system.format(**fields)),
                    ("user", prompt.user.format(property_en=property_en, property=prop, statements_json=payload, **fields))),
                   "verdicts", "judge", lang.code, prompt.hash, expected_output_tokens=40 * len(statements))


async def judge(client: LLMClient, lang: Language, property_en: str, prop: str,
                statements: list[Statement]) -> tuple[dict[str, Verdict], dict[str, str]] | None:
    """(pair id -> verdict, pair id -> why the judge gave none) for the statements; None when the request
    was deferred (dry run, batch)."""
    verdicts: dict[str, Verdict] = {}
    outcome = await client.ask_items(request_for(lang, property_en, prop, statements), VerdictBatch,
                                     [s.id for s in statements], lambda ok, _call: verdicts.update(ok))
    return None if outcome.deferred else (verdicts, outcome.reasons)
