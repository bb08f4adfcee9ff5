"""Review decisions and verified words: the one module that records them and answers for them.

Decisions arrive through every channel — `builder accept` (`accept`), a Label Studio pull (typed
`Annotation` records that `annotation` parses from the export, `record_pull`), an adjudication (an
annotation of stage "adjudication") — and verified words also from the seeds (`record_seed_words`).
This module alone writes `reviews`, `verified_words`, `review_annotations`, `sentence_reviews` and
`review_projects`; decisions on inflection tables go to `builder.m2c.lexicon.verify_fills`, the writer
of `lexicon_forms`.

The rules it keeps:
- an annotation stays on what it was made on: the proposal (translations) or the version of the pair
  (sentences) recorded at its first pull, whatever its task shows later;
- a decision counts only for the item's current version: its latest proposal, the pair's current sentences;
- one curator decides alone; several must agree (decision and text), otherwise the item waits for
  adjudication, whose decision wins and names the adjudicator.
Agreement and adjudication are written over "opinions on the current version" (`_latest_opinions`,
`_settle`), so sentence pairs and inflection tables can use them too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

from pydantic import field_validator, model_validator
from sqlalchemy import case, func, select
from sqlalchemy.engine import Connection

from builder.agreement import Agreement, agreement as measure_agreement
from builder.m2c.lexicon import list_forms, verify_fills
from builder.records import Record, VerifiedWord
from builder.selection import verified
from builder.textdiff import edit_distance
from builder.workspace import schema as t
from builder.workspace.store import Workspace, now

__all__ = [
    "SENTENCE_DECISIONS", "TRANSLATION_DECISIONS",
    "AcceptSummary", "Annotation", "FormsEdit", "PullSummary", "ReviewProject", "SentenceEdit", "SentenceReview",
    "TranslationEdit",
    "accept", "agreement", "curators", "current_pairs", "disagreements", "latest_proposals", "opinions",
    "record_pull", "record_seed_words", "rejected_items", "rejected_pairs", "remember_project", "review_project",
    "review_projects", "review_status", "sentence_decisions",
]

ReviewStage = Literal["translation", "adjudication", "sentences", "inflections"]
TRANSLATION_DECISIONS: tuple[str, ...] = ("accept", "corrected", "reject", "ambiguous")
SENTENCE_DECISIONS: tuple[str, ...] = ("accept", "fix", "reject")  # sentence pairs and inflection tables
_DECISIONS = {"translation": TRANSLATION_DECISIONS, "adjudication": TRANSLATION_DECISIONS,
              "sentences": SENTENCE_DECISIONS, "inflections": SENTENCE_DECISIONS}
_PAYLOAD = {"translation": "translation", "adjudication": "translation", "sentences": "sentences", "inflections": "forms"}
_VERIFYING = ("accept", "corrected")  # translation decisions that make a verified word


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


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
    """An inflection-table task's part of an annotation."""

    lemma: str
    draft: str  # the proposed table as the task showed it
    text: str | None = None  # the table as the curator left it; None: as proposed
    forms: dict[str, str] | None  # that table read as bundle -> form; None when a line cannot be read


class Annotation(Record):
    """One curator's annotation of one task, parsed from a Label Studio export."""

    stage: ReviewStage
    lang: str
    item_id: str  # concept or property id, pair id, or the lemma's need id
    annotation_id: int  # Label Studio's id, unique on its server
    url: str  # the server
    task_id: int
    decision: str | None  # None when the curator skipped the task or chose nothing
    comment: str = ""
    reviewer: str
    cancelled: bool = False
    lead_time_s: float | None = None
    created_at: datetime
    updated_at: datetime
    translation: TranslationEdit | None = None  # stages translation and adjudication
    sentences: SentenceEdit | None = None
    forms: FormsEdit | None = None  # stage inflections

    @field_validator("created_at", "updated_at")
    @classmethod
    def _aware(cls, v: datetime) -> datetime:
        return _utc(v)

    @model_validator(mode="after")
    def _fits_its_stage(self) -> "Annotation":
        where = f"annotation {self.annotation_id} ({self.stage} {self.lang}, {self.url})"
        given = [name for name in ("translation", "sentences", "forms") if getattr(self, name) is not None]
        if given != [_PAYLOAD[self.stage]]:
            raise ValueError(f"{where}: carries {given or 'nothing'}; a {self.stage} annotation carries {_PAYLOAD[self.stage]!r}")
        if self.cancelled and self.decision is not None:
            raise ValueError(f"{where}: a skipped annotation has no decision")
        if self.decision is not None and self.decision not in _DECISIONS[self.stage]:
            raise ValueError(f"{where}: decision {self.decision!r} is not one of {', '.join(_DECISIONS[self.stage])}")
        return self


