"""Review decisions and verified words: the one module that records them and answers for them.

Decisions arrive through every channel — `builder accept` (`accept`), a Label Studio pull (typed
`Annotation` records that `annotation` parses from the export, `record_pull`), an adjudication (an
annotation of a stage's adjudication stage) — and verified words also from the seeds
(`record_seed_words`). This module alone writes `reviews`, `verified_words`, `review_annotations`,
`sentence_reviews`, `table_reviews` and `review_projects`; decisions on inflection tables go to
`builder.m2c.lexicon.verify_fills`, the writer of `lexicon_forms`, and decisions on the judge's verdicts
(stage "judge": is a negative a false negative?) to the judge's flags through `builder.flags`. What differs between
stages — their decisions, what a decision is made on, what a settled one does — is each stage's record
(`builder.review_stages`); this module reads it and keeps no table of its own per stage.

The rules it keeps, at every stage (translations, sentence pairs, inflection tables, the judge's verdicts):
- an annotation stays on what it was made on: the proposal (translations), the version of the pair
  (sentences, judge) or of the proposed table (inflections) recorded at its first pull, whatever its
  task shows later;
- a decision counts only for the item's current version: its latest proposal, the pair's current
  sentences, the table waiting for review (or, once decided, the one reviewed last);
- one curator decides alone; several decide together when they agree (on the decision, and on the text
  where the decision leaves one), otherwise the item waits for adjudication, whose decision wins and
  names the adjudicator.
Agreement and adjudication are written once, over "each curator's latest opinion on the current
version" (`opinions`, `_settle`), for every stage.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from pydantic import field_validator, model_validator
from sqlalchemy import select
from sqlalchemy.engine import Connection

from builder.agreement import Agreement
from builder.agreement import agreement as measure_agreement
from builder.errors import InputError
from builder.flags import clear_flags, list_flags, record_flags
from builder.m2c import tables
from builder.m2c.fills import Need
from builder.m2c.lexicon import list_forms, verify_fills, withdraw_fills
from builder.records import Record, VerifiedWord
from builder.review_stages import EDIT_FIELD, base_stage, review_stage
from builder.selection import utc, verified
from builder.textdiff import edit_distance
from builder.workspace import schema as t
from builder.workspace.store import Workspace, collector_paused, now, upsert_replace

__all__ = [
    "AcceptSummary", "Annotation", "Change", "DecisionLineage", "FormsEdit", "Opinion", "PullSummary", "ReviewProject",
    "SentenceEdit", "SentenceReview", "StageAgreement", "StagePull", "TranslationEdit",
    "accept", "curators", "current_pairs", "current_tables", "decide_judgements", "decide_tables",
    "decide_translations", "disagreements", "judge_decisions", "judge_pending", "latest_proposals", "opinions",
    "record_pull", "record_seed_words", "rejected_items", "rejected_pairs", "remember_project",
    "review_project", "review_projects", "review_status", "sentence_decisions", "sentence_lineage", "settle_pair_flags",
    "settled", "stage_agreement",
]

_VERIFYING = ("accept", "corrected")  # translation decisions that make a verified word
_WORD_STAGES = ("translate", "repropose")  # the LLM stages whose flags a verified word settles


# -- what comes in ------------------------------------------------------------------------------------


class TranslationEdit(Record):
    """A translation (or adjudication) task's part of an annotation."""

    proposal_id: int  # the proposal the task showed
    text: str | None = None  # the translation as the curator left it; None: as proposed


class SentenceEdit(Record):
    """A sentence-pair task's part of an annotation."""

    version: str  # the version of the pair the task showed (`current_pairs`)
    draft_acceptable: str
    draft_unacceptable: str
    acceptable: str | None = None  # a sentence as the curator fixed it; None: as drafted
    unacceptable: str | None = None


class FormsEdit(Record):
    """An inflection-table task's part of an annotation (`builder.m2c.tables` reads the table)."""

    lemma: str
    draft: str  # the proposed table as the task showed it
    text: str | None = None  # the table as the curator left it; None: as proposed


class Annotation(Record):
    """One curator's annotation of one task, parsed from a Label Studio export."""

    stage: str
    lang: str
    item_id: str  # concept or property id, pair id, or the lemma's need id
    annotation_id: int  # Label Studio's id, unique on its server
    server: str  # the server's identity (`annotation.server`), which outlives its URL
    task_id: int
    decision: str | None  # None when the curator skipped the task or chose nothing
    comment: str = ""
    reviewer: str
    cancelled: bool = False
    lead_time_s: float | None = None
    created_at: datetime
    updated_at: datetime
    translation: TranslationEdit | None = None  # stage translation and its adjudication
    sentences: SentenceEdit | None = None  # stages sentences and judge, and their adjudications
    forms: FormsEdit | None = None  # stage inflections and its adjudication

    @field_validator("stage")
    @classmethod
    def _registered(cls, v: str) -> str:
        review_stage(v)  # an unknown stage is refused, naming the known ones
        return v

    @field_validator("created_at", "updated_at")
    @classmethod
    def _aware(cls, v: datetime) -> datetime:
        return utc(v)

    @model_validator(mode="after")
    def _fits_its_stage(self) -> Annotation:
        where = f"annotation {self.annotation_id} ({self.stage} {self.lang}, server {self.server})"
        given = [name for name in ("translation", "sentences", "forms") if getattr(self, name) is not None]
        stage = review_stage(self.stage)
        payload = EDIT_FIELD[stage.made_on]
        if given != [payload]:
            raise ValueError(f"{where}: carries {given or 'nothing'}; a {self.stage} annotation carries {payload!r}")
        if self.cancelled and self.decision is not None:
            raise ValueError(f"{where}: a skipped annotation has no decision")
        if self.decision is not None and self.decision not in stage.decisions:
            raise ValueError(f"{where}: decision {self.decision!r} is not one of {', '.join(stage.decisions)}")
        return self


class ReviewProject(Record):
    """The Label Studio project that serves a stage in a language."""

    stage: str
    lang: str
    project_id: int
    title: str
    server: str  # the server's identity, as on `Annotation`

    @field_validator("stage")
    @classmethod
    def _registered(cls, v: str) -> str:
        review_stage(v)
        return v


