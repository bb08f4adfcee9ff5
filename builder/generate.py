"""Stage 4 of XCOMPS: the LLM writes the sentences of each minimal pair from verified words.

One request per concept-property (a positive concept with its negatives): the acceptable sentence
is written once and shared by every negative. Each pair must pass the integrity check; failing pairs
are re-asked with the reason (the client's re-ask loop), then stored flagged for review, with the
reason, and flagged in `flags`. English comes straight from the COMPS fields, with any language generated.

A later run writes again the pairs whose words were verified (again) after their sentences were
written, and asks its flagged pairs again with the reason (`builder.flags.Retries`), unless a curator
has taken them up, until they wait for a person. Rewriting rejected pairs (`regenerate`) keeps them
rejected when the LLM fails, so the next `review repropose --stage sentences` asks them again.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from dataclasses import dataclass, field

from pydantic import BaseModel
from sqlalchemy import select

from builder.flags import Retries, clear_flags, record_given_up, retries
from builder.integrity import Located, Realisation, check_pair, locate
from builder.languages import SOURCE_LANGUAGE, registry
from builder.llm.client import LLMClient, Request
from builder.llm.items import Rejected
from builder.prompts import load
from builder.records import Language, SentencePair
from builder.reviews import opinions, sentence_decisions, sentence_lineage
from builder.runner import Progress
from builder.selection import Scope, stale_pairs, verified
from builder.workspace import schema as t
from builder.workspace.store import Workspace, now, upsert_replace


class SentenceItem(Realisation):
    id: str


class SentenceBatch(BaseModel):
    sentences: list[SentenceItem]


@dataclass
class GenerateSummary:
    generated: dict[str, int] = field(default_factory=dict)
    flagged: dict[str, int] = field(default_factory=dict)
    blocked: dict[str, int] = field(default_factory=dict)  # pairs whose words are not verified yet


@dataclass(frozen=True)
class Rewrites:
    """The pairs of one language, already written, that `generate` writes again."""

    stale: frozenset[str]  # a word of theirs was verified after their sentences were written
    flagged: Retries  # the stage's flagged pairs that no curator has taken up
    # (pair, item) for every pair written before the item's word changed, those a curator settled since included: where
    # the item is the acceptable concept or the property, the pair's acceptable sentence names the old word, so it is
    # not shared with the pairs written again.
    outdated: frozenset[tuple[str, str]] = frozenset()

    def asks(self, pair_id: str) -> bool:
        return pair_id in self.stale or (pair_id in self.flagged.flags and self.flagged.asks(pair_id))


def rewrites(ws: Workspace, lang: str, *, reask_flagged: bool = False) -> Rewrites:
    """What `generate` writes again in `lang`: stale pairs, and flagged pairs on whose sentences no curator has
    an opinion yet (those are the curators' to fix or reject), until they wait for a person."""
    flagged = retries(ws, "generate", lang, everything=reask_flagged)
    if flagged.flags:
        curators, adjudicators = opinions(ws, lang, "sentences")
        flagged = Retries({p: f for p, f in flagged.flags.items() if p not in curators and p not in adjudicators},
                          reask_flagged)
    if lang == SOURCE_LANGUAGE:
        return Rewrites(frozenset(), flagged)
    late = stale_pairs(ws, [lang])
    return Rewrites(_stale(ws, lang, late), flagged, frozenset((pid, item) for pid, _, item in late))


def _stale(ws: Workspace, lang: str, late: dict) -> frozenset[str]:
    """Pairs a word of which was verified again after their sentences were written (`late`), less those a curator
    accepted or fixed after that (their task showed the word as it is now): a curator's sentences are never overwritten."""
    decided = sentence_decisions(ws, lang)
    settled = {p: d.decided_at for p, d in sentence_lineage(ws, lang).items()
               if p in decided and decided[p].decision in ("accept", "fix")}
    return frozenset(pid for (pid, _, _), at in late.items() if pid not in settled or settled[pid] < at)


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
    reask_flagged: bool = False,
) -> GenerateSummary:
    """Write the pairs in scope not written yet, and those `rewrites` names, from verified words."""
    summary = GenerateSummary()
    if languages and SOURCE_LANGUAGE not in {lang.code for lang in languages}:
        # English comes with every language: the curator reviews each pair beside its English (straight from COMPS).
        languages = [registry(ws)[SOURCE_LANGUAGE], *languages]
    pairs = scope.pairs(ws)
    concepts = {r["id"]: r for r in ws.rows(select(t.concepts))}
    props = {r["id"]: r for r in ws.rows(select(t.properties))}
    jobs = []
    for lang in languages:
        done = {r["pair_id"] for r in ws.rows(select(t.sentence_pairs.c.pair_id).where(t.sentence_pairs.c.lang == lang.code))}
        again = rewrites(ws, lang.code, reask_flagged=reask_flagged)
        todo = [p for p in pairs if p["id"] not in done or again.asks(p["id"])]
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
            jobs.append(_in_parts(ws, client, lang, groups[gid], words, concepts, props, summary, counter, progress,
                                  again.flagged, again.outdated))
    await asyncio.gather(*jobs)
    return summary