class ReviewProject(Record):
    """The Label Studio project that serves a stage in a language."""

    stage: ReviewStage
    lang: str
    project_id: int
    title: str
    url: str


class SentenceReview(Record):
    """A curator's decision on a pair's current sentences, as the rest of the pipeline sees it."""

    pair_id: str
    lang: str
    decision: Literal["accept", "fix", "reject"]
    acceptable: str  # the sentences as the curator left them
    unacceptable: str
    reviewer: str
    comment: str
    annotation_id: int


@dataclass
class AcceptSummary:
    accepted: int
    skipped_ambiguous: int
    already_verified: int


@dataclass
class PullSummary:
    new: int = 0
    updated: int = 0
    unchanged: int = 0
    verified: int = 0
    rejected: int = 0
    by_decision: dict[str, int] = field(default_factory=dict)
    forms: dict[str, int] = field(default_factory=dict)  # inflection forms verified, corrected, rejected, invalid


# -- projects -----------------------------------------------------------------------------------------


def review_projects(ws: Workspace, url: str | None = None) -> list[ReviewProject]:
    """The projects remembered (on the server at `url`, or anywhere), by stage and language."""
    p = t.review_projects
    stmt = select(p).order_by(p.c.stage, p.c.lang)
    return [ReviewProject(**r) for r in ws.rows(stmt if url is None else stmt.where(p.c.url == url))]


def review_project(ws: Workspace, stage: str, lang: str, url: str) -> ReviewProject | None:
    return next((p for p in review_projects(ws, url) if (p.stage, p.lang) == (stage, lang)), None)


def remember_project(ws: Workspace, project: ReviewProject) -> None:
    """The project now serving (stage, lang); it replaces the one remembered before."""
    p = t.review_projects
    with ws.transaction() as c:
        c.execute(t.review_projects.delete().where(p.c.stage == project.stage, p.c.lang == project.lang))
        c.execute(t.review_projects.insert().values(**project.model_dump()))


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
            raise ValueError(f"no proposal in {lang} for: {', '.join(unknown)}")
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
    return ws.upsert_ignore(c, t.verified_words, rows)


def _latest_opinions(rows: list[dict], on_current) -> dict[str, list[dict]]:
    """item -> each curator's latest decided annotation among those made on the item's current version."""
    per: dict[str, dict[str, dict]] = {}
    for a in sorted(rows, key=lambda r: r["updated_at"]):
        if on_current(a):
            per.setdefault(a["item_id"], {})[a["reviewer"]] = a  # a curator's latest revision wins
    return {item: list(by.values()) for item, by in per.items()}


def _decided_annotations(stage: str, lang: str):
    ra = t.review_annotations
    return select(ra).where(ra.c.lang == lang, ra.c.stage == stage, ra.c.cancelled.is_(False), ra.c.decision.is_not(None))


def opinions(ws: Workspace, lang: str) -> dict[str, dict[str, list[dict]]]:
    """stage (translation, adjudication) -> item -> each curator's latest decided annotation on the
    item's latest proposal."""
    latest = {item: p["id"] for item, p in latest_proposals(ws, lang).items()}
    return {stage: _latest_opinions(ws.rows(_decided_annotations(stage, lang)),
                                    lambda a: latest.get(a["item_id"]) == a["proposal_id"])
            for stage in ("translation", "adjudication")}


