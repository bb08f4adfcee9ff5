"""The evaluation methods registry and what every method receives and returns.

A method is a module that calls `register(...)` with an object having `name`, `headline`
(the variant and metric that stand for it in reports and gates), `needs` (the capabilities of
`evaluate.protocols` it cannot run without: the runner refuses it, before loading anything, where
the backend lacks one) and `run(ctx, pairs)`; optionally `requires(offers)` (methods whose outputs
it reads, run first, given what the backend offers) and `report(page)` (its own report section:
Markdown lines, and figures drawn on the `evaluate.page.Page`). Adding one (consistency, M2C,
...) is a new module plus its name in `MODULES`; the runner, results, report and gates need no change.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from builder.errors import InputError
from builder.records import Language, PromptVariant
from evaluate.protocols import Capability, HiddenStates, ReplyFormat, TextGenerator, TextScorer
from evaluate.scoring import BosPolicy

MODULES = ("evaluate.direct", "evaluate.meta", "evaluate.neuro", "evaluate.consistency", "evaluate.selftranslate",
           "evaluate.m2c")
ITEM_COLUMNS = ("pair_id", "lang", "property_id", "negative_type", "method", "variant",
                "score_acceptable", "score_unacceptable", "correct")
ALL = "all"  # negative_type of scores aggregated over every negative type


class EvalOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    bos_policy: BosPolicy = "auto"
    seed: int = 0
    probe_pooling: Literal["last", "mean"] = "last"
    probe_groups: Literal["concept", "pair", "property"] = Field(
        "concept", description="what stays within one fold besides a pair's two sentences: every sentence about a "
        "concept (concept), nothing more (pair), every pair of a property (property)")
    probe_folds: int = Field(5, ge=3, description="outer folds of the nested cross-validation")
    probe_C: float = Field(1.0, gt=0)
    probe_jobs: int = Field(2, ge=1, description="probe sets (language x negative type x model) solved at once")
    control_seed: int = 0
    sample_temperature: float = Field(0.7, gt=0, description="the two sampled runs of the run-to-run baseline")
    # The paper's prompts by default, which is also how results that record no variant are read: they asked those.
    prompt_variant: PromptVariant = Field("paper", description="meta prompts: the paper's Figure 8, or corrected ones")
    sample_m2c: int | None = Field(None, ge=1, description="m2c: at most this many tests per language and test type, "
                                   "drawn by seed (`evaluate.data.sample_rows`); None: every test")
    sample_selftranslate: int | None = Field(None, ge=1, description="selftranslate: at most this many pairs per source "
                                             "language and negative type, drawn by seed; None: every pair")
    sample_consistency: int | None = Field(None, ge=1, description="consistency: its two sampled runs (the run-to-run "
                                           "baseline) ask at most this many pairs per language and negative type, drawn by "
                                           "seed; None: every pair")
    translate_directions: tuple[str, ...] = Field(
        (), description="selftranslate's source-target directions (en-de, de-en); none: English into every other language")

    @field_validator("translate_directions")
    @classmethod
    def _directions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for d in value:
            if not re.fullmatch(r"[a-z]{2,3}-[a-z]{2,3}", d) or d[: d.index("-")] == d[d.index("-") + 1 :]:
                raise ValueError(f"translate direction {d!r}: expected SOURCE-TARGET, two language codes (en-de)")
        return value


class Score(BaseModel):
    """One number of the summary: a method's metric on a language and negative type."""

    model_config = ConfigDict(frozen=True)
    method: str
    variant: str
    lang: str
    negative_type: str
    metric: str
    value: float
    n: int
    extra: dict = {}

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.method, self.variant, self.lang, self.negative_type, self.metric)


@dataclass
class MethodOutput:
    items: pd.DataFrame
    scores: list[Score]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