async def _in_parts(ws, client: LLMClient, lang, group, words, concepts, props, summary, counter, progress,
                    flagged: Retries, outdated: frozenset[tuple[str, str]] = frozenset()) -> None:
    """A group's pairs at most `client.items_per_request` concepts to a request (at least a pair): the first part
    writes the acceptable sentence, which the later ones keep. A part left to a dry run or a batch ends it: the rest
    waits for the acceptable sentence."""
    while group:
        negatives = max(1, client.items_per_request - 1)
        part, group = group[:negatives], group[negatives:]
        if not await _run_group(ws, client, lang, part, words, concepts, props, summary, counter, progress, flagged=flagged,
                                outdated=outdated):
            return


async def regenerate(
    ws: Workspace, client: LLMClient, lang: Language, rejected: dict[str, str], *, progress: Progress | None = None,
    reask_flagged: bool = False,
) -> GenerateSummary:
    """Write rejected pairs again, with the rejected sentences and the curators' comments in the prompt.

    The new sentences replace the old ones only once they pass the integrity check, so an interrupted
    run, or one whose rewrite fails, leaves the rejected pairs rejected: a failed pair is flagged (stage
    `regenerate`) and the next run asks it again with the reason, until it waits for a person (or, with
    `reask_flagged`, even then).
    """
    flagged = retries(ws, "regenerate", lang.code, everything=reask_flagged)
    summary = GenerateSummary(generated={lang.code: 0}, flagged={lang.code: 0}, blocked={lang.code: 0})
    rejected = {pid: comment for pid, comment in rejected.items() if flagged.asks(pid)}
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
        jobs.append(_run_group(ws, client, lang, groups[gid], words, concepts, props, summary, counter, progress, feedback,
                               flagged=flagged))
    await asyncio.gather(*jobs)
    return summary