def _translation_key(a: dict) -> tuple[str, str]:
    """What curators must share to agree on a translation: the decision, and the text when it verifies."""
    return a["decision"], a["final_text"] if a["decision"] in _VERIFYING else ""


def _agree(anns: list[dict], key=_translation_key) -> bool:
    return len({key(a) for a in anns}) == 1


def _settle(ops: dict[str, list[dict]], adjudicated: dict[str, list[dict]],
            key=_translation_key) -> dict[str, tuple[dict, str]]:
    """item -> the annotation that decides it and who decided: the curators when they agree, else the adjudicator."""
    out = {item: (anns[-1], ", ".join(sorted(a["reviewer"] for a in anns))) for item, anns in ops.items() if _agree(anns, key)}
    out |= {item: (anns[-1], f"{anns[-1]['reviewer']} (adjudicated)") for item, anns in adjudicated.items()}
    return out


def disagreements(ws: Workspace, lang: str) -> dict[str, list[dict]]:
    """Items whose curators disagree and that no one has adjudicated yet: item -> the curators' annotations."""
    ops = opinions(ws, lang)
    return {item: anns for item, anns in ops["translation"].items()
            if len(anns) > 1 and not _agree(anns) and item not in ops["adjudication"]}


def _translation_agreement(ops: dict[str, list[dict]]) -> Agreement:
    return measure_agreement({i: [a["decision"] for a in v] for i, v in ops.items()},
                             {i: [a["final_text"] for a in v if a["decision"] in _VERIFYING] for i, v in ops.items()})


def agreement(ws: Workspace, lang: str) -> Agreement | None:
    """Agreement between the curators of `lang`'s translations; None when no curator annotated in `lang`."""
    ra = t.review_annotations
    if not ws.rows(select(ra.c.annotation_id).where(ra.c.lang == lang).limit(1)):
        return None
    return _translation_agreement(opinions(ws, lang)["translation"])


def _decide_translations(ws: Workspace, lang: str, summary: PullSummary) -> None:
    """Turn the settled decisions on each item's latest proposal into reviews and verified words.

    One review per proposal from Label Studio, updated as decisions change; a verified word from a
    seed or the source is never replaced by a review."""
    latest = latest_proposals(ws, lang)
    ops = opinions(ws, lang)
    decided = _settle(ops["translation"], ops["adjudication"])
    words = verified(ws, lang)
    rv, pr = t.reviews, t.proposals
    reviewed = {r["proposal_id"]: r["id"] for r in ws.rows(  # the first review from Label Studio of each proposal
        select(rv.c.id, rv.c.proposal_id).join(pr, pr.c.id == rv.c.proposal_id)
        .where(pr.c.lang == lang, rv.c.channel == "label-studio").order_by(rv.c.id.desc()))}
    ts = now()
    with ws.transaction() as c:
        for item_id, (a, reviewer) in decided.items():
            summary.by_decision[a["decision"]] = summary.by_decision.get(a["decision"], 0) + 1
            review_id = _write_review(c, dict(proposal_id=a["proposal_id"], decision=a["decision"], final_text=a["final_text"],
                                              reviewer=reviewer, comment=a["comment"], channel="label-studio",
                                              created_at=a["updated_at"]), reviewed.get(a["proposal_id"]))
            if a["decision"] not in _VERIFYING:
                summary.rejected += 1
                continue
            old = words.get(item_id)
            if old and old["origin"] != "review":
                continue
            word = VerifiedWord(item_id=item_id, kind=latest[item_id]["kind"], lang=lang, text=a["final_text"],
                                origin="review", reviewer=reviewer, proposal_id=a["proposal_id"], review_id=review_id)
            if old is None:
                _write_word(c, word, ts, replace=False)
                summary.verified += 1
            elif (old["text"], old["review_id"], old["reviewer"]) != (word.text, review_id, reviewer):
                _write_word(c, word, ts, replace=True)


def rejected_items(ws: Workspace, lang: str) -> dict[str, dict]:
    """Items whose latest proposal a curator rejected or marked ambiguous: item id -> review and proposal."""
    latest = latest_proposals(ws, lang)
    by_proposal = {p["id"]: item_id for item_id, p in latest.items()}
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


