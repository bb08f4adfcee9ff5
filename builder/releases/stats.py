"""Statistics a release reports: counts and concept–property overlap per language × negative type, and
review statistics, with the curators' agreement per config and review stage."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel

from builder.audits import OverlapRow, overlap_table
from builder.audits.overlap import PairWords
from builder.languages import registry
from builder.records import NEGATIVE_TYPES
from builder.releases.features import is_m2c
from builder.releases.rows import ConfigRows
from builder.review_stages import stages
from builder.reviews import StageAgreement, curators, stage_agreement
from builder.workspace.store import Workspace


class ConfigReview(BaseModel):
    config: str
    rows: int
    verified: int
    waived: int
    source: int
    corrected: int
    min_reviewers: int  # the least-reviewed row's curators (0 when the config has source rows only)
    curators: int  # people who reviewed or translated this language's words
    agreement: list[StageAgreement] = []  # each review stage of the config's rows that curators annotated


class ReleaseStats(BaseModel):
    counts: dict[str, dict[str, int]]  # config -> negative type (pairs) or capability (M2C) -> rows
    review: list[ConfigReview]
    models: list[dict]
    overlap: list[OverlapRow] = []  # pair configs' concept–property overlap, by language and negative type

    @property
    def rows(self) -> int:
        return sum(sum(c.values()) for c in self.counts.values())

    @property
    def reviewed_share(self) -> float:
        """Share of non-source rows verified by curators (not waived)."""
        pairs = [r for r in self.review if not is_m2c(r.config)]
        base = sum(r.rows - r.source for r in pairs)
        return sum(r.verified for r in pairs) / base if base else 1.0

    @property
    def corrected_share(self) -> float:
        pairs = [r for r in self.review if not is_m2c(r.config)]
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


def overlap(configs: dict[str, ConfigRows], scripts: dict[str, tuple[bool, str]]) -> list[OverlapRow]:
    """How often a released pair's concept shares a character or word stem with its property (`builder.audits.overlap`)."""
    out = []
    for c in sorted((c for c in configs.values() if not c.is_m2c), key=lambda c: c.lang):
        spaced, script = scripts.get(c.lang, (True, "Latn"))
        words = (PairWords(NEGATIVE_TYPES[neg], prop, acc, unacc) for neg, prop, acc, unacc in zip(
            c.columns["negative_type"], c.columns["property"], c.columns["acceptable_concept"], c.columns["unacceptable_concept"]))
        out += overlap_table(c.lang, words, spaced=spaced, script=script)
    return out


def _agreement(ws: Workspace, lang: str, rows: str) -> list[StageAgreement]:
    """The agreement of each review stage whose decisions stand behind these released rows ("pairs" or "m2c")."""
    return [a for a in (stage_agreement(ws, lang, s.name) for s in stages() if s.released_in == rows) if a is not None]


def release_stats(ws: Workspace, configs: dict[str, ConfigRows], models: list[dict]) -> ReleaseStats:
    review = []
    for name, c in sorted(configs.items()):
        if c.is_m2c:
            review.append(ConfigReview(config=name, rows=len(c), verified=len(c) - len(c.waived), waived=len(c.waived),
                                       source=0, corrected=0, min_reviewers=0, curators=0,
                                       agreement=_agreement(ws, c.lang, "m2c")))
            continue
        status = Counter(c.columns["review_status"])
        reviewed = [n for n, s in zip(c.columns["n_reviewers"], c.columns["review_status"]) if s != "source"]
        review.append(ConfigReview(
            config=name, rows=len(c), verified=status["verified"], waived=status["waived"], source=status["source"],
            corrected=sum(c.columns["corrected"]), min_reviewers=min(reviewed, default=0),
            curators=len(curators(ws, c.lang)) if reviewed else 0, agreement=_agreement(ws, c.lang, "pairs"),
        ))
    scripts = {code: (lang.spaced, lang.script) for code, lang in registry(ws).items()}
    return ReleaseStats(counts=counts(configs), review=review, models=models, overlap=overlap(configs, scripts))
