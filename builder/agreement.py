"""Agreement between curators, computed by us (the free Label Studio has none); pure functions.

Decisions: Krippendorff's alpha for nominal data, which handles any number of curators per item
and items with different numbers of curators. Corrected texts: exact-match rate and chrF, averaged
over every pair of curators who both gave a text for the same item.
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations

from pydantic import BaseModel
from sacrebleu.metrics import CHRF


class Agreement(BaseModel):
    items: int  # items seen by two or more curators
    alpha: float | None  # None when it is undefined (fewer than two such items, or a single category)
    observed: float | None  # share of agreeing curator pairs on decisions
    text_pairs: int
    exact_match: float | None
    chrf: float | None


def krippendorff_alpha_nominal(units: list[list[str]]) -> float | None:
    """Alpha for nominal labels; each unit lists the labels its curators gave (units with < 2 are skipped)."""
    units = [u for u in units if len(u) >= 2]
    if not units:
        return None
    coincidence: Counter = Counter()
    for u in units:
        m = len(u)
        for a, b in ((a, b) for i, a in enumerate(u) for j, b in enumerate(u) if i != j):
            coincidence[(a, b)] += 1 / (m - 1)
    totals: Counter = Counter()
    for (a, _), v in coincidence.items():
        totals[a] += v
    n = sum(totals.values())
    observed = sum(v for (a, b), v in coincidence.items() if a != b) / n
    expected = sum(totals[a] * totals[b] for a in totals for b in totals if a != b) / (n * (n - 1))
    if expected == 0:
        return None
    return 1 - observed / expected


def agreement(decisions: dict[str, list[str]], texts: dict[str, list[str]]) -> Agreement:
    """decisions: item -> each curator's decision; texts: item -> each curator's final text."""
    multi = {k: v for k, v in decisions.items() if len(v) >= 2}
    pairs = [(a, b) for v in multi.values() for a, b in combinations(v, 2)]
    text_pairs = [(a, b) for v in texts.values() if len(v) >= 2 for a, b in combinations(v, 2)]
    chrf = CHRF()
    return Agreement(
        items=len(multi),
        alpha=krippendorff_alpha_nominal(list(multi.values())),
        observed=(sum(a == b for a, b in pairs) / len(pairs)) if pairs else None,
        text_pairs=len(text_pairs),
        exact_match=(sum(a == b for a, b in text_pairs) / len(text_pairs)) if text_pairs else None,
        chrf=(sum(chrf.sentence_score(a, [b]).score for a, b in text_pairs) / len(text_pairs)) if text_pairs else None,
    )