def _versions(ws: Workspace, lang: str) -> dict[str, str]:
    """pair id -> the version of its current sentences (two columns read, where `current_pairs` reads whole rows)."""
    sp = t.sentence_pairs
    with ws.engine.connect() as conn:
        rows = conn.execute(select(sp.c.pair_id, sp.c.acceptable, sp.c.unacceptable).where(sp.c.lang == lang))
        return {pair_id: _pair_version(a, u) for pair_id, a, u in rows}


def sentence_decisions(ws: Workspace, lang: str) -> dict[str, SentenceReview]:
    """pair id -> the latest curator decision on the pair's current sentences.

    A decision counts only for the version of the pair it was made on: when a rejected pair is
    regenerated, the old decision stops applying and the new sentences wait for review."""
    current = _versions(ws, lang)
    a, s = t.review_annotations, t.sentence_reviews
    rows = ws.rows(
        select(a.c.item_id, a.c.decision, a.c.reviewer, a.c.comment, a.c.annotation_id, s.c.version, s.c.acceptable,
               s.c.unacceptable)
        .join(s, (s.c.annotation_id == a.c.annotation_id) & (s.c.url == a.c.url))
        .where(a.c.lang == lang, a.c.stage == "sentences", a.c.cancelled.is_(False), a.c.decision.is_not(None))
        .order_by(a.c.updated_at)
    )
    out: dict[str, SentenceReview] = {}
    for r in rows:
        if current.get(r["item_id"]) == r["version"]:
            out[r["item_id"]] = SentenceReview(pair_id=r["item_id"], lang=lang, decision=r["decision"],
                                               acceptable=r["acceptable"], unacceptable=r["unacceptable"],
                                               reviewer=r["reviewer"], comment=r["comment"], annotation_id=r["annotation_id"])
    return out


def rejected_pairs(ws: Workspace, lang: str) -> dict[str, str]:
    """pair id -> the curator's comment, for pairs whose current sentences were rejected."""
    return {pid: d.comment for pid, d in sentence_decisions(ws, lang).items() if d.decision == "reject"}


# -- recording a pull ---------------------------------------------------------------------------------------


def _chunks(ids: list, size: int = 500) -> Iterable[list]:
    """Ids in groups small enough for one `IN (…)` on every database."""
    return (ids[i:i + size] for i in range(0, len(ids), size))


def _lineage(a: Annotation, proposal: tuple[int, str] | None, version: str | None) -> tuple[dict, dict | None]:
    """An annotation's lineage columns (the proposal it stays on, the text it leaves, the edits from the draft)
    and, for sentences, its `sentence_reviews` values, on `version` when an earlier pull fixed one."""
    if a.translation is not None:
        proposal_id, draft = proposal
        final = a.translation.text or draft
        return dict(proposal_id=proposal_id, final_text=final, edit_distance=edit_distance(draft, final)), None
    if a.sentences is not None:
        e = a.sentences
        left = (e.acceptable or e.draft_acceptable, e.unacceptable or e.draft_unacceptable)
        lineage = dict(proposal_id=None, final_text=f"{left[0]}\n{left[1]}",
                       edit_distance=edit_distance(e.draft_acceptable, left[0]) + edit_distance(e.draft_unacceptable, left[1]))
        return lineage, dict(pair_id=a.item_id, lang=a.lang, version=version or e.version, acceptable=left[0], unacceptable=left[1])
    final = a.forms.text or a.forms.draft
    return dict(proposal_id=None, final_text=final, edit_distance=edit_distance(a.forms.draft, final)), None