def _shared_acceptable(ws: Workspace, group_id: str, lang: str, rewritten: list[str]) -> dict | None:
    """The acceptable sentence already written for this concept-property, if any, on a pair not in `rewritten` (those
    being written again, and those whose acceptable sentence names an old word)."""
    rows = ws.rows(
        select(t.sentence_pairs.c.acceptable, t.sentence_pairs.c.spans, t.sentence_pairs.c.acceptable_form)
        .join(t.pairs, t.pairs.c.id == t.sentence_pairs.c.pair_id)
        .where(t.pairs.c.group_id == group_id, t.sentence_pairs.c.lang == lang, t.sentence_pairs.c.status == "generated",
               t.sentence_pairs.c.pair_id.not_in(rewritten))
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


REWRITE = ("Rewrite them so that each contains its verified word and all sentences are identical outside the "
           "concept span.")


async def _run_group(ws, client: LLMClient, lang, group, words, concepts, props, summary, counter, progress,
                     feedback: str = "", *, flagged: Retries, outdated: frozenset[tuple[str, str]] = frozenset()) -> bool:
    """Write a group's pairs (one request and its re-asks); False when the request was deferred (dry run, batch). With
    `feedback` (a rewrite of rejected pairs), a failed pair is flagged and left as it was."""
    acc_id = group[0]["acceptable_id"]
    named_old = [pid for pid, item in outdated if item in (acc_id, group[0]["property_id"])]
    fixed = None if feedback else _shared_acceptable(ws, group[0]["group_id"], lang.code, [*(p["id"] for p in group), *named_old])
    pending = {p["unacceptable_id"]: p for p in group}
    located: dict[str, Located] = {}  # the latest sentence that locates its concept, also for pairs flagged in the end
    if fixed:
        s = fixed["spans"]
        located[acc_id] = Located(sentence=fixed["acceptable"], concept=tuple(s["acceptable_concept"]),
                                  property=tuple(s["acceptable_property"]), form=fixed["acceptable_form"], inflected=False)

    def check(items: dict[str, SentenceItem]) -> dict[str, Located | Rejected]:
        """Locate every concept; then each negative must share the acceptable sentence's frame."""
        verdicts: dict[str, Located | Rejected] = {}
        for cid, item in items.items():
            loc, why = locate(item, words[cid]["text"])
            if loc is None:
                verdicts[cid] = Rejected(why)
            else:
                located[cid] = loc
                verdicts[cid] = loc
        acc = located.get(acc_id)  # fixed, accepted in an earlier reply, or located just now
        for cid in pending.keys() & items.keys():
            if isinstance(verdicts[cid], Rejected):
                continue
            if acc is None:
                verdicts[cid] = Rejected(f"its acceptable sentence ({acc_id}) is not valid yet")
            elif why := check_pair(acc, verdicts[cid]):
                verdicts[cid] = Rejected(why)
                located.pop(cid)
        return verdicts

    def store(accepted: dict[str, Located], call_id: str) -> None:
        passed = [pending[cid] for cid in accepted if cid in pending]
        _store(ws, lang.code, passed, located, acc_id, call_id, "generated", {})
        counter["done"] += len(passed)
        summary.generated[lang.code] += len(passed)
        if progress and passed:
            progress(lang.code, counter["done"], counter["total"])

    req = request_for(lang, group, words, concepts, props, fixed, feedback)
    wanted = ([] if fixed else [acc_id]) + list(pending)
    earlier = flagged.earlier(p["id"] for p in group)
    outcome = await client.ask_items(req, SentenceBatch, wanted, store, check=check, instruction=REWRITE,
                                     context_ids=[acc_id] if fixed else [],
                                     earlier={p["unacceptable_id"]: earlier[p["id"]] for p in group if p["id"] in earlier})
    if outcome.deferred:
        return False
    client.note_outcome(outcome)
    # Out of re-asks: keep what we have, flagged for a curator, with the reason (the acceptable sentence's, when it failed).
    left = [p for cid, p in pending.items() if cid in outcome.flags]
    why = outcome.reasons
    reasons = {p["unacceptable_id"]: f"acceptable sentence: {why[acc_id]}" if acc_id in why else why[p["unacceptable_id"]]
               for p in left}
    if feedback:
        with ws.transaction() as conn:
            record_given_up(conn, "regenerate", lang.code, {p["id"]: reasons[p["unacceptable_id"]] for p in left})
    else:
        _store(ws, lang.code, left, located, acc_id, outcome.last_call_id, "flagged", reasons)
    summary.flagged[lang.code] += len(left)
    counter["done"] += len(left)
    if progress and left:
        progress(lang.code, counter["done"], counter["total"])
    return True


def _store(ws, lang, pairs, located: dict[str, Located], acc_id, call_id, status, reasons: dict[str, str]) -> None:
    """Write the pairs (replacing an earlier version) and set or clear their flags, in one transaction."""
    if not pairs:
        return
    ts = now()
    acc = located.get(acc_id)
    records = []
    for p in pairs:
        un = located.get(p["unacceptable_id"])
        records.append(SentencePair(
            pair_id=p["id"], lang=lang, acceptable=acc.sentence if acc else "", unacceptable=un.sentence if un else "",
            spans={
                "acceptable_concept": acc.concept if acc else None,
                "acceptable_property": acc.property if acc else None,
                "unacceptable_concept": un.concept if un else None,
                "unacceptable_property": un.property if un else None,
            },
            acceptable_form=acc.form if acc else "", unacceptable_form=un.form if un else "", status=status,
            reason=reasons.get(p["unacceptable_id"], ""), origin="llm", llm_call_id=call_id,
        ))
    with ws.transaction() as conn:
        upsert_replace(conn, t.sentence_pairs, [{**r.model_dump(mode="json"), "created_at": ts} for r in records])
        record_given_up(conn, "generate", lang, {p["id"]: reasons[p["unacceptable_id"]] for p in pairs if status == "flagged"})
        if status == "generated":
            clear_flags(conn, ("generate", "regenerate"), lang, [p["id"] for p in pairs])


def _store_english(ws: Workspace, pairs: list[dict], props: dict) -> None:
    ts = now()
    rows = []
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
        rows.append({**record.model_dump(mode="json"), "created_at": ts})
    with ws.transaction() as conn:
        upsert_replace(conn, t.sentence_pairs, rows)
