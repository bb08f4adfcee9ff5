"""Cross-lingual consistency of a model's decisions (the multisense paper's measure).

A decision table maps an item id (a pair id, shared by every language) to the label the model chose,
or None when its answer could not be read. As in the paper, an unreadable answer is one more label,
"invalid": two invalid answers agree with each other and disagree with any valid one. Consistency
between two tables is the share of their common items with the same label.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from itertools import combinations

from pydantic import BaseModel

INVALID = "invalid"
Decisions = Mapping[str, str | None]


class Breakdown(BaseModel):
    """Consistency of a target against a source, overall and split by the source's correctness."""

    n: int
    overall: float | None
    n_correct: int  # items the source answered correctly
    on_correct: float | None
    n_incorrect: int  # items the source answered wrongly (a valid, wrong label)
    on_incorrect: float | None
    invalid_source: int
    invalid_target: int


class ConsistencyReport(BaseModel):
    langs: list[str]
    matrix: dict[str, dict[str, float | None]]  # symmetric; the diagonal is 1 where a language has items
    items: dict[str, dict[str, int]]  # common items per pair of languages
    against_source: dict[str, Breakdown]  # every other language against the source language


def _label(value: str | None) -> str:
    return INVALID if value is None else value


def _share(hits: int, n: int) -> float | None:
    return hits / n if n else None


def agreement(a: Decisions, b: Decisions) -> tuple[float | None, int]:
    common = a.keys() & b.keys()
    return _share(sum(_label(a[i]) == _label(b[i]) for i in common), len(common)), len(common)


def breakdown(source: Decisions, target: Decisions, gold: Mapping[str, str]) -> Breakdown:
    common = sorted(source.keys() & target.keys())
    same = {i: _label(source[i]) == _label(target[i]) for i in common}
    correct = [i for i in common if source[i] is not None and source[i] == gold[i]]
    incorrect = [i for i in common if source[i] is not None and source[i] != gold[i]]
    return Breakdown(
        n=len(common), overall=_share(sum(same.values()), len(common)),
        n_correct=len(correct), on_correct=_share(sum(same[i] for i in correct), len(correct)),
        n_incorrect=len(incorrect), on_incorrect=_share(sum(same[i] for i in incorrect), len(incorrect)),
        invalid_source=sum(source[i] is None for i in common), invalid_target=sum(target[i] is None for i in common),
    )


def consistency(decisions: Mapping[str, Decisions], gold: Mapping[str, str], source: str = "en") -> ConsistencyReport:
    """Every pair of languages, and every language against `source` with the correctness split."""
    langs = sorted(decisions)
    matrix: dict[str, dict[str, float | None]] = {x: {} for x in langs}
    items: dict[str, dict[str, int]] = {x: {} for x in langs}
    for x in langs:
        matrix[x][x], items[x][x] = (1.0 if decisions[x] else None), len(decisions[x])
    for x, y in combinations(langs, 2):
        value, n = agreement(decisions[x], decisions[y])
        matrix[x][y] = matrix[y][x] = value
        items[x][y] = items[y][x] = n
    against = {x: breakdown(decisions[source], decisions[x], gold) for x in langs if x != source and source in decisions}
    return ConsistencyReport(langs=langs, matrix=matrix, items=items, against_source=against)


def label_distribution(decisions: Decisions) -> dict[str, float]:
    """Share of each predicted label, "invalid" included (the paper's per-condition distributions)."""
    counts = Counter(_label(v) for v in decisions.values())
    total = sum(counts.values())
    return {label: n / total for label, n in sorted(counts.items())} if total else {}
