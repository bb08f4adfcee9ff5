"""How sure a score is: a 95% interval for a cell of n items, and a paired test of two runs on the same items.

A cell of 26 pairs (2–3 for a small language) says little on its own; the report and the leaderboard
show each value with its n and interval. Two runs compared on the items both hold (a model against its
random control, a model on two releases) are compared item by item: McNemar's exact test on the items
only one run got right, and a bootstrap interval of the change, so that a change of the items (the data)
is not read as a change of the model.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import binomtest

from builder.records import Record

Z95 = 1.959963984540054
RESAMPLES = 2000


def wilson(value: float, n: int) -> tuple[float, float]:
    """The 95% Wilson interval of a proportion `value` of `n` items (NaN, NaN without items); for a mean F1 of n
    pairs it is the interval of a proportion of that size, an approximation."""
    if n <= 0 or value != value:
        return float("nan"), float("nan")
    p = min(max(value, 0.0), 1.0)
    centre = (p + Z95 ** 2 / (2 * n)) / (1 + Z95 ** 2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / (1 + Z95 ** 2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


class PairedChange(Record):
    """Two runs' right and wrong on the same n items: `after` minus `before`, its 95% bootstrap interval, and McNemar's
    exact p on the `gained` (right only after) and `lost` (right only before) items."""

    n: int
    before: float
    after: float
    change: float
    low: float
    high: float
    gained: int
    lost: int
    p_value: float

    @property
    def significant(self) -> bool:
        return not self.low <= 0.0 <= self.high


def paired_change(before, after, seed: int = 0) -> PairedChange | None:
    """The paired comparison of two boolean arrays over the same items, in the same order; None without items."""
    a, b = np.asarray(before, dtype=bool), np.asarray(after, dtype=bool)
    n = len(a)
    if n == 0:
        return None
    diff = b.astype(np.int8) - a.astype(np.int8)
    draws = np.random.default_rng(seed).integers(0, n, size=(RESAMPLES, n))
    means = diff[draws].mean(axis=1)
    gained, lost = int((diff > 0).sum()), int((diff < 0).sum())
    p = binomtest(gained, gained + lost, 0.5).pvalue if gained + lost else 1.0
    return PairedChange(n=n, before=float(a.mean()), after=float(b.mean()), change=float(diff.mean()),
                        low=float(np.quantile(means, 0.025)), high=float(np.quantile(means, 0.975)),
                        gained=gained, lost=lost, p_value=float(p))