class SentenceReview(Record):
    """A curator's decision on a pair's current sentences (a sentence review's, or one on the judge's verdict)."""

    pair_id: str
    lang: str
    decision: Literal["accept", "fix", "reject", "false negative", "keep"]
    acceptable: str  # the sentences as the curator left them
    unacceptable: str
    reviewer: str
    comment: str
    annotation_id: int


class StageAgreement(Record):
    """How the curators of one stage in one language agreed, on the items' current versions."""

    stage: str
    agreement: Agreement  # items seen by two or more curators: alpha on decisions, exact match and chrF on texts
    disagreements: int  # items whose curators disagree, waiting for an adjudicator
    adjudicated: int  # items an adjudicator decided


@dataclass
class AcceptSummary:
    accepted: int
    skipped_ambiguous: int
    already_verified: int


class Change(Record):
    """An annotation a pull recorded for the first time, found changed, or found deleted in Label Studio."""

    stage: str
    lang: str
    item_id: str
    reviewer: str
    decision: str | None
    cancelled: bool
    change: Literal["new", "updated", "deleted"]

    @property
    def said(self) -> str:
        """What the curator said: the decision, or that they skipped the task or chose nothing."""
        return "skipped" if self.cancelled else self.decision or "no decision"


@dataclass
class StagePull:
    """A project's annotations a pull found new, updated and deleted, and what the new and updated ones say (each
    decision, "skipped")."""

    new: int = 0
    updated: int = 0
    deleted: int = 0
    said: dict[str, int] = field(default_factory=dict)


@dataclass
class PullSummary:
    new: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0  # annotations gone from Label Studio since the last pull: withdrawn, their rows kept
    changes: list[Change] = field(default_factory=list)  # the new, updated and deleted annotations, one each
    # (stage, lang) -> tasks ignored: made on what this workspace does not have (another workspace's, or made by hand)
    ignored: dict[tuple[str, str], int] = field(default_factory=dict)
    verified: int = 0
    withdrawn: int = 0  # verified words taken back: the decision that verified them no longer holds
    rejected: int = 0
    by_decision: dict[str, int] = field(default_factory=dict)
    forms: dict[str, int] = field(default_factory=dict)  # inflection forms verified, corrected, rejected, invalid, withdrawn
    # (stage, lang) -> items whose curators disagree since this pull (a new, changed or deleted annotation made them)
    disagreements: dict[tuple[str, str], int] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)  # control characters taken out of what curators typed, where

    def by_stage(self) -> dict[tuple[str, str], StagePull]:
        """(stage, lang) -> what this pull brought of the project: a line each, however many items it holds."""
        out: dict[tuple[str, str], StagePull] = {}
        for c in sorted(self.changes, key=lambda c: (c.stage, c.lang)):
            counts = out.setdefault((c.stage, c.lang), StagePull())
            setattr(counts, c.change, getattr(counts, c.change) + 1)
            if c.change != "deleted":
                counts.said[c.said] = counts.said.get(c.said, 0) + 1
        return out


# -- projects -----------------------------------------------------------------------------------------


def review_projects(ws: Workspace, server: str | None = None) -> list[ReviewProject]:
    """The projects remembered (on the server with identity `server`, or anywhere), by stage and language."""
    p = t.review_projects
    stmt = select(p).order_by(p.c.stage, p.c.lang)
    return [ReviewProject(**r) for r in ws.rows(stmt if server is None else stmt.where(p.c.server == server))]


def review_project(ws: Workspace, stage: str, lang: str, server: str) -> ReviewProject | None:
    return next((p for p in review_projects(ws, server) if (p.stage, p.lang) == (stage, lang)), None)


def remember_project(ws: Workspace, project: ReviewProject) -> None:
    """The project now serving (stage, lang); it replaces the one remembered before (one upsert: two pushes to
    different servers may remember theirs at once)."""
    with ws.transaction() as c:
        upsert_replace(c, t.review_projects, [project.model_dump()])


# -- translations ---------------------------------------------------------------------------------------


def latest_proposals(ws: Workspace, lang: str) -> dict[str, dict]:
    """item id -> its latest proposal in `lang`."""
    rows = ws.rows(select(t.proposals).where(t.proposals.c.lang == lang).order_by(t.proposals.c.revision))
    return {r["item_id"]: r for r in rows}


def _write_review(c: Connection, values: dict, review_id: int | None = None) -> int:
    if review_id is None:
        return c.execute(t.reviews.insert().values(**values)).inserted_primary_key[0]
    c.execute(t.reviews.update().where(t.reviews.c.id == review_id).values(**values))
    return review_id


def _write_word(c: Connection, word: VerifiedWord, at: datetime, *, replace: bool) -> None:
    """Write a verified word; the LLM stages' flags on its item are settled by it."""
    clear_flags(c, _WORD_STAGES, word.lang, [word.item_id])
    if replace:
        c.execute(t.verified_words.update().where(t.verified_words.c.item_id == word.item_id, t.verified_words.c.lang == word.lang)
                  .values(**word.model_dump(), verified_at=at))
    else:
        c.execute(t.verified_words.insert().values(**word.model_dump(), verified_at=at))


def accept(ws: Workspace, lang: str, *, reviewer: str, item_ids: list[str] | None = None, include_ambiguous: bool = False,
           channel: str = "cli") -> AcceptSummary:
    """Accept the latest proposal of each item (all, or the given ids) in one transaction.

    Each acceptance is a review (who, when, through which channel) and a verified word pointing at
    both the proposal and the review, so lineage is the same as for a decision made in Label Studio.
    """
    proposals = latest_proposals(ws, lang)
    if item_ids is not None:
        unknown = [i for i in item_ids if i not in proposals]
        if unknown:
            raise InputError(f"no proposal in {lang} for: {', '.join(unknown)}")
        proposals = {i: proposals[i] for i in item_ids}
    done = set(verified(ws, lang))
    accepted = skipped = already = 0
    ts = now()
    with ws.transaction() as c:
        for item_id, prop in sorted(proposals.items()):
            if item_id in done:
                already += 1
                continue
            if prop["ambiguous"] and not include_ambiguous:
                skipped += 1
                continue
            review_id = _write_review(c, dict(proposal_id=prop["id"], decision="accept", final_text=prop["text"],
                                              reviewer=reviewer, comment="", channel=channel, created_at=ts))
            _write_word(c, VerifiedWord(item_id=item_id, lang=lang, kind=prop["kind"], text=prop["text"], origin="review",
                                        reviewer=reviewer, proposal_id=prop["id"], review_id=review_id), ts, replace=False)
            accepted += 1
    return AcceptSummary(accepted, skipped, already)