def _store(c: Connection, url: str, pulled: list[tuple[Annotation, bool]]) -> None:
    """Insert (first pull) or update annotations, each with its lineage and the text it leaves.

    What an annotation stays on was fixed at its first pull: the proposal (translations) and the version of the
    pair (sentences) are read back for the annotations seen before, and the drafts for all, in a few queries;
    new annotations are inserted together, so a pull of many costs a handful of statements, not several each."""
    ra, s = t.review_annotations, t.sentence_reviews
    seen = [a.annotation_id for a, first in pulled if not first]
    kept_proposal: dict[int, int] = {}
    kept_version: dict[int, str] = {}
    for ids in _chunks(seen):
        kept_proposal |= dict(c.execute(select(ra.c.annotation_id, ra.c.proposal_id)
                                        .where(ra.c.url == url, ra.c.annotation_id.in_(ids))).all())
        kept_version |= dict(c.execute(select(s.c.annotation_id, s.c.version)
                                       .where(s.c.url == url, s.c.annotation_id.in_(ids))).all())
    # An annotation made before a re-proposal keeps the proposal it was made on.
    proposal_of = {a.annotation_id: a.translation.proposal_id if first else kept_proposal[a.annotation_id]
                   for a, first in pulled if a.translation is not None}
    drafts: dict[int, str] = {}
    for ids in _chunks(sorted(set(proposal_of.values()))):
        drafts |= dict(c.execute(select(t.proposals.c.id, t.proposals.c.text).where(t.proposals.c.id.in_(ids))).all())
    inserts: dict = {ra: [], s: []}
    for a, first in pulled:
        proposal_id = proposal_of.get(a.annotation_id)
        proposal = None if proposal_id is None else (proposal_id, drafts[proposal_id])
        lineage, sentences = _lineage(a, proposal, kept_version.get(a.annotation_id))
        row = dict(stage=a.stage, lang=a.lang, item_id=a.item_id, task_id=a.task_id, decision=a.decision, comment=a.comment,
                   reviewer=a.reviewer, cancelled=a.cancelled, lead_time_s=a.lead_time_s, created_at=a.created_at,
                   updated_at=a.updated_at, **lineage)
        for table, values, stored in ((ra, row, not first), (s, sentences, a.annotation_id in kept_version)):
            if values is None:
                continue
            if stored:
                c.execute(table.update().where(table.c.annotation_id == a.annotation_id, table.c.url == a.url).values(**values))
            else:
                inserts[table].append(dict(annotation_id=a.annotation_id, url=a.url, **values))
    for table, rows in inserts.items():
        if rows:
            c.execute(table.insert(), rows)


def _decide_forms(ws: Workspace, a: Annotation, counts: dict[str, int]) -> None:
    """A decision on a lemma's forms, applied through the lexicon; forms that cannot be read count as invalid."""
    if a.decision == "fix" and a.forms.forms is None:
        counts["invalid"] = counts.get("invalid", 0) + 1
        return
    try:
        s = verify_fills(ws, a.lang, a.forms.lemma, reviewer=a.reviewer, decision=a.decision,
                         forms=a.forms.forms if a.decision == "fix" else None, comment=a.comment)
    except ValueError:
        counts["invalid"] = counts.get("invalid", 0) + 1
        return
    for k in ("verified", "corrected", "rejected"):
        counts[k] = counts.get(k, 0) + getattr(s, k)


def record_pull(ws: Workspace, url: str, annotations: Iterable[Annotation]) -> PullSummary:
    """Record what a pull from the server at `url` exported, then turn the decisions into verified words and forms.

    An annotation whose `updated_at` is what was recorded is unchanged and skipped; the new and changed
    ones are recorded in one transaction. Then translations are decided for every language with a
    translation or adjudication project on that server, and each new or changed decision on an
    inflection table is applied, oldest first.
    """
    ra = t.review_annotations
    known = {r["annotation_id"]: _utc(r["updated_at"])
             for r in ws.rows(select(ra.c.annotation_id, ra.c.updated_at).where(ra.c.url == url))}
    summary = PullSummary()
    tables: list[Annotation] = []
    pulled: list[tuple[Annotation, bool]] = []  # each new or changed annotation, and whether it is new
    for a in annotations:
        if a.url != url:
            raise ValueError(f"annotation {a.annotation_id} comes from {a.url}, not from the pulled server {url}")
        if known.get(a.annotation_id) == a.updated_at:
            summary.unchanged += 1
            continue
        pulled.append((a, a.annotation_id not in known))
        if a.annotation_id in known:
            summary.updated += 1
        else:
            summary.new += 1
        known[a.annotation_id] = a.updated_at
        if a.forms is not None and a.decision:
            tables.append(a)
    with ws.transaction() as c:
        _store(c, url, pulled)
    for lang in sorted({p.lang for p in review_projects(ws, url) if p.stage in ("translation", "adjudication")}):
        _decide_translations(ws, lang, summary)
    for a in sorted(tables, key=lambda a: a.updated_at):
        _decide_forms(ws, a, summary.forms)
    return summary


