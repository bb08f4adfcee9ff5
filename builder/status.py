"""Per language and stage: how many items are pending, proposed, verified, generated and flagged, and the
concept–property overlap of its generated pairs; the flagged items (LLM stages, pair audits), with their
reasons; and what the LLM calls cost, in which structured-output mode each endpoint was asked."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from datetime import datetime

from pydantic import BaseModel
from sqlalchemy import case, func, select

from builder.audits import OverlapRow, overlap_report
from builder.flags import Flag, flag_counts, list_flags
from builder.languages import SOURCE_LANGUAGE
from builder.llm.cache import LLMCache
from builder.reviews import sentence_decisions
from builder.workspace import schema as t
from builder.workspace.store import Workspace


class StageCounts(BaseModel):
    pending: int = 0
    proposed: int = 0
    verified: int = 0
    generated: int = 0
    flagged: int = 0


class LanguageStatus(BaseModel):
    lang: str
    translate: StageCounts
    generate: StageCounts
    flags: dict[str, int]  # stage -> items it flagged (builder.flags: LLM stages, pair audits), for every stage that has some
    overlap: list[OverlapRow] = []  # concept–property overlap of the generated pairs, by negative type


class FlaggedItem(Flag):
    what: str  # the item in words: the English text, the pair, or "" where the workspace cannot tell


def status(ws: Workspace, codes: list[str]) -> list[LanguageStatus]:
    """Counted by the database, a handful of rows per language, however large the workspace."""
    n_items = ws.count(t.concepts) + ws.count(t.properties)
    n_pairs = ws.count(t.pairs)
    vw, pr = t.verified_words, t.proposals
    verified = Counter({r["lang"]: r["n"] for r in ws.rows(select(vw.c.lang, func.count().label("n")).group_by(vw.c.lang))})
    open_items = (select(pr.c.lang, func.count(func.distinct(pr.c.item_id)).label("open"),
                         func.count(func.distinct(case((pr.c.ambiguous.is_(True), pr.c.item_id)))).label("ambiguous"))
                  .select_from(pr.outerjoin(vw, (vw.c.item_id == pr.c.item_id) & (vw.c.lang == pr.c.lang)))
                  .where(vw.c.item_id.is_(None)).group_by(pr.c.lang))
    rows = ws.rows(open_items)
    open_proposals = Counter({r["lang"]: r["open"] for r in rows})  # items proposed and not verified yet
    ambiguous = Counter({r["lang"]: r["ambiguous"] for r in rows})
    flags = flag_counts(ws)
    sentences = {
        (r["lang"], r["status"]): r["n"]
        for r in ws.rows(
            select(t.sentence_pairs.c.lang, t.sentence_pairs.c.status, func.count().label("n")).group_by(
                t.sentence_pairs.c.lang, t.sentence_pairs.c.status
            )
        )
    }
    overlap: dict[str, list[OverlapRow]] = {}
    for row in overlap_report(ws, [c for c in codes if sentences.get((c, "generated"))]):
        overlap.setdefault(row.lang, []).append(row)
    out = []
    for code in codes:
        v = verified[code]
        tr = StageCounts(
            verified=v,
            proposed=open_proposals[code],
            flagged=ambiguous[code] + flags["translate", code],
            pending=max(0, n_items - v - open_proposals[code] - flags["translate", code]),
        )
        gen_ok, gen_flag = sentences.get((code, "generated"), 0), sentences.get((code, "flagged"), 0)
        if gen_flag:  # a pair the LLM gave up on and a curator wrote is written, not flagged
            written = _written_by_curators(ws, code)
            gen_ok, gen_flag = gen_ok + written, gen_flag - written
        ge = StageCounts(generated=gen_ok, flagged=gen_flag, pending=max(0, n_pairs - gen_ok - gen_flag))
        if code == SOURCE_LANGUAGE:
            tr = StageCounts(verified=v)
        out.append(LanguageStatus(lang=code, translate=tr, generate=ge,
                                  flags={stage: n for (stage, lang), n in sorted(flags.items()) if lang == code},
                                  overlap=overlap.get(code, [])))
    return out


def _written_by_curators(ws: Workspace, lang: str) -> int:
    """Pairs in `lang` the LLM gave up on whose sentences a curator wrote or accepted."""
    sp = t.sentence_pairs
    flagged = set(ws.column(select(sp.c.pair_id).where(sp.c.lang == lang, sp.c.status == "flagged")))
    return sum(1 for p, d in sentence_decisions(ws, lang).items() if p in flagged and d.decision in ("accept", "fix"))


def flagged_items(ws: Workspace, *, stage: str | None = None, langs: Collection[str] | None = None) -> list[FlaggedItem]:
    """The flagged items, each with what it is: a concept's or property's English, or a pair's concepts and property."""
    english = {r["id"]: r["english"] for table in (t.concepts, t.properties)
               for r in ws.rows(select(table.c.id, table.c.english))}
    pairs = {r["id"]: f"{english[r['acceptable_id']]} / {english[r['unacceptable_id']]}: {english[r['property_id']]}"
             for r in ws.rows(select(t.pairs.c.id, t.pairs.c.acceptable_id, t.pairs.c.unacceptable_id, t.pairs.c.property_id))}
    return [FlaggedItem(**f.model_dump(), what=english.get(f.item_id) or pairs.get(f.item_id, ""))
            for f in list_flags(ws, stage=stage, langs=langs)]


class CallCounts(BaseModel):
    """The LLM calls of one stage, model and mode; `unpriced` of them have no known price (not in the table)."""

    stage: str
    model: str
    mode: str | None  # None: the calls record no mode (stored by a workspace of schema 5 or older)
    calls: int
    tokens_in: int
    tokens_out: int
    cost_usd: float  # of the priced calls only
    unpriced: int


class EndpointMode(BaseModel):
    endpoint: str  # redacted
    model: str
    mode: str
    refusals: dict[str, str]  # stronger mode -> the server's words refusing it
    probed_at: datetime


class LLMUsage(BaseModel):
    calls: list[CallCounts]
    endpoints: list[EndpointMode]

    @property
    def cost_usd(self) -> float:
        return sum(c.cost_usd for c in self.calls)

    @property
    def unpriced(self) -> int:
        return sum(c.unpriced for c in self.calls)


def llm_usage(ws: Workspace) -> LLMUsage:
    cache = LLMCache.of_workspace(ws)
    return LLMUsage(calls=[CallCounts(**r) for r in cache.usage()], endpoints=[EndpointMode(**r) for r in cache.endpoints()])