def record_seed_words(ws: Workspace, c: Connection, words: Iterable[VerifiedWord]) -> int:
    """English source words and expert seed translations, verified as given, inside the seed import's
    transaction `c`; a word already verified stays as it is. Returns how many were new."""
    rows = []
    at = now()
    for w in words:
        if w.origin not in ("source", "seed"):
            raise ValueError(f"{w.lang} {w.item_id}: a seed word's origin is source or seed, not {w.origin!r}")
        rows.append({**w.model_dump(), "verified_at": at})
    for lang in {r["lang"] for r in rows}:  # an expert wrote the word the LLM could not: its flags are settled
        clear_flags(c, _WORD_STAGES, lang, [r["item_id"] for r in rows if r["lang"] == lang])
    return ws.upsert_ignore(c, t.verified_words, rows)


# -- opinions, agreement and adjudication, at every stage ------------------------------------------------------


def _made_on(ws: Workspace, stage: str, lang: str, items: Iterable[str] | None = None) -> tuple[list[dict], dict[str, object]]:
    """The decided annotations of `stage` and of its adjudication in `lang` (on `items` only, when given), each
    with `made_on` (the proposal or the version it was made on), and item -> what the item's current version is."""
    ra = t.review_annotations
    made_on = review_stage(stage).made_on
    where = (ra.c.lang == lang, ra.c.stage.in_(review_stage(stage).names()), ra.c.cancelled.is_(False),
             ra.c.decision.is_not(None), ra.c.withdrawn_at.is_(None))

    def read(stmt) -> list[dict]:
        if items is None:
            return ws.rows(stmt.where(*where))
        return [r for ids in _chunks(sorted(items)) for r in ws.rows(stmt.where(*where, ra.c.item_id.in_(ids)))]

    if made_on == "proposal":
        rows = read(select(ra, ra.c.proposal_id.label("made_on")))
        return rows, {item: p["id"] for item, p in latest_proposals(ws, lang).items()}
    if made_on == "table":
        tr = t.table_reviews
        rows = read(select(ra, tr.c.version.label("made_on"), tr.c.lemma)
                    .join(tr, (tr.c.annotation_id == ra.c.annotation_id) & (tr.c.server == ra.c.server)))
        reviewed_last = {r["item_id"]: r["made_on"] for r in sorted(rows, key=lambda r: r["updated_at"])}
        return rows, reviewed_last | {item: tb["version"] for item, tb in current_tables(ws, lang).items()}
    s = t.sentence_reviews
    rows = read(select(ra, s.c.version.label("made_on"), s.c.acceptable, s.c.unacceptable)
                .join(s, (s.c.annotation_id == ra.c.annotation_id) & (s.c.server == ra.c.server)))
    return rows, pair_versions(ws, lang)


class Opinion(Record):
    """One curator's (or adjudicator's) latest decided annotation on an item's current version: what agreement,
    settling and adjudication read."""

    stage: str
    item_id: str
    reviewer: str
    decision: str
    final_text: str | None  # the text the annotation leaves (the word, the two sentences, the table)
    comment: str
    made_on: int | str  # the proposal, or the version of the pair or table, it was made on
    updated_at: datetime
    server: str
    annotation_id: int
    task_id: int
    proposal_id: int | None = None  # a translation's
    acceptable: str | None = None  # a pair's sentences as the curator left them
    unacceptable: str | None = None


_OPINION = tuple(Opinion.model_fields)


def _latest_opinions(rows: list[dict]) -> dict[str, list[Opinion]]:
    """item -> each curator's latest annotation among `rows`."""
    per: dict[str, dict[str, dict]] = {}
    for r in sorted(rows, key=lambda r: r["updated_at"]):
        per.setdefault(r["item_id"], {})[r["reviewer"]] = r  # a curator's latest revision wins
    return {item: [Opinion(**{k: r[k] for k in _OPINION if k in r}) for r in by.values()] for item, by in per.items()}


def opinions(ws: Workspace, lang: str, stage: str = "translation", items: Iterable[str] | None = None,
             ) -> tuple[dict[str, list[Opinion]], dict[str, list[Opinion]]]:
    """(curators, adjudicators) of a stage in `lang` (of `items` only, when given): item -> each one's latest
    decided annotation on the item's current version."""
    with collector_paused():
        rows, current = _made_on(ws, stage, lang, items)
        on_current = [r for r in rows if current.get(r["item_id"]) == r["made_on"]]
        return (_latest_opinions([r for r in on_current if r["stage"] == stage]),
                _latest_opinions([r for r in on_current if r["stage"] == review_stage(stage).adjudication]))


def _key(stage: str):
    """What curators of `stage` must share to agree: the decision, and the text where the decision leaves one."""
    textual = review_stage(stage).textual
    return lambda a: (a.decision, a.final_text if a.decision in textual else "")


def _agree(anns: list[Opinion], key) -> bool:
    return len({key(a) for a in anns}) == 1


def _settle(stage: str, ops: dict[str, list[Opinion]], adjudicated: dict[str, list[Opinion]]) -> dict[str, tuple[Opinion, str]]:
    """item -> the annotation that decides it and who decided: the curators when they agree, else the adjudicator."""
    key = _key(stage)
    out = {item: (anns[-1], ", ".join(sorted(a.reviewer for a in anns))) for item, anns in ops.items() if _agree(anns, key)}
    out |= {item: (anns[-1], f"{anns[-1].reviewer} (adjudicated)") for item, anns in adjudicated.items()}
    return out