# -- statistics ---------------------------------------------------------------------------------------------


def curators(ws: Workspace, lang: str) -> set[str]:
    """Everyone who reviewed or translated `lang`'s words: in Label Studio, by `builder accept`, or as a seed translator."""
    ra, rv, pr, st = t.review_annotations, t.reviews, t.proposals, t.seed_translations
    names = {r["reviewer"] for r in ws.rows(select(ra.c.reviewer).where(ra.c.lang == lang).distinct())}
    names |= {r["reviewer"] for r in ws.rows(select(rv.c.reviewer).distinct()
                                              .select_from(rv.join(pr, pr.c.id == rv.c.proposal_id))
                                              .where(pr.c.lang == lang, rv.c.channel != "label-studio"))}
    names |= {r["translator"] for r in ws.rows(select(st.c.translator).where(st.c.lang == lang).distinct())}
    return names


def _annotation_counts(ws: Workspace, stage: str, lang: str) -> dict:
    """Who annotated a stage's tasks in a language, how many annotations, how many were skipped."""
    ra = t.review_annotations
    mine = (ra.c.lang == lang, ra.c.stage == stage)
    counts = ws.rows(select(func.count().label("n"), func.count(case((ra.c.cancelled.is_(True), 1))).label("skipped"))
                     .where(*mine))[0]
    return {"reviewers": sorted(r["reviewer"] for r in ws.rows(select(ra.c.reviewer).where(*mine).distinct())),
            "annotations": counts["n"], "skipped": counts["skipped"]}


def _counts(decided: Iterable[str], vocabulary: tuple[str, ...]) -> dict[str, int]:
    decided = list(decided)
    return {d: decided.count(d) for d in vocabulary}


def _stage_status(ws: Workspace, stage: str, lang: str) -> dict:
    if stage == "sentences":
        decided = sentence_decisions(ws, lang)
        sp = t.sentence_pairs
        pairs = ws.rows(select(func.count().label("n")).where(sp.c.lang == lang))[0]["n"]
        return {"pending": pairs - len(decided),
                **_counts((d.decision for d in decided.values()), SENTENCE_DECISIONS)}
    if stage == "inflections":
        rows = sorted(ws.rows(_decided_annotations(stage, lang)), key=lambda r: r["updated_at"])
        latest = {a["item_id"]: a["decision"] for a in rows}  # per lemma, the latest decision
        return {"pending": len({f["lemma"] for f in list_forms(ws, lang, status="proposed")}),
                **_counts(latest.values(), SENTENCE_DECISIONS)}
    ops = opinions(ws, lang)
    decided = {item: anns[-1]["decision"] for item, anns in ops[stage].items() if stage == "adjudication" or _agree(anns)}
    open_disagreements = len(disagreements(ws, lang))
    row = {"pending": open_disagreements if stage == "adjudication" else len(latest_proposals(ws, lang)) - len(decided),
           **_counts(decided.values(), TRANSLATION_DECISIONS)}
    if stage == "translation":
        row |= {"disagreements": open_disagreements, "agreement": _translation_agreement(ops["translation"]).model_dump()}
    return row


def review_status(ws: Workspace) -> list[dict]:
    """Per stage and language with a project: pending items, decisions, reviewers, skipped tasks
    (and for translations, open disagreements and agreement)."""
    return [{"stage": p.stage, "lang": p.lang, **_stage_status(ws, p.stage, p.lang),
             **_annotation_counts(ws, p.stage, p.lang)} for p in review_projects(ws)]
