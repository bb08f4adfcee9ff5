"""M2C template fills: the LLM proposes the forms a template needs; curators verify them.

The needs come from the templates themselves: every lexicon reference names its lemmas and the
feature bundles it renders. Bundles already in the workspace lexicon (from UniMorph, or proposed
before) are not asked again, so a re-run resumes; rejected forms are asked again. Replies are
validated per lemma (the client's re-ask loop); a lemma whose reply misses a bundle is asked again
for that lemma only, and flagged with the reason when the re-asks run out. A later run asks it again,
with the reason (`builder.flags.Retries`), until it waits for a person.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from builder.flags import Retries, clear_flags, record_given_up, retries
from builder.llm.client import LLMClient, Request
from builder.llm.items import ItemsOutcome, Rejected, per_item
from builder.m2c.language import LanguageDataError, load_language
from builder.m2c.lexicon import canonical_bundle, forms_of, lemma_id, store_proposed_forms
from builder.m2c.nodes import Lexeme
from builder.m2c.template_files import LexiconRef, load_file, template_files
from builder.prompts import load
from builder.records import Language
from builder.runner import Progress
from builder.workspace.store import Workspace


class ProposedForm(BaseModel):
    features: str
    form: str = Field(min_length=1)

    @field_validator("form")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("form is blank")
        return " ".join(v.split())


class InflectionItem(BaseModel):
    id: str
    forms: list[ProposedForm]


class InflectionBatch(BaseModel):
    items: list[InflectionItem]


@dataclass(frozen=True)
class Need:
    lang: str
    lemma: str
    features: str  # lexeme features, e.g. "MASC"
    bundles: tuple[str, ...]  # canonical bundles still missing

    @property
    def id(self) -> str:
        return lemma_id(self.lang, self.lemma)


@dataclass
class FillSummary:
    lemmas: int = 0
    proposed: int = 0
    flagged: dict[str, str] = field(default_factory=dict)  # lemma -> why no valid reply


def stand_in_resolver(ref: LexiconRef) -> list[Lexeme]:
    """Lexemes whose every bundle holds the lemma itself: enough to compile and count a template."""
    return [Lexeme({b: lemma for b in ref.bundles}, lemma=lemma, features=f) for lemma, f in ref.lemmas.items()]


def needs(ws: Workspace, lang: str, root: Path | None = None, *, proposals_missing: bool = False) -> list[Need]:
    """What the language's templates need and the lexicon lacks (or has rejected).

    With `proposals_missing`, forms the LLM proposed count as lacking too: a list that does not move as this
    worker or another stores its proposals, which `propose_forms` cuts its requests from."""
    language = load_language(lang)
    refs: list[LexiconRef] = []

    def collect(ref: LexiconRef) -> list[Lexeme]:
        refs.append(ref)
        return stand_in_resolver(ref)

    for path in template_files(lang, root):
        load_file(path, resolve=collect, lang=lang)
    wanted: dict[str, tuple[str, dict[str, None]]] = {}  # lemma -> (lexeme features, bundles in template order)
    for ref in refs:
        for lemma, feats in ref.lemmas.items():
            entry = wanted.setdefault(lemma, (feats, {}))
            entry[1].update(dict.fromkeys(canonical_bundle(language, b) for b in ref.bundles))
    have = forms_of(ws, language.code, wanted)
    out = []
    for lemma, (feats, bundles) in sorted(wanted.items()):
        rows = have.get(lemma, {})
        missing = [b for b in bundles if b not in rows or rows[b]["status"] == "rejected"
                   or (proposals_missing and rows[b]["source"] == "llm")]
        if missing:
            out.append(Need(language.code, lemma, feats, tuple(missing)))
    return out


def request_for(lang: Language, chunk: list[Need]) -> Request:
    prompt = load("inflect")
    payload = [{"id": n.id, "lemma": n.lemma, "lexeme_features": n.features, "bundles": list(n.bundles)} for n in chunk]
    fields = {"language": lang.name, "native_name": lang.native_name or lang.name, "code": lang.code}
    return Request((("system", prompt.system.format(**fields)),
                    ("user", prompt.user.format(items_json=json.dumps(payload, ensure_ascii=False, indent=1), **fields))),
                   "inflections", "fill", lang.code, prompt.hash, expected_output_tokens=30 * sum(len(n.bundles) for n in chunk))


async def propose_forms(ws: Workspace, client: LLMClient, lang: Language, todo: list[Need], *,
                        order: list[Need] | None = None, reask_flagged: bool = False,
                        progress: Progress | None = None) -> FillSummary:
    """Ask for the missing forms, `client.items_per_request` lemmas at a time; store each valid lemma at once. Flagged
    lemmas are asked again with their reason until they wait for a person (or, with `reask_flagged`, even then).

    Requests are cut from `order` (`needs(…, proposals_missing=True)`; default `todo`), each holding those of its
    lemmas that `todo` names: a worker that starts after another has stored some lemmas then cuts the very requests
    the other is sending, waits for their replies and sends none twice."""
    flagged = retries(ws, "fill", lang.code, everything=reask_flagged)
    todo = [n for n in todo if flagged.asks(n.id)]
    asked = {n.id: n for n in todo}
    summary = FillSummary(lemmas=len(todo))
    language = load_language(lang.code)
    stored = {"lemmas": 0}

    def done(lemmas: int) -> None:
        stored["lemmas"] += lemmas
        if progress:
            progress(lang.code, stored["lemmas"], len(todo))

    done(0)

    async def ask(chunk: list[Need]) -> ItemsOutcome | None:
        want = [asked[n.id] for n in chunk if n.id in asked]
        return await _propose_chunk(ws, client, lang, language, want, summary, flagged, done) if want else None

    await client.in_chunks(order or todo, ask, item_id=lambda need: need.id)
    return summary


async def _propose_chunk(ws: Workspace, client: LLMClient, lang: Language, language, chunk: list[Need],
                         summary: FillSummary, flagged: Retries, done: Callable[[int], None]) -> ItemsOutcome:
    wanted = {n.id: n for n in chunk}

    def store(good: dict[str, dict[str, str]], call_id: str) -> None:
        with ws.transaction() as conn:
            for item_id, forms in good.items():
                summary.proposed += store_proposed_forms(conn, wanted[item_id].lang, wanted[item_id].lemma, forms, call_id)
                summary.flagged.pop(wanted[item_id].lemma, None)  # dropped, then asked in a smaller chunk
            clear_flags(conn, "fill", lang.code, good)
        done(len(good))

    outcome = await client.ask_items(request_for(lang, chunk), InflectionBatch, wanted, store,
                                     check=per_item(lambda item: _check(language, wanted[item.id], item)),
                                     instruction="Give every bundle listed for each of them.", earlier=flagged.earlier(wanted))
    with ws.transaction() as conn:
        record_given_up(conn, "fill", lang.code, outcome.reasons)
    summary.flagged.update({wanted[item_id].lemma: reason for item_id, reason in outcome.reasons.items()})
    return outcome


def _check(language, need: Need, item: InflectionItem) -> dict[str, str] | Rejected:
    """The forms of the bundles asked, or why not (the model's mistake: asked again)."""
    forms: dict[str, str] = {}
    for f in item.forms:
        try:
            forms[canonical_bundle(language, f.features)] = f.form
        except LanguageDataError:
            return Rejected(f"unknown bundle {f.features!r}")
    missing = [b for b in need.bundles if b not in forms]
    if missing:
        return Rejected(f"no form for {', '.join(missing)}")
    return {b: forms[b] for b in need.bundles}