def _open(stage: str, ops: dict[str, list[Opinion]], adjudicated: dict[str, list[Opinion]]) -> dict[str, list[Opinion]]:
    key = _key(stage)
    return {item: anns for item, anns in ops.items() if not _agree(anns, key) and item not in adjudicated}


def settled(ws: Workspace, lang: str, stage: str) -> tuple[dict[str, tuple[Opinion, str]], dict[str, list[Opinion]]]:
    """(decided, disputed) in a stage in `lang`: item -> the annotation that decides it and who decided (`_settle`);
    item -> its curators' annotations, while they disagree and no one has adjudicated."""
    ops, adjudicated = opinions(ws, lang, stage)
    return _settle(stage, ops, adjudicated), _open(stage, ops, adjudicated)


def disagreements(ws: Workspace, lang: str, stage: str = "translation") -> dict[str, list[Opinion]]:
    """Items of `stage` whose curators disagree and that no one has adjudicated yet: item -> the curators' annotations."""
    return _open(stage, *opinions(ws, lang, stage))


def _agreement(stage: str, ops: dict[str, list[Opinion]], adjudicated: dict[str, list[Opinion]]) -> StageAgreement:
    textual = review_stage(stage).textual
    measured = measure_agreement({i: [a.decision for a in v] for i, v in ops.items()},
                                 {i: [a.final_text for a in v if a.decision in textual] for i, v in ops.items()})
    return StageAgreement(stage=stage, agreement=measured, disagreements=len(_open(stage, ops, adjudicated)),
                          adjudicated=len(adjudicated))


def stage_agreement(ws: Workspace, lang: str, stage: str = "translation") -> StageAgreement | None:
    """Agreement between the curators of a stage in `lang`; None when no curator annotated it there."""
    ra = t.review_annotations
    if not ws.rows(select(ra.c.annotation_id).where(ra.c.lang == lang, ra.c.stage == stage).limit(1)):
        return None
    return _agreement(stage, *opinions(ws, lang, stage))


# -- translations: decided -------------------------------------------------------------------------------------


def decide_translations(ws: Workspace, lang: str, items: set[str], summary: PullSummary) -> set[str]:
    """Stage translation's `decide`: turn the settled decisions on each item's latest proposal into reviews and
    verified words, and take back what no decision holds any more. Returns the disputed items.

    One review per proposal from Label Studio, updated as decisions change, and removed while no decision
    holds on the latest proposal (its annotations stay). A word verified in Label Studio is withdrawn when
    its item's decision stops verifying it: a curator disagrees (it waits for the adjudicator), a decision
    becomes a rejection, or the annotations that verified it were deleted. A verified word from a seed or
    the source is never replaced by a review; one accepted with `builder accept` is never withdrawn by one."""
    decided, disputed = settled(ws, lang, "translation")
    latest = latest_proposals(ws, lang)
    words = verified(ws, lang)
    rv, pr = t.reviews, t.proposals
    ours = ws.rows(select(rv.c.id, rv.c.proposal_id).join(pr, pr.c.id == rv.c.proposal_id)
                   .where(pr.c.lang == lang, rv.c.channel == "label-studio").order_by(rv.c.id.desc()))
    reviewed = {r["proposal_id"]: r["id"] for r in ours}  # the first review from Label Studio of each proposal
    from_label_studio = {r["id"] for r in ours}
    ts = now()
    with ws.transaction() as c:
        for item_id, (a, reviewer) in decided.items():
            summary.by_decision[a.decision] = summary.by_decision.get(a.decision, 0) + 1
            review_id = _write_review(c, dict(proposal_id=a.proposal_id, decision=a.decision, final_text=a.final_text,
                                              reviewer=reviewer, comment=a.comment, channel="label-studio",
                                              created_at=a.updated_at), reviewed.get(a.proposal_id))
            if a.decision not in _VERIFYING:
                summary.rejected += 1
                continue
            old = words.get(item_id)
            if old and old["origin"] != "review":
                continue
            word = VerifiedWord(item_id=item_id, kind=latest[item_id]["kind"], lang=lang, text=a.final_text,
                                origin="review", reviewer=reviewer, proposal_id=a.proposal_id, review_id=review_id)
            if old is None:
                _write_word(c, word, ts, replace=False)
                summary.verified += 1
            elif (old["text"], old["review_id"], old["reviewer"]) != (word.text, review_id, reviewer):
                _write_word(c, word, ts, replace=True)
        vw = t.verified_words
        for item_id, old in words.items():
            if (old["review_id"] in from_label_studio and item_id in latest and old["proposal_id"] == latest[item_id]["id"]
                    and (item_id not in decided or decided[item_id][0].decision not in _VERIFYING)):
                c.execute(vw.delete().where(vw.c.item_id == item_id, vw.c.lang == lang))
                summary.withdrawn += 1
        undecided = [p["id"] for item_id, p in latest.items() if p["id"] in reviewed and item_id not in decided]
        for ids in _chunks(undecided):
            c.execute(rv.delete().where(rv.c.proposal_id.in_(ids), rv.c.channel == "label-studio"))
    return set(disputed)


def rejected_items(ws: Workspace, lang: str) -> dict[str, dict]:
    """Items whose latest proposal its curators (or its adjudicator) rejected or marked ambiguous, and that no one has
    verified since (an expert's seed word, say): item id -> review and proposal. An item whose curators disagree waits
    for its adjudicator instead."""
    latest = latest_proposals(ws, lang)
    done = verified(ws, lang)
    settled = _settle("translation", *opinions(ws, lang, "translation"))
    by_proposal = {latest[item]["id"]: item for item, (a, _) in settled.items()
                   if a.decision in ("reject", "ambiguous") and item in latest and item not in done}
    out = {}
    for r in ws.rows(select(t.reviews).where(t.reviews.c.channel == "label-studio",
                                             t.reviews.c.decision.in_(("reject", "ambiguous")))):
        if r["proposal_id"] in by_proposal:
            item_id = by_proposal[r["proposal_id"]]
            out[item_id] = {**r, "proposal": latest[item_id]}
    return out