@dataclass
class Context:
    """What a method is given: the backend's capabilities (None where it lacks one), the release and the options."""

    languages: dict[str, Language]  # the evaluated release's declarations, by code
    options: EvalOptions
    work_dir: Path
    scorer: TextScorer | None = None
    generator: TextGenerator | None = None
    hidden: HiddenStates | None = None
    reply_format: ReplyFormat | None = None
    progress: Callable[[str, int, int], None] = lambda task, done, total: None
    m2c: pd.DataFrame | None = None  # M2C release rows (configs m2c_<lang>)
    outputs: dict[str, MethodOutput] = field(default_factory=dict)  # methods finished earlier in this run

    @property
    def offers(self) -> tuple[Capability, ...]:
        return tuple(c for c, v in ((TextScorer, self.scorer), (TextGenerator, self.generator),
                                    (HiddenStates, self.hidden), (ReplyFormat, self.reply_format)) if v is not None)


class Method(Protocol):
    name: str
    headline: tuple[str, str]
    needs: tuple[Capability, ...]

    def run(self, ctx: Context, pairs: pd.DataFrame) -> MethodOutput: ...


_REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    _REGISTRY[method.name] = method
    return method


def registry() -> dict[str, Method]:
    for module in MODULES:
        importlib.import_module(module)
    rank = {m: i for i, m in enumerate(MODULES)}  # listed in MODULES order, whatever was imported first
    return dict(sorted(_REGISTRY.items(), key=lambda kv: rank.get(type(kv[1]).__module__, len(rank))))


def resolve(names: str | list[str]) -> list[Method]:
    wanted = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
    known = registry()
    unknown = [n for n in wanted if n not in known]
    if unknown or not wanted:
        raise InputError(f"unknown method(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}")
    return [known[n] for n in dict.fromkeys(wanted)]


def item_frame(pairs: pd.DataFrame, method: str, variants: dict[str, tuple]) -> pd.DataFrame:
    """Item rows, variant after variant; `correct` means the acceptable side scored strictly higher."""
    k, n = len(variants), len(pairs)
    good = np.concatenate([np.asarray(a, dtype=np.float64) for a, _ in variants.values()]) if k else np.zeros(0)
    bad = np.concatenate([np.asarray(u, dtype=np.float64) for _, u in variants.values()]) if k else np.zeros(0)
    columns = {c: np.tile(pairs[c].to_numpy(), k) for c in ITEM_COLUMNS[:4]}
    return pd.DataFrame({**columns, "method": np.full(k * n, method, dtype=object),
                         "variant": np.repeat(np.array(list(variants), dtype=object), n),
                         "score_acceptable": good, "score_unacceptable": bad, "correct": good > bad})


def accuracy_scores(items: pd.DataFrame) -> list[Score]:
    """Accuracy per method x variant x language x negative type (sorted), then per method x variant x language
    over all types.

    Items whose score is undefined (NaN) are left out and counted in `extra.undefined`.
    """
    defined = (items["score_acceptable"].notna() & items["score_unacceptable"].notna()).to_numpy()
    hits = items["correct"].to_numpy(dtype=bool) & defined
    codes, labels = zip(*(pd.factorize(items[c], sort=True) for c in ("method", "variant", "lang", "negative_type")))
    labels = [u.tolist() for u in labels]
    sizes = [len(u) for u in labels]
    scores = []
    for depth in (4, 3):  # with the negative type, then over all of them
        cells, cell = np.unique(np.ravel_multi_index(codes[:depth], sizes[:depth]), return_inverse=True)
        n, right, rows = (np.bincount(cell, w, len(cells)) for w in (defined, hits, None))
        for at, cn, ch, cr in zip(cells.tolist(), n.tolist(), right.tolist(), rows.tolist()):
            m, v, lang, *neg = (labels[j][i] for j, i in enumerate(np.unravel_index(at, sizes[:depth])))
            if cn > 0:
                scores.append(Score(method=m, variant=v, lang=lang, negative_type=neg[0] if neg else ALL, metric="accuracy",
                                    value=ch / cn, n=int(cn), extra={"undefined": int(cr - cn)}))
    return scores
