"""Stage 4 of XCOMPS: the LLM writes the sentences of each minimal pair from verified words.

One request per concept-property (a positive concept with its negatives): the acceptable sentence
is written once and shared by every negative. Each pair must pass the integrity check; failing pairs
are re-asked with the reason, then flagged for review. English comes straight from the COMPS fields.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from dataclasses import dataclass, field

from pydantic import BaseModel
from sqlalchemy import select

from builder.integrity import Located, Realisation, check_pair, locate
from builder.languages import SOURCE_LANGUAGE
from builder.llm.client import LLMClient, Request, validate_items
from builder.prompts import load
from builder.runner import Progress
from builder.records import Language, SentencePair
from builder.selection import Scope, verified
from builder.workspace import schema as t
from builder.workspace.store import Workspace, now


class SentenceItem(Realisation):
    id: str


class SentenceBatch(BaseModel):
    sentences: list[SentenceItem]


@dataclass
class GenerateSummary:
    generated: dict[str, int] = field(default_factory=dict)
    flagged: dict[str, int] = field(default_factory=dict)
    blocked: dict[str, int] = field(default_factory=dict)  # pairs whose words are not verified yet


def english_sentence(prefix: str, phrase: str) -> tuple[str, tuple[int, int], tuple[int, int]]:
    prefix = prefix.strip()
    text = prefix[:1].upper() + prefix[1:] + " " + phrase.strip()
    body = phrase.strip().rstrip(".")
    return text, (0, len(prefix)), (len(prefix) + 1, len(prefix) + 1 + len(body))


async def generate(
    ws: Workspace,
    client: LLMClient,
    languages: list[Language],
    *,
    scope: Scope = Scope(),
    progress: Progress | None = None,
) -> GenerateSummary:
    summary = GenerateSummary()
    pairs = scope.pairs(ws)
    concepts = {r["id"]: r for r in ws.rows(select(t.concepts))}
    props = {r["id"]: r for r in ws.rows(select(t.properties))}
    jobs = []
    for lang in languages:
        done = {r["pair_id"] for r in ws.rows(select(t.sentence_pairs.c.pair_id).where(t.sentence_pairs.c.lang == lang.code))}
        todo = [p for p in pairs if p["id"] not in done]
        summary.generated[lang.code] = summary.flagged[lang.code] = summary.blocked[lang.code] = 0
        if lang.code == SOURCE_LANGUAGE:
            _store_english(ws, todo, props)
            summary.generated[lang.code] = len(todo)
            continue
        words = verified(ws, lang.code)
        groups: dict[str, list[dict]] = defaultdict(list)
        for p in todo:
            needed = (p["property_id"], p["acceptable_id"], p["unacceptable_id"])
            if all(w in words for w in needed):
                groups[p["group_id"]].append(p)
            else:
                summary.blocked[lang.code] += 1
        counter = {"done": 0, "total": sum(len(g) for g in groups.values())}
        if progress:
            progress(lang.code, 0, counter["total"])
        for gid in sorted(groups):
            jobs.append(_run_group(ws, client, lang, groups[gid], words, concepts, props, summary, counter, progress))
    await asyncio.gather(*jobs)
    return summary


async def regenerate(
    ws: Workspace, client: LLMClient, lang: Language, rejected: dict[str, str], *, progress: Progress | None = None
) -> GenerateSummary:
    """Write rejected pairs again, with the rejected sentences and the curators' comments in the prompt.

    The new sentences replace the old ones only once they pass the integrity check, so an
    interrupted run leaves the rejected pairs rejected and the next run picks them up again.
    """
    summary = GenerateSummary(generated={lang.code: 0}, flagged={lang.code: 0}, blocked={lang.code: 0})
    pairs = {r["id"]: r for r in ws.rows(select(t.pairs).where(t.pairs.c.id.in_(list(rejected))))}
    current = {r["pair_id"]: r for r in ws.rows(select(t.sentence_pairs).where(
        t.sentence_pairs.c.lang == lang.code, t.sentence_pairs.c.pair_id.in_(list(rejected))))}
    concepts = {r["id"]: r for r in ws.rows(select(t.concepts))}
    props = {r["id"]: r for r in ws.rows(select(t.properties))}
    words = verified(ws, lang.code)
    groups: dict[str, list[dict]] = defaultdict(list)
    for pid in sorted(rejected):
        groups[pairs[pid]["group_id"]].append(pairs[pid])
    counter = {"done": 0, "total": len(rejected)}
    jobs = []
    for gid in sorted(groups):
        lines = "".join(f'- "{current[p["id"]]["acceptable"]}" / "{current[p["id"]]["unacceptable"]}": '
                        f'{rejected[p["id"]] or "no comment"}\n' for p in groups[gid])
        feedback = f"A curator rejected these sentences; write new ones that answer the comments:\n{lines}"
        jobs.append(_run_group(ws, client, lang, groups[gid], words, concepts, props, summary, counter, progress, feedback))
    await asyncio.gather(*jobs)
    return summary


def _shared_acceptable(ws: Workspace, group_id: str, lang: str) -> dict | None:
    """The acceptable sentence already written for this concept-property, if any."""
    rows = ws.rows(
        select(t.sentence_pairs.c.acceptable, t.sentence_pairs.c.spans, t.sentence_pairs.c.acceptable_form)
        .join(t.pairs, t.pairs.c.id == t.sentence_pairs.c.pair_id)
        .where(t.pairs.c.group_id == group_id, t.sentence_pairs.c.lang == lang, t.sentence_pairs.c.status == "generated")
        .limit(1)
    )
    return rows[0] if rows else None


def request_for(lang: Language, group: list[dict], words, concepts, props, fixed: dict | None, feedback: str = "") -> Request:
    prompt = load("generate")
    first = group[0]
    prop = props[first["property_id"]]
    ids = [first["acceptable_id"]] + [p["unacceptable_id"] for p in group]
    payload = [{"id": cid, "english": concepts[cid]["english"], "verified": words[cid]["text"]} for cid in ids]
    example = english_sentence(first["prefix_acceptable"], prop["phrase"])[0]
    fixed_text = (
        f'The sentence for "{words[first["acceptable_id"]]["text"]}" is already fixed: "{fixed["acceptable"]}". '
        "Keep its frame.\n"
        if fixed
        else ""
    ) + feedback
    fields = {"language": lang.name, "native_name": lang.native_name or lang.name, "code": lang.code,
              "generation_notes": lang.generation_notes}
    system = prompt.system.format(**fields)
    user = prompt.user.format(
        property_en=prop["english"], property=words[prop["id"]]["text"], example=example, fixed=fixed_text,
        concepts_json=json.dumps(payload, ensure_ascii=False, indent=1), **fields,
    )
    return Request((("system", system), ("user", user)), "sentences", "generate", lang.code, prompt.hash,
                   expected_output_tokens=60 * len(ids))


async def _run_group(ws, client: LLMClient, lang, group, words, concepts, props, summary, counter, progress,
                     feedback: str = "") -> None:
    acc_id = group[0]["acceptable_id"]
    fixed = None if feedback else _shared_acceptable(ws, group[0]["group_id"], lang.code)
    req = request_for(lang, group, words, concepts, props, fixed, feedback)
    pending = {p["unacceptable_id"]: p for p in group}
    located: dict[str, Located] = {}
    if fixed:
        s = fixed["spans"]
        located[acc_id] = Located(sentence=fixed["acceptable"], concept=tuple(s["acceptable_concept"]),
                                  property=tuple(s["acceptable_property"]), form=fixed["acceptable_form"], inflected=False)
    reasons: dict[str, str] = {}
    call_id = None
    for _ in range(client.settings.max_reasks + 1):
        reply = await client.ask(req, SentenceBatch)
        if reply is None:
            return
        call_id = reply.call_id
        try:
            raw = json.loads(reply.text)["sentences"]
            if not isinstance(raw, list):
                raise TypeError("'sentences' is not a list")
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            req = req.followup(reply.text, f"Your reply could not be read ({exc}). Reply with the JSON object only.")
            continue
        good, bad = validate_items(raw, SentenceItem, key=lambda s: s.id)
        reasons = {}
        for cid in [acc_id, *pending] if acc_id not in located else list(pending):
            if cid not in good:
                reasons[cid] = bad.get(cid, "missing from the reply")
                continue
            loc, why = locate(good[cid], words[cid]["text"])
            if loc is None:
                reasons[cid] = why
            else:
                located[cid] = loc
        if acc_id in located:
            passed = []
            for cid, pair in pending.items():
                if cid in located and not (why := check_pair(located[acc_id], located[cid])):
                    passed.append(cid)
                elif cid in located:
                    reasons[cid] = why
                    located.pop(cid)
            _store(ws, lang.code, [pending[c] for c in passed], located, acc_id, reply.call_id, "generated", {})
            for cid in passed:
                pending.pop(cid)
            counter["done"] += len(passed)
            summary.generated[lang.code] += len(passed)
            if progress:
                progress(lang.code, counter["done"], counter["total"])
        if not pending:
            return
        asked = ([acc_id] if acc_id not in located else []) + list(pending)
        problems = "; ".join(f"{cid}: {reasons.get(cid, 'rejected')}" for cid in asked)
        req = req.followup(
            reply.text,
            f"These sentences were rejected: {problems}. Rewrite them so that each contains its verified word and "
            "all sentences are identical outside the concept span. Reply with a JSON object "
            '{"sentences": [...]} holding only those ids'
            + (f" and {acc_id}" if acc_id in located and fixed is None else "") + ".",
        )
    # Out of re-asks: keep what we have, flagged for a curator.
    _store(ws, lang.code, list(pending.values()), located, acc_id, call_id, "flagged", reasons)
    summary.flagged[lang.code] += len(pending)
    counter["done"] += len(pending)
    if progress:
        progress(lang.code, counter["done"], counter["total"])


def _store(ws, lang, pairs, located: dict[str, Located], acc_id, call_id, status, reasons) -> None:
    if not pairs:
        return
    ts = now()
    acc = located.get(acc_id)
    with ws.transaction() as conn:
        for p in pairs:
            un = located.get(p["unacceptable_id"])
            record = SentencePair(
                pair_id=p["id"], lang=lang, acceptable=acc.sentence if acc else "", unacceptable=un.sentence if un else "",
                spans={
                    "acceptable_concept": acc.concept if acc else None,
                    "acceptable_property": acc.property if acc else None,
                    "unacceptable_concept": un.concept if un else None,
                    "unacceptable_property": un.property if un else None,
                },
                acceptable_form=acc.form if acc else "", unacceptable_form=un.form if un else "", status=status,
                reason=(reasons.get(p["unacceptable_id"]) or reasons.get(acc_id, "")) if status == "flagged" else "",
                origin="llm", llm_call_id=call_id,
            )
            conn.execute(t.sentence_pairs.delete().where(t.sentence_pairs.c.pair_id == p["id"], t.sentence_pairs.c.lang == lang))
            conn.execute(t.sentence_pairs.insert().values(**record.model_dump(mode="json"), created_at=ts))


def _store_english(ws: Workspace, pairs: list[dict], props: dict) -> None:
    ts = now()
    with ws.transaction() as conn:
        for p in pairs:
            phrase = props[p["property_id"]]["phrase"]
            acc, ac, ap = english_sentence(p["prefix_acceptable"], phrase)
            un, uc, up = english_sentence(p["prefix_unacceptable"], phrase)
            record = SentencePair(
                pair_id=p["id"], lang=SOURCE_LANGUAGE, acceptable=acc, unacceptable=un,
                spans={"acceptable_concept": ac, "acceptable_property": ap, "unacceptable_concept": uc,
                       "unacceptable_property": up},
                acceptable_form=p["prefix_acceptable"].split()[-1], unacceptable_form=p["prefix_unacceptable"].split()[-1],
                status="generated", origin="comps",
            )
            conn.execute(t.sentence_pairs.insert().values(**record.model_dump(mode="json"), created_at=ts))