# -- sentence pairs -----------------------------------------------------------------------------------------


def _pair_version(acceptable: str, unacceptable: str) -> str:
    return hashlib.sha256(f"{acceptable}\x1f{unacceptable}".encode()).hexdigest()[:16]


def current_pairs(ws: Workspace, lang: str) -> dict[str, dict]:
    """pair id -> the sentence pair as generated now, with its `version` (a hash of both sentences)."""
    rows = ws.rows(select(t.sentence_pairs).where(t.sentence_pairs.c.lang == lang))
    return {r["pair_id"]: {**r, "version": _pair_version(r["acceptable"], r["unacceptable"])} for r in rows}


def pair_versions(ws: Workspace, lang: str) -> dict[str, str]:
    """pair id -> the version of its sentences now: what a decision is checked against, read without the rest."""
    sp = t.sentence_pairs
    rows = ws.rows(select(sp.c.pair_id, sp.c.acceptable, sp.c.unacceptable).where(sp.c.lang == lang))
    return {r["pair_id"]: _pair_version(r["acceptable"], r["unacceptable"]) for r in rows}


def sentence_decisions(ws: Workspace, lang: str) -> dict[str, SentenceReview]:
    """pair id -> the decision on the pair's current sentences: its curators' when they agree, else the adjudicator's.

    A decision counts only for the version of the pair it was made on: when a rejected pair is
    regenerated, the old decision stops applying and the new sentences wait for review."""
    return _pair_decisions(ws, lang, "sentences")


def judge_decisions(ws: Workspace, lang: str) -> dict[str, SentenceReview]:
    """pair id -> the decision on the judge's verdict about the pair's current sentences (false negative, keep),
    settled as sentence decisions are; regenerated sentences are judged, and reviewed, afresh."""
    return _pair_decisions(ws, lang, "judge")


def _pair_decisions(ws: Workspace, lang: str, stage: str) -> dict[str, SentenceReview]:
    return {pid: SentenceReview(pair_id=pid, lang=lang, decision=a.decision, acceptable=a.acceptable,
                                unacceptable=a.unacceptable, reviewer=who, comment=a.comment,
                                annotation_id=a.annotation_id)
            for pid, (a, who) in _settle(stage, *opinions(ws, lang, stage)).items()}


class DecisionLineage(Record):
    """The Label Studio annotation whose decision settles a pair's sentences: what a release names as their lineage."""

    server: str  # the server's identity, as on `Annotation`
    annotation_id: int
    task_id: int
    stage: str  # "sentences", or its adjudication's stage
    decided_at: datetime  # the annotation's last change


def sentence_lineage(ws: Workspace, lang: str) -> dict[str, DecisionLineage]:
    """pair id -> the annotation behind its settled sentence decision (the one `sentence_decisions` gives)."""
    return {pid: DecisionLineage(server=a.server, annotation_id=a.annotation_id, task_id=a.task_id,
                                 stage=a.stage, decided_at=utc(a.updated_at))
            for pid, (a, _) in _settle("sentences", *opinions(ws, lang, "sentences")).items()}


def rejected_pairs(ws: Workspace, lang: str) -> dict[str, str]:
    """pair id -> the curator's comment, for pairs whose current sentences were rejected."""
    return {pid: d.comment for pid, d in sentence_decisions(ws, lang).items() if d.decision == "reject"}


# -- inflection tables ---------------------------------------------------------------------------------------


def current_tables(ws: Workspace, lang: str) -> dict[str, dict]:
    """The lemma's item id -> its forms waiting for review: `lemma`, `forms` (lexicon rows), `draft` (the table as
    curators see it) and its `version`."""
    by_lemma: dict[str, list[Opinion]] = {}
    for r in list_forms(ws, lang, status="proposed"):
        by_lemma.setdefault(r["lemma"], []).append(r)
    out = {}
    for lemma, forms in by_lemma.items():
        text = tables.draft(forms)
        out[Need(lang, lemma, "", ()).id] = {"lemma": lemma, "forms": forms, "draft": text, "version": tables.version(text)}
    return out


def _store_table(c: Connection, a: Annotation) -> None:
    """Record the version of the table an annotation was made on, once: at its first pull."""
    tr = t.table_reviews
    if c.execute(select(tr.c.version).where(tr.c.annotation_id == a.annotation_id, tr.c.server == a.server)).first() is None:
        c.execute(t.table_reviews.insert().values(annotation_id=a.annotation_id, server=a.server, lang=a.lang,
                                                  lemma=a.forms.lemma, version=tables.version(a.forms.draft)))


def _lemmas(ws: Workspace, lang: str) -> dict[str, str]:
    """The item id of each lemma with forms in `lang` -> the lemma."""
    return {Need(lang, r["lemma"], "", ()).id: r["lemma"] for r in list_forms(ws, lang)}


def _reopen_tables(ws: Workspace, lang: str, items: set[str]) -> dict[str, int]:
    """Put each of `items` whose table was decided back to waiting, as the LLM proposed it, to be decided again:
    its curators may now disagree, a decision may have changed, or its annotations been deleted. Returns item ->
    how many forms went back."""
    lemmas = _lemmas(ws, lang)
    return {item: withdraw_fills(ws, lang, lemmas[item]) for item in sorted(items - set(current_tables(ws, lang)))
            if item in lemmas}


