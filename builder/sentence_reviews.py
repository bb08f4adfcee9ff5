"""Curators' decisions on generated sentence pairs, as the rest of the pipeline sees them.

A decision counts only for the version of the pair it was made on (a hash of both sentences): when a
rejected pair is regenerated, the old decision stops applying and the new sentences wait for review.
For each pair the latest decided annotation on its current version wins.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel
from sqlalchemy import select

from builder.workspace import schema as t
from builder.workspace.store import Workspace

SentenceDecision = Literal["accept", "fix", "reject"]


class SentenceReview(BaseModel):
    pair_id: str
    lang: str
    decision: SentenceDecision
    acceptable: str  # the sentences as the curator left them
    unacceptable: str
    reviewer: str
    comment: str
    annotation_id: int


def version(acceptable: str, unacceptable: str) -> str:
    return hashlib.sha256(f"{acceptable}\x1f{unacceptable}".encode()).hexdigest()[:16]


def current_pairs(ws: Workspace, lang: str) -> dict[str, dict]:
    """pair id -> the sentence pair as generated now, with its version."""
    rows = ws.rows(select(t.sentence_pairs).where(t.sentence_pairs.c.lang == lang))
    return {r["pair_id"]: {**r, "version": version(r["acceptable"], r["unacceptable"])} for r in rows}


def decisions(ws: Workspace, lang: str) -> dict[str, SentenceReview]:
    """pair id -> the latest curator decision on the pair's current sentences."""
    current = current_pairs(ws, lang)
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
        if r["item_id"] in current and current[r["item_id"]]["version"] == r["version"]:
            out[r["item_id"]] = SentenceReview(pair_id=r["item_id"], lang=lang, decision=r["decision"],
                                               acceptable=r["acceptable"], unacceptable=r["unacceptable"],
                                               reviewer=r["reviewer"], comment=r["comment"],
                                               annotation_id=r["annotation_id"])
    return out
