"""Statistics a release reports: counts per language × negative type, and review statistics."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel
from sqlalchemy import func, select

from builder.records import NEGATIVE_TYPES
from builder.releases.rows import ConfigRows
from builder.workspace import schema as t
from builder.workspace.store import Workspace


class Agreement(BaseModel):
    items: int  # items two or more curators decided
    alpha: float | None
    exact_match: float | None
    chrf: float | None


class ConfigReview(BaseModel):
    config: str
    rows: int
    verified: int
    waived: int
    source: int
    corrected: int
    min_reviewers: int  # the least-reviewed row's curators (0 when the config has source rows only)
    curators: int  # people who reviewed or translated this language's words
    agreement: Agreement | None = None


class ReleaseStats(BaseModel):
    counts: dict[str, dict[str, int]]  # config -> negative type (pairs) or capability (M2C) -> rows
    review: list[ConfigReview]
    models: list[dict]

    @property
    def rows(self) -> int:
        return sum(sum(c.values()) for c in self.counts.values())

    @property
    def reviewed_share(self) -> float:
        """Share of non-source rows verified by curators (not waived)."""
        pairs = [r for r in self.review if not r.config.startswith("m2c_")]
        base = sum(r.rows - r.source for r in pairs)
        return sum(r.verified for r in pairs) / base if base else 1.0

    @property
    def corrected_share(self) -> float:
        pairs = [r for r in self.review if not r.config.startswith("m2c_")]
        base = sum(r.rows - r.source for r in pairs)
        return sum(r.corrected for r in pairs) / base if base else 0.0


def counts(configs: dict[str, ConfigRows]) -> dict[str, dict[str, int]]:
    out = {}
    for name, c in sorted(configs.items()):
        if c.is_m2c:
            out[name] = dict(sorted(Counter(c.columns["capability"]).items()))
        else:
            n = Counter(c.columns["negative_type"])
            out[name] = {neg: n[i] for i, neg in enumerate(NEGATIVE_TYPES)}
    return out


def _curators(ws: Workspace, lang: str) -> int:
    ra, rv, pr, st = t.review_annotations, t.reviews, t.proposals, t.seed_translations
    names = {r["reviewer"] for r in ws.rows(select(ra.c.reviewer).where(ra.c.lang == lang).distinct())}
    names |= {r["reviewer"] for r in ws.rows(select(rv.c.reviewer).distinct().select_from(rv.join(pr, pr.c.id == rv.c.proposal_id))
                                              .where(pr.c.lang == lang, rv.c.channel != "label-studio"))}
    names |= {r["translator"] for r in ws.rows(select(st.c.translator).where(st.c.lang == lang).distinct())}
    return len(names)


def _agreement(ws: Workspace, lang: str) -> Agreement | None:
    ra = t.review_annotations
    n = ws.rows(select(func.count()).select_from(ra).where(ra.c.lang == lang))[0]
    if not list(n.values())[0]:
        return None
    from annotation.agreement import agreement  # Label Studio's client loads only when there are annotations
    from annotation.review import opinions

    ops = opinions(ws, lang)["translation"]
    a = agreement({i: [x["decision"] for x in v] for i, v in ops.items()},
                  {i: [x["final_text"] for x in v if x["decision"] in ("accept", "corrected")] for i, v in ops.items()})
    return Agreement(items=a.items, alpha=a.alpha, exact_match=a.exact_match, chrf=a.chrf)


def release_stats(ws: Workspace, configs: dict[str, ConfigRows], models: list[dict]) -> ReleaseStats:
    review = []
    for name, c in sorted(configs.items()):
        if c.is_m2c:
            review.append(ConfigReview(config=name, rows=len(c), verified=len(c) - len(c.waived), waived=len(c.waived),
                                       source=0, corrected=0, min_reviewers=0, curators=0))
            continue
        status = Counter(c.columns["review_status"])
        reviewed = [n for n, s in zip(c.columns["n_reviewers"], c.columns["review_status"]) if s != "source"]
        review.append(ConfigReview(
            config=name, rows=len(c), verified=status["verified"], waived=status["waived"], source=status["source"],
            corrected=sum(c.columns["corrected"]), min_reviewers=min(reviewed, default=0),
            curators=_curators(ws, c.lang) if reviewed else 0, agreement=_agreement(ws, c.lang),
        ))
    return ReleaseStats(counts=counts(configs), review=review, models=models)