def decide_tables(ws: Workspace, lang: str, items: set[str], summary: PullSummary) -> set[str]:
    """Stage inflections' `decide`: put each of `items` whose table was decided back to waiting (`_reopen_tables`),
    then apply the settled decision on each through the lexicon, oldest first, on the version of the table it was
    made on; forms reopened that no decision takes again count as withdrawn. A fixed table that cannot be read, or
    names a bundle that was not proposed, counts as invalid."""
    reopened = _reopen_tables(ws, lang, items)
    decided, disputed = settled(ws, lang, "inflections")
    counts = summary.forms
    waiting = current_tables(ws, lang)
    applied = set()
    for item, (a, reviewer) in sorted(decided.items(), key=lambda kv: kv[1][0].updated_at):
        if item not in items or item not in waiting or a.made_on != waiting[item]["version"]:
            continue
        try:
            s = verify_fills(ws, lang, waiting[item]["lemma"], reviewer=reviewer, decision=a.decision, comment=a.comment,
                             forms=tables.parse_forms(a.final_text) if a.decision == "fix" else None)
        except ValueError:
            counts["invalid"] = counts.get("invalid", 0) + 1
            continue
        applied.add(item)
        for k in ("verified", "corrected", "rejected"):
            counts[k] = counts.get(k, 0) + getattr(s, k)
    withdrawn = sum(n for item, n in reopened.items() if item not in applied)
    if withdrawn:
        counts["withdrawn"] = counts.get("withdrawn", 0) + withdrawn
    return set(disputed)


# -- recording a pull ---------------------------------------------------------------------------------------


def _chunks(ids: list, size: int = 500) -> Iterable[list]:
    """Ids in groups small enough for one `IN (…)` on every database."""
    return (ids[i:i + size] for i in range(0, len(ids), size))


def _store(c: Connection, server: str, pulled: list[tuple[Annotation, bool]], versioned: set[int]) -> None:
    """Insert (first pull) or update annotations, each with its lineage and the text it leaves, in a few statements.

    What an annotation stays on was fixed at its first pull: the proposal of a translation (kept across a
    re-proposal), the version of a sentence pair or of an inflection table (`versioned`: the annotations whose table
    version is recorded). For the annotations seen before it is read back, and the drafts for all, in one query per
    500; new rows go in together. A pull of 50,000 annotations costs a few hundred statements, not several per
    annotation.
    """
    ra, sr, tr = t.review_annotations, t.sentence_reviews, t.table_reviews
    seen = [a.annotation_id for a, first in pulled if not first]
    kept_proposal: dict[int, int] = {}
    kept_version: dict[int, str] = {}
    for ids in _chunks(seen):
        kept_proposal |= dict(c.execute(select(ra.c.annotation_id, ra.c.proposal_id)
                                        .where(ra.c.server == server, ra.c.annotation_id.in_(ids))).all())
        kept_version |= dict(c.execute(select(sr.c.annotation_id, sr.c.version)
                                       .where(sr.c.server == server, sr.c.annotation_id.in_(ids))).all())
    proposal_of = {a.annotation_id: a.translation.proposal_id if first else kept_proposal[a.annotation_id]
                   for a, first in pulled if a.translation is not None}
    drafts: dict[int, str] = {}
    for ids in _chunks(sorted(set(proposal_of.values()))):
        drafts |= dict(c.execute(select(t.proposals.c.id, t.proposals.c.text).where(t.proposals.c.id.in_(ids))).all())
    inserts: dict = {ra: [], sr: [], tr: []}  # in this order: the others refer to review_annotations
    for a, first in pulled:
        key = dict(annotation_id=a.annotation_id, server=server)
        if a.translation is not None:
            proposal_id = proposal_of[a.annotation_id]
            draft = drafts[proposal_id]
            final = a.translation.text or draft
            lineage = dict(proposal_id=proposal_id, final_text=final, edit_distance=edit_distance(draft, final))
        elif a.sentences is not None:
            e = a.sentences
            left = (e.acceptable or e.draft_acceptable, e.unacceptable or e.draft_unacceptable)
            lineage = dict(proposal_id=None, final_text=f"{left[0]}\n{left[1]}",
                           edit_distance=edit_distance(e.draft_acceptable, left[0]) + edit_distance(e.draft_unacceptable, left[1]))
            pair = dict(pair_id=a.item_id, lang=a.lang, version=kept_version.get(a.annotation_id) or e.version,
                        acceptable=left[0], unacceptable=left[1])
            if a.annotation_id in kept_version:
                c.execute(sr.update().where(sr.c.annotation_id == a.annotation_id, sr.c.server == server).values(**pair))
            else:
                inserts[sr].append(key | pair)
        else:
            if a.annotation_id not in versioned:
                inserts[tr].append(key | dict(lang=a.lang, lemma=a.forms.lemma, version=tables.version(a.forms.draft)))
            final = a.forms.text or a.forms.draft
            lineage = dict(proposal_id=None, final_text=final, edit_distance=edit_distance(a.forms.draft, final))
        row = dict(stage=a.stage, lang=a.lang, item_id=a.item_id, task_id=a.task_id, decision=a.decision, comment=a.comment,
                   reviewer=a.reviewer, cancelled=a.cancelled, lead_time_s=a.lead_time_s, created_at=a.created_at,
                   updated_at=a.updated_at, withdrawn_at=None, **lineage)
        if first:
            inserts[ra].append(key | row)
        else:
            c.execute(ra.update().where(ra.c.annotation_id == a.annotation_id, ra.c.server == server).values(**row))
    for table, rows in inserts.items():
        if rows:
            c.execute(table.insert(), rows)


def decide_judgements(ws: Workspace, lang: str, items: set[str], summary: PullSummary) -> set[str]:
    """Stage judge's `decide`: a settled decision on the judge's verdict settles its flag: "keep" clears it;
    "false negative" keeps it, now saying who confirmed it, until the negative is replaced in the seeds or the
    pair waived. A verdict its curators dispute is flagged until the adjudicator decides, whatever they said before."""
    decided, disputed = settled(ws, lang, "judge")
    reasons = {pid: f"a curator ({who}) confirmed the negative has the property"
                    + (f" ({a.comment})" if a.comment else "") + "; replace it in the seeds, or waive the pair"
               for pid, (a, who) in decided.items() if a.decision == "false negative"}
    reasons |= {pid: "curators disagree whether the negative has the property ("
                     + "; ".join(f"{a.reviewer}: {a.decision}" + (f" ({a.comment})" if a.comment else "")
                                 for a in anns)
                     + f"): an adjudicator decides (builder review push --stage {review_stage('judge').adjudication} --lang {lang})"
                for pid, anns in disputed.items()}
    flagged = {f.item_id: f.reason for f in list_flags(ws, stage="judge", langs=[lang])}
    with ws.transaction() as c:
        clear_flags(c, "judge", lang, [pid for pid, (a, _) in decided.items() if a.decision == "keep" and pid in flagged])
        record_flags(c, "judge", lang, {pid: why for pid, why in reasons.items() if flagged.get(pid) != why})
    return set(disputed)


