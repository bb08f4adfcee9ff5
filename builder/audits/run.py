"""Running the pair audits on a workspace and handing their findings to curators as flags.

Each audit flags what it finds under its own stage in `flags` (`builder.flags`), and clears the flags
of the pairs it now finds clean; nothing is dropped or changed in the data. They run after generation
(`builder generate`, the demo), on their own (`builder audit`), and again as a release check
(`builder.releases.checks`) on what would be released:

- `similarity` (lang "en"): the embedding model's similarity of each pair's concepts, stored in
  `pairs.similarity` where it is missing, and each group's negative types checked against it;
- `occurrence`: each sentence names its own concept once and not the other's, on each pair as a release
  would take it (as generated, or as curators accepted or fixed it; `builder.audits.curated`), by the one
  rule the release check also applies;
- `script`: each word (verified, else the latest proposal) and sentence is written in the language's
  declared script (`builder.scripts`): a Latin "bus" among Hindi's Devanagari is flagged, keyed by the
  word's item id or the pair's id; the words alone are audited again after `builder translate` and
  `builder review pull` (`script_audit`);
- `judge`: the LLM's verdict that a negative may have the property, with its reason; a curator's
  decision in Label Studio (stage "judge") then settles the flag (`builder.reviews`);
- concept–property overlap is measured, not flagged (`overlap_report`).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field

from sqlalchemy import select

from builder.audits import judge as judge_mod
from builder.audits import occurrence, similarity
from builder.audits.curated import settled_pair
from builder.audits.overlap import OverlapRow, PairWords, overlap_table
from builder.flags import clear_flags, record_flags
from builder.generate import english_sentence
from builder.languages import SOURCE_LANGUAGE, registry
from builder.llm.client import LLMClient
from builder.records import Language
from builder.reviews import SentenceReview, judge_decisions, latest_proposals, sentence_decisions
from builder.runner import Progress
from builder.scripts import outside_script, pair_outside_script
from builder.seeds import record_similarities
from builder.selection import Scope, verified
from builder.workspace import schema as t
from builder.workspace.store import Workspace, collector_paused


@dataclass
class AuditSummary:
    findings: dict[str, dict[str, int]] = field(default_factory=dict)  # lang -> audit -> pairs flagged now
    judged: dict[str, int] = field(default_factory=dict)  # lang -> pairs the judge gave a verdict on
    similarities: int = 0  # pairs whose similarity was computed in this run

    def count(self, lang: str, audit: str, n: int) -> None:
        self.findings.setdefault(lang, {})[audit] = self.findings.get(lang, {}).get(audit, 0) + n

    @property
    def total(self) -> int:
        return sum(n for by in self.findings.values() for n in by.values())

    def describe(self) -> str:
        """One line: the findings by language and audit, similarities computed, verdicts by language."""
        found = "; ".join(f"{lang} " + ", ".join(f"{k} {v}" for k, v in by.items() if v)
                          for lang, by in sorted(self.findings.items()) if any(by.values()))
        return (f"pair audits: {self.total} finding(s) flagged" + (f" ({found})" if found else "")
                + f"; similarities computed {self.similarities}; judged "
                + (", ".join(f"{k} {v}" for k, v in sorted(self.judged.items())) or "nothing"))


async def audit(ws: Workspace, client: LLMClient | None, languages: list[Language], *, scope: Scope = Scope(),
                progress: Progress | None = None) -> AuditSummary:
    """Audit the generated pairs in scope in these languages; without a client the judge is left out."""
    summary = AuditSummary()
    pairs = {p["id"]: p for p in scope.pairs(ws)}
    concepts = {r["id"]: r["english"] for r in ws.rows(select(t.concepts.c.id, t.concepts.c.english))}
    props = {r["id"]: r for r in ws.rows(select(t.properties))}
    _similarity(ws, pairs, concepts, summary)
    items = {p[k] for p in pairs.values() for k in ("property_id", "acceptable_id", "unacceptable_id")}
    jobs = []
    for lang in languages:
        sentences = {r["pair_id"]: r for r in ws.rows(select(t.sentence_pairs).where(t.sentence_pairs.c.lang == lang.code))
                     if r["pair_id"] in pairs}
        words = {item: w["text"] for item, w in verified(ws, lang.code).items()}
        _occurrence(ws, lang, pairs, sentences, words, summary)
        _script(ws, lang, items, sentences, words, summary)
        if client is not None:
            generated = {pid: sp for pid, sp in sentences.items() if sp["status"] == "generated"}
            jobs.append(_judge(ws, client, lang, pairs, generated, words, concepts, props, summary, progress))
    await asyncio.gather(*jobs)
    return summary


def _settle(ws: Workspace, stage: str, lang: str, audited: Collection[str], found: dict[str, str], summary: AuditSummary) -> None:
    """Flag what an audit found among the pairs it audited, and clear the rest of them, in one transaction."""
    with ws.transaction() as conn:
        clear_flags(conn, stage, lang, [pid for pid in audited if pid not in found])
        record_flags(conn, stage, lang, found)
    summary.count(lang, stage, len(found))


def _similarity(ws: Workspace, pairs: dict[str, dict], concepts: dict[str, str], summary: AuditSummary) -> None:
    missing = [p for p in pairs.values() if p["similarity"] is None]
    if missing:
        values = similarity.similarities([(concepts[p["acceptable_id"]], concepts[p["unacceptable_id"]]) for p in missing])
        record_similarities(ws, {p["id"]: v for p, v in zip(missing, values)})
        for p, v in zip(missing, values):
            pairs[p["id"]] = {**p, "similarity": v}
        summary.similarities = len(missing)
    groups: dict[str, dict[str, tuple[str, str, float | None]]] = defaultdict(dict)
    for p in pairs.values():
        groups[p["group_id"]][p["negative_type"]] = (p["id"], concepts[p["unacceptable_id"]], p["similarity"])
    positive = {p["group_id"]: concepts[p["acceptable_id"]] for p in pairs.values()}
    found = {pid: why for gid, negs in groups.items() for pid, why in similarity.type_problems(positive[gid], negs).items()}
    _settle(ws, "similarity", SOURCE_LANGUAGE, list(pairs), found, summary)


def _as_released(pair: dict, sp: dict, review: SentenceReview | None, words: dict[str, str],
                 lang: Language) -> tuple[tuple[str, str], tuple, tuple[str, str]] | None:
    """A pair's sentences, concept spans and concept words as a release would take them (`builder.releases.rows`):
    as generated, or as a curator accepted or fixed them; None for a pair no release takes as it is (rejected by a
    curator, or flagged and not yet written by one)."""
    spans = sp["spans"]
    got = (spans.get("acceptable_concept"), spans.get("unacceptable_concept"), spans.get("acceptable_property"))
    acc, unacc = (words.get(pair[f"{role}_id"]) for role in ("acceptable", "unacceptable"))
    if review is None:
        return None if sp["status"] != "generated" else ((sp["acceptable"], sp["unacceptable"]), got[:2], (acc, unacc))
    if review.decision not in ("accept", "fix"):
        return None
    s = settled_pair((sp["acceptable"], sp["unacceptable"]), tuple(tuple(x) if x else None for x in got),
                (sp["acceptable_form"], sp["unacceptable_form"]), (review.acceptable, review.unacceptable),
                (words.get(pair["property_id"]), acc, unacc), spaced=lang.spaced, script=lang.script)
    return (s.acceptable, s.unacceptable), (s.acceptable_span, s.unacceptable_span), (s.acceptable_word, s.unacceptable_word)


def _occurrence(ws: Workspace, lang: Language, pairs, sentences: dict[str, dict], words: dict[str, str],
                summary: AuditSummary) -> None:
    """Each pair as it would be released, by the rule the release check applies (`occurrence.problems`)."""
    found, audited = {}, []
    decided = sentence_decisions(ws, lang.code)
    for pid, sp in sentences.items():
        released = _as_released(pairs[pid], sp, decided.get(pid), words, lang)
        if released is None:
            continue  # no release takes it as it is: its flag, if any, stays until it is written again
        audited.append(pid)
        texts, spans, names = released
        if None in spans:
            continue  # the integrity check's business
        sides = [occurrence.Side(sentence=text, span=tuple(span), names=occurrence.names(name, sp[f"{role}_form"]))
                 for role, text, span, name in zip(("acceptable", "unacceptable"), texts, spans, names)]
        if problems := occurrence.problems(*sides, spaced=lang.spaced, script=lang.script):
            found[pid] = "; ".join(problems)
    _settle(ws, "occurrence", lang.code, audited, found, summary)


def _script(ws: Workspace, lang: Language, items: Collection[str], sentences: dict[str, dict], words: dict[str, str],
            summary: AuditSummary) -> None:
    """Flag the words of these items (verified, else proposed) and these sentence pairs where they have letters
    outside the language's declared script; clear the flags of those now written in it."""
    proposed = {i: p["text"] for i, p in latest_proposals(ws, lang.code).items() if i in items and i not in words}
    current = {i: ("verified word", words[i]) for i in items if i in words} | {i: ("proposal", w) for i, w in proposed.items()}
    found = {i: f"the {what} {why}" for i, (what, text) in current.items() if (why := outside_script(text, lang))}
    for pid, sp in sentences.items():
        if why := pair_outside_script(sp["acceptable"], sp["unacceptable"], lang):
            found[pid] = why
    _settle(ws, "script", lang.code, [*current, *sentences], found, summary)


