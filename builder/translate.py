"""Stage 2 of XCOMPS: the LLM translates concepts and properties into a target language.

Items go several to a request, with the English source, the German and Chinese seeds and the
category as context. The client's re-ask loop validates replies item by item; good items are stored
at once with their call's lineage, only the bad or missing ones are asked again, a bounded number of
times, and the ones given up on are flagged with the reason. A later run asks them again, with the
reason (`builder.flags.Retries`), until they wait for a person.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from pydantic import BaseModel, Field, field_validator
from sqlalchemy import select

from builder.flags import Retries, clear_flags, record_given_up, retries
from builder.languages import SEED_LANGUAGES, SOURCE_LANGUAGE
from builder.llm.client import LLMClient, Request, prompt_hash
from builder.llm.items import ItemsOutcome
from builder.prompts import load
from builder.records import Language, Proposal
from builder.runner import Progress
from builder.selection import Scope, seeds, verified
from builder.workspace import schema as t
from builder.workspace.store import Workspace, now


class TranslationItem(BaseModel):
    id: str
    translation: str = Field(min_length=1)
    alternatives: list[str]
    note: str
    ambiguous: bool

    @field_validator("translation")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("translation is blank")
        return " ".join(v.split())


class TranslationBatch(BaseModel):
    items: list[TranslationItem]


@dataclass
class TranslateSummary:
    proposed: dict[str, int] = field(default_factory=dict)
    flagged: dict[str, int] = field(default_factory=dict)


def request_for(lang: Language, chunk: list[dict], seed_text: dict) -> Request:
    prompt = load("translate")
    payload = [
        {
            "id": it["id"],
            "kind": it["kind"],
            "english": it["english"],
            **({"category": it["category"]} if it.get("category") else {}),
            **{s: seed_text[(it["id"], s)] for s in SEED_LANGUAGES if (it["id"], s) in seed_text},
        }
        for it in chunk
    ]
    fields = {"language": lang.name, "native_name": lang.native_name or lang.name, "code": lang.code}
    system = prompt.system.format(**fields)
    user = prompt.user.format(items_json=json.dumps(payload, ensure_ascii=False, indent=1), **fields)
    return Request((("system", system), ("user", user)), "translations", "translate", lang.code, prompt.hash,
                   expected_output_tokens=40 * len(chunk))


async def translate(
    ws: Workspace,
    client: LLMClient,
    languages: list[Language],
    *,
    scope: Scope = Scope(),
    progress: Progress | None = None,
    reask_flagged: bool = False,
) -> TranslateSummary:
    """Propose a translation of every item in scope not verified or proposed yet, `client.items_per_request` at a time;
    flagged items are asked again with their reason, until they wait for a person (or, with `reask_flagged`, even then)."""
    summary = TranslateSummary()
    items = scope.items(ws)
    seed_text = seeds(ws, SEED_LANGUAGES)
    jobs = []
    for lang in languages:
        if lang.code == SOURCE_LANGUAGE:
            continue
        done = verified(ws, lang.code)
        # Chunks are cut from a list that does not move as work completes, so a resumed run rebuilds
        # the very same requests and finds their replies in the cache.
        todo = [it for it in items if done.get(it["id"], {}).get("origin") not in ("source", "seed")]
        proposed = _proposed_ids(ws, lang.code)
        flagged = retries(ws, "translate", lang.code, everything=reask_flagged)
        pending = [it for it in todo if it["id"] not in proposed and it["id"] not in done and flagged.asks(it["id"])]
        summary.proposed[lang.code] = 0
        summary.flagged[lang.code] = 0
        counter = {"done": 0, "total": len(pending), "flagged": set()}  # flagged: ids flagged so far in this run
        if progress:
            progress(lang.code, 0, len(pending))
        asked = {it["id"] for it in pending}

        async def ask(chunk, lang=lang, asked=asked, counter=counter, flagged=flagged) -> ItemsOutcome | None:
            want = [it for it in chunk if it["id"] in asked]
            return await _run_chunk(ws, client, lang, want, seed_text, summary, counter, progress, flagged) if want else None

        jobs.append(client.in_chunks(todo, ask, item_id=lambda it: it["id"]))
    await asyncio.gather(*jobs)
    return summary


async def _run_chunk(ws, client: LLMClient, lang, chunk, seed_text, summary, counter, progress, flagged: Retries) -> ItemsOutcome:
    targets = {it["id"]: (it["kind"], 1) for it in chunk}

    def store(good: dict[str, TranslationItem], call_id: str) -> None:
        stored = _store(ws, lang.code, "translate", targets, good, call_id)
        summary.proposed[lang.code] += stored
        summary.flagged[lang.code] -= len(counter["flagged"] & good.keys())  # dropped, then asked in a smaller chunk
        counter["flagged"] -= good.keys()
        counter["done"] += stored
        if progress:
            progress(lang.code, counter["done"], counter["total"])

    outcome = await client.ask_items(request_for(lang, chunk, seed_text), TranslationBatch, targets, store,
                                     earlier=flagged.earlier(targets))
    with ws.transaction() as conn:
        record_given_up(conn, "translate", lang.code, outcome.reasons)
    summary.flagged[lang.code] += len(outcome.flags.keys() - counter["flagged"])
    counter["flagged"] |= outcome.flags.keys()
    return outcome


def _proposed_ids(ws: Workspace, lang: str) -> set[str]:
    return {r["item_id"] for r in ws.rows(select(t.proposals.c.item_id).where(t.proposals.c.lang == lang))}


def _store(ws: Workspace, lang: str, stage: str, targets: dict[str, tuple[str, int]], good: dict[str, TranslationItem],
           call_id: str) -> int:
    """Store each good item as a proposal of its target (kind, revision) and clear its flag, in one transaction.

    Exactly one proposal per item and revision: a reply already stored (a resumed run, or another
    worker that read the same reply) is not stored twice.
    """
    ts = now()
    rows = [
        {**Proposal(item_id=item_id, kind=targets[item_id][0], lang=lang, revision=targets[item_id][1],
                    text=item.translation, alternatives=[a for a in item.alternatives if a.strip()][:5],
                    note=item.note.strip(), ambiguous=item.ambiguous, llm_call_id=call_id).model_dump(), "created_at": ts}
        for item_id, item in good.items()
    ]
    with ws.transaction() as conn:
        stored = ws.upsert_ignore(conn, t.proposals, rows)
        clear_flags(conn, stage, lang, good)
    return stored


async def repropose(ws: Workspace, client: LLMClient, lang: Language, rejected: dict[str, dict], *,
                    reask_flagged: bool = False) -> int:
    """Ask again for items a curator rejected, with the comment; store each answer as the next revision.

    An item the LLM could not answer stays rejected and flagged; later runs ask it again with the reason
    (`builder.flags.Retries`) until it waits for a person (or, with `reask_flagged`, even then)."""
    flagged = retries(ws, "repropose", lang.code, everything=reask_flagged)
    rejected = {i: r for i, r in rejected.items() if flagged.asks(i)}
    items = {it["id"]: it for it in Scope().items(ws) if it["id"] in rejected}
    seed_text = seeds(ws, SEED_LANGUAGES)
    prompt = load("translate")
    follow = load("repropose")
    fields = {"language": lang.name, "native_name": lang.native_name or lang.name, "code": lang.code}
    payload = [
        {**{k: v for k, v in items[i].items() if v is not None},
         **{s: seed_text[(i, s)] for s in SEED_LANGUAGES if (i, s) in seed_text},
         "proposal": r["proposal"]["text"], "decision": r["decision"], "comment": r["comment"] or "(no comment)"}
        for i, r in sorted(rejected.items())
    ]
    targets = {i: (r["proposal"]["kind"], r["proposal"]["revision"] + 1) for i, r in rejected.items()}
    stored = 0

    def store(good: dict[str, TranslationItem], call_id: str) -> None:
        nonlocal stored
        stored += _store(ws, lang.code, "repropose", targets, good, call_id)

    async def ask(chunk: list[dict]) -> ItemsOutcome:
        req = Request((("system", prompt.system.format(**fields)),
                       ("user", follow.user.format(items_json=json.dumps(chunk, ensure_ascii=False, indent=1), **fields))),
                      "translations", "repropose", lang.code, prompt_hash(prompt.hash, follow.hash))
        ids = [it["id"] for it in chunk]
        outcome = await client.ask_items(req, TranslationBatch, ids, store, earlier=flagged.earlier(ids))
        with ws.transaction() as conn:
            record_given_up(conn, "repropose", lang.code, outcome.reasons)
        return outcome

    await client.in_chunks(payload, ask, item_id=lambda it: it["id"])
    return stored