def settle_pair_flags(ws: Workspace, lang: str, items: set[str], summary: PullSummary) -> set[str]:
    """Stage sentences' `decide`: pairs a curator wrote or accepted no longer wait for the LLM: their `generate` and
    `regenerate` flags are settled."""
    decided, disputed = settled(ws, lang, "sentences")
    written = [pid for pid, (a, _) in decided.items() if a.decision in ("accept", "fix")]
    with ws.transaction() as c:
        for ids in _chunks(written):
            clear_flags(c, ("generate", "regenerate"), lang, ids)
    return set(disputed)


def judge_pending(ws: Workspace, lang: str) -> dict[str, str]:
    """Pairs whose judge's verdict waits for a curator (flagged by the judge, not decided on their current
    sentences): pair id -> the flag's reason."""
    decided = judge_decisions(ws, lang)
    return {f.item_id: f.reason for f in list_flags(ws, stage="judge", langs=[lang]) if f.item_id not in decided}


def _foreign(ws: Workspace, annotations: list[Annotation]) -> set[int]:
    """The ids of those `annotations` made on what this workspace does not have: a proposal it never made (or one of
    another item or language), sentences it never wrote for the pair in that language, a lemma without forms in that
    language. Their tasks are not its own: another workspace's, in a project an earlier version let two workspaces
    share, or a task made by hand in Label Studio."""
    foreign = set()
    by_made_on: dict[str, list[Annotation]] = {}
    for a in annotations:
        by_made_on.setdefault(review_stage(a.stage).made_on, []).append(a)
    proposals: dict[int, tuple[str, str]] = {}
    pr = t.proposals
    for ids in _chunks(sorted({a.translation.proposal_id for a in by_made_on.get("proposal", [])})):
        proposals |= {r["id"]: (r["item_id"], r["lang"])
                      for r in ws.rows(select(pr.c.id, pr.c.item_id, pr.c.lang).where(pr.c.id.in_(ids)))}
    foreign |= {a.annotation_id for a in by_made_on.get("proposal", [])
                if proposals.get(a.translation.proposal_id) != (a.item_id, a.lang)}
    pairs: set[tuple[str, str]] = set()
    sp, langs = t.sentence_pairs, sorted({a.lang for a in by_made_on.get("pair", [])})
    for ids in _chunks(sorted({a.item_id for a in by_made_on.get("pair", [])})):
        pairs |= {(r["pair_id"], r["lang"])
                  for r in ws.rows(select(sp.c.pair_id, sp.c.lang).where(sp.c.pair_id.in_(ids), sp.c.lang.in_(langs)))}
    foreign |= {a.annotation_id for a in by_made_on.get("pair", []) if (a.item_id, a.lang) not in pairs}
    lemmas = {lang: _lemmas(ws, lang) for lang in {a.lang for a in by_made_on.get("table", [])}}
    foreign |= {a.annotation_id for a in by_made_on.get("table", []) if a.item_id not in lemmas[a.lang]}
    return foreign