def script_audit(ws: Workspace, languages: list[Language], *, scope: Scope = Scope()) -> AuditSummary:
    """The script audit of the words alone, as proposals and verifications change them (after `builder translate`
    and `builder review pull`); sentences are audited with the pairs."""
    summary = AuditSummary()
    items = {it["id"] for it in scope.items(ws)}
    for lang in languages:
        _script(ws, lang, items, {}, {item: w["text"] for item, w in verified(ws, lang.code).items()}, summary)
    return summary


async def _judge(ws: Workspace, client: LLMClient, lang: Language, pairs, sentences, words, concepts, props,
                 summary: AuditSummary, progress: Progress | None) -> None:
    english = {r["pair_id"]: r["unacceptable"] for r in ws.rows(select(t.sentence_pairs.c.pair_id, t.sentence_pairs.c.unacceptable)
                                                                .where(t.sentence_pairs.c.lang == SOURCE_LANGUAGE))}
    groups: dict[str, list[judge_mod.Statement]] = defaultdict(list)
    for pid in sorted(sentences):
        p = pairs[pid]
        groups[p["group_id"]].append(judge_mod.Statement(
            id=pid, concept=words.get(p["unacceptable_id"], ""), concept_en=concepts[p["unacceptable_id"]],
            statement=sentences[pid]["unacceptable"],
            english=english.get(pid) or english_sentence(p["prefix_unacceptable"], props[p["property_id"]]["phrase"])[0]))
    counter = {"done": 0}
    if progress:
        progress(f"judge {lang.code}", 0, len(sentences))
    verdicts: dict[str, judge_mod.Verdict] = {}
    unjudged: dict[str, str] = {}

    async def one(statements: list[judge_mod.Statement]) -> None:
        prop = props[pairs[statements[0].id]["property_id"]]
        got = await judge_mod.judge(client, lang, prop["english"], words.get(prop["id"], prop["english"]), statements)
        if got is None:  # deferred (dry run, batch): nothing to settle yet
            return
        verdicts.update(got[0])
        unjudged.update(got[1])
        counter["done"] += len(statements)
        if progress:
            progress(f"judge {lang.code}", counter["done"], len(sentences))

    await asyncio.gather(*(one(groups[gid]) for gid in sorted(groups)))
    decided = judge_decisions(ws, lang.code)  # a curator's decision settles the flag (builder.reviews)
    audited = [pid for pid in (*verdicts, *unjudged) if pid not in decided]
    found = {pid: f"the judge says {concepts[pairs[pid]['unacceptable_id']]!r} may have the property: {v.reason}"
             for pid, v in verdicts.items() if v.may_have_property and pid not in decided}
    found |= {pid: f"the judge gave no verdict ({why})" for pid, why in unjudged.items() if pid not in decided}
    _settle(ws, "judge", lang.code, audited, found, summary)
    summary.judged[lang.code] = len(verdicts)


def overlap_report(ws: Workspace, codes: Collection[str]) -> list[OverlapRow]:
    """Concept–property overlap of the generated pairs in these languages, by language and negative type."""
    reg = registry(ws)
    pc, sp, vw = t.pairs.c, t.sentence_pairs.c, t.verified_words.c
    pairs = ws.rows(select(pc.id, pc.negative_type, pc.property_id, pc.acceptable_id, pc.unacceptable_id))
    rows = []
    with collector_paused():  # a million pairs' tuples, none in a cycle
        for code in sorted(codes):
            words = {r["item_id"]: r["text"] for r in ws.rows(select(vw.item_id, vw.text).where(vw.lang == code))}
            generated = set(ws.column(select(sp.pair_id).where(sp.lang == code, sp.status == "generated")))
            spaced, script = (reg[code].spaced, reg[code].script) if code in reg else (True, "Latn")
            rows += overlap_table(code, (PairWords(p["negative_type"], words[p["property_id"]], words[p["acceptable_id"]],
                                                   words[p["unacceptable_id"]])
                                         for p in pairs if p["id"] in generated and p["property_id"] in words
                                         and p["acceptable_id"] in words and p["unacceptable_id"] in words),
                                  spaced=spaced, script=script)
    return rows