def record_pull(ws: Workspace, server: str, annotations: Iterable[Annotation],
                exported: Iterable[tuple[str, str]] = ()) -> PullSummary:
    """Record what a pull from the server with identity `server` exported, then turn the decisions into verified words and forms.

    An annotation whose `updated_at` is what was recorded is unchanged and skipped; the new and changed
    ones are recorded in one transaction. `exported` names the (stage, lang) of the projects whose whole
    export `annotations` holds: an annotation recorded for one of them that the export lacks was deleted in
    Label Studio, and is withdrawn (its row stays, marked; it counts again if it comes back). Then
    translations and the judge's verdicts are decided for every language with a project of theirs (or of their
    adjudication) on that server, and inflection tables with a new, changed or withdrawn annotation. Items
    whose curators agreed (or were alone) before this pull and disagree after it are counted in
    `disagreements`, by stage and language. An annotation first seen on what this workspace does not have (`_foreign`)
    is not recorded: its task is counted in `ignored`.
    """
    ra, tr = t.review_annotations, t.table_reviews
    recorded = ws.rows(select(ra.c.annotation_id, ra.c.updated_at, ra.c.withdrawn_at, ra.c.stage, ra.c.lang, ra.c.item_id,
                              ra.c.reviewer, ra.c.decision, ra.c.cancelled).where(ra.c.server == server))
    known = {r["annotation_id"]: utc(r["updated_at"]) for r in recorded if r["withdrawn_at"] is None}
    recorded_ids = {r["annotation_id"] for r in recorded}
    annotations = list(annotations)
    foreign = _foreign(ws, [a for a in annotations if a.annotation_id not in recorded_ids])
    versioned = {r["annotation_id"] for r in ws.rows(select(tr.c.annotation_id).where(tr.c.server == server))}
    summary = PullSummary()
    touched: dict[tuple[str, str], set[str]] = {}  # (stage, lang) -> items with a new, changed or withdrawn annotation
    seen: set[int] = set()
    unversioned: list[Annotation] = []  # recorded before tables had versions (workspace schema 6 and older)
    pulled: dict[int, tuple[Annotation, bool]] = {}  # annotation id -> (annotation, first pull)
    ignored: dict[tuple[str, str], set[int]] = {}  # (stage, lang) -> the tasks of foreign annotations
    for a in annotations:
        if a.server != server:
            raise ValueError(f"annotation {a.annotation_id} comes from server {a.server}, not from the pulled server {server}")
        if a.annotation_id in foreign:
            ignored.setdefault((a.stage, a.lang), set()).add(a.task_id)
            continue
        seen.add(a.annotation_id)
        if known.get(a.annotation_id) == a.updated_at:
            if a.forms is not None and a.annotation_id not in versioned:
                unversioned.append(a)
            summary.unchanged += 1
            continue
        first = pulled[a.annotation_id][1] if a.annotation_id in pulled else a.annotation_id not in recorded_ids
        pulled[a.annotation_id] = (a, first)  # exported twice: the later copy, still a first pull if it was
        touched.setdefault((base_stage(a.stage), a.lang), set()).add(a.item_id)
    complete = set(exported)
    gone = [r for r in recorded if r["withdrawn_at"] is None and r["annotation_id"] not in seen
            and (r["stage"], r["lang"]) in complete]
    for r in gone:
        touched.setdefault((base_stage(r["stage"]), r["lang"]), set()).add(r["item_id"])
    summary.ignored = {key: len(tasks) for key, tasks in sorted(ignored.items())}
    summary.changes = [Change(stage=a.stage, lang=a.lang, item_id=a.item_id, reviewer=a.reviewer, decision=a.decision,
                              cancelled=a.cancelled, change="new" if first else "updated") for a, first in pulled.values()]
    summary.changes += [Change(**{k: r[k] for k in ("stage", "lang", "item_id", "reviewer", "decision", "cancelled")},
                               change="deleted") for r in gone]
    had: dict[tuple[str, str], set[str]] = {}  # the touched items that had opinions before: only they can have been disputed
    for r in recorded:
        key = (base_stage(r["stage"]), r["lang"])
        if r["withdrawn_at"] is None and r["item_id"] in touched.get(key, ()):
            had.setdefault(key, set()).add(r["item_id"])
    disputed_before = {(stage, lang): set(_open(stage, *opinions(ws, lang, stage, items)))
                       for (stage, lang), items in had.items()}
    with ws.transaction() as c:
        for a in unversioned:
            _store_table(c, a)
        summary.new = sum(first for _, first in pulled.values())
        summary.updated = len(pulled) - summary.new
        _store(c, server, list(pulled.values()), versioned)
        for ids in _chunks([r["annotation_id"] for r in gone]):
            c.execute(ra.update().where(ra.c.server == server, ra.c.annotation_id.in_(ids)).values(withdrawn_at=now()))
        summary.deleted = len(gone)
    projects = {(base_stage(p.stage), p.lang) for p in review_projects(ws, server)}
    for name, lang in sorted({(s, lang) for s, lang in projects if review_stage(s).every_pull} | set(touched)):
        stage = review_stage(name)
        items = touched.get((name, lang), set())
        disputed = stage.decide(ws, lang, items, summary) if stage.decide else set(settled(ws, lang, name)[1])
        arose = (items & disputed) - disputed_before.get((name, lang), set())
        if arose:
            summary.disagreements[(name, lang)] = len(arose)
    return summary


# -- statistics ---------------------------------------------------------------------------------------------


def curators(ws: Workspace, lang: str) -> set[str]:
    """Everyone who reviewed or translated `lang`'s words: in Label Studio, by `builder accept`, or as a seed translator."""
    ra, rv, pr, st = t.review_annotations, t.reviews, t.proposals, t.seed_translations
    names = {r["reviewer"] for r in ws.rows(select(ra.c.reviewer).where(ra.c.lang == lang, ra.c.withdrawn_at.is_(None)).distinct())}
    names |= {r["reviewer"] for r in ws.rows(select(rv.c.reviewer).distinct()
                                              .select_from(rv.join(pr, pr.c.id == rv.c.proposal_id))
                                              .where(pr.c.lang == lang, rv.c.channel != "label-studio"))}
    names |= {r["translator"] for r in ws.rows(select(st.c.translator).where(st.c.lang == lang).distinct())}
    return names


def _annotation_counts(ws: Workspace, stage: str, lang: str) -> dict:
    """Who annotated a stage's tasks in a language, how many annotations, how many were skipped (annotations
    deleted in Label Studio left out)."""
    ra = t.review_annotations
    anns = ws.rows(select(ra.c.reviewer, ra.c.cancelled).where(ra.c.lang == lang, ra.c.stage == stage,
                                                               ra.c.withdrawn_at.is_(None)))
    return {"reviewers": sorted({r["reviewer"] for r in anns}), "annotations": len(anns),
            "skipped": sum(1 for r in anns if r["cancelled"])}


def _counts(decided: Iterable[str], vocabulary: tuple[str, ...]) -> dict[str, int]:
    decided = list(decided)
    return {d: decided.count(d) for d in vocabulary}


def _stage_status(ws: Workspace, stage: str, lang: str) -> dict:
    """A stage's row: pending items and decisions (an adjudication stage's: open disagreements and its
    decisions); a reviewed stage's also open disagreements, adjudicated items and agreement. A disputed item waits
    for the adjudicator alone: it counts among the disagreements, not among the items pending for curators."""
    record = review_stage(stage)
    base, vocabulary = record.name, tuple(record.decisions)
    ops, adjudicated = opinions(ws, lang, base)
    if stage != base:
        return {"pending": len(_open(base, ops, adjudicated)),
                **_counts((anns[-1].decision for anns in adjudicated.values()), vocabulary)}
    key = _key(base)
    agreed = [anns[-1].decision for item, anns in ops.items() if _agree(anns, key) and item not in adjudicated]
    measured = _agreement(base, ops, adjudicated)
    pending = record.pending(ws, lang, len(agreed) + len(adjudicated)) - measured.disagreements
    return {"pending": pending, **_counts(agreed, vocabulary),
            "disagreements": measured.disagreements, "adjudicated": measured.adjudicated,
            "agreement": measured.agreement.model_dump()}


def review_status(ws: Workspace) -> list[dict]:
    """Per stage and language with a project: pending items, decisions, reviewers, skipped tasks (and for each
    reviewed stage, open disagreements, adjudicated items and agreement)."""
    with collector_paused():
        return [{"stage": p.stage, "lang": p.lang, **_stage_status(ws, p.stage, p.lang),
                 **_annotation_counts(ws, p.stage, p.lang)} for p in review_projects(ws)]
