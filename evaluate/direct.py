"""Direct: which sentence of a pair does the model find more probable (XCOMPS §4.2, COMPS)?

Each unique sentence is scored once (an acceptable sentence is shared by all its negatives).
Variants of the score, all recorded:
- `full`: log-probability of the whole sentence (XCOMPS's Direct);
- `conditional`: log-probability of what follows the concept, given each sentence's own concept
  (COMPS). It starts, in each sentence, at the first scored token that starts at or after the end of
  the concept's span (the spans the release rows carry), so no part of a concept is ever scored;
  where the two remainders differ (their text or their tokens: a token that swallowed the concept's
  end in one sentence, say) it is undefined (NaN), counted and reported, never scored on unequal
  text. A release without concept spans has no conditional scores;
- `*_per_token`, `*_per_char`, `*_per_byte`: each divided by the scored tokens, characters or
  UTF-8 bytes (characters and bytes differ for non-Latin scripts: both are given).
All pairs' variants are read at once from flat arrays; per-pair Python only finds where the
conditional part starts (on a small model, per-pair bookkeeping in Python would cost about a third of
the forward pass).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

import numpy as np
import pandas as pd

from evaluate.methods import ALL, Context, MethodOutput, accuracy_scores, item_frame, register
from evaluate.page import Page, table
from evaluate.protocols import TextScorer
from evaluate.scoring import TokenScores

SPANS = ("full", "conditional")
NORMS = ("", "_per_token", "_per_char", "_per_byte")
VARIANTS = tuple(s + n for s in SPANS for n in NORMS)
SPAN_COLUMNS = ("acceptable_concept_span", "unacceptable_concept_span")


def after_concept(a: str, starts_a: Sequence[int], end_a: int | None, b: str, starts_b: Sequence[int],
                  end_b: int | None) -> tuple[int, int] | None:
    """Where the conditional part of each sentence starts: at its first scored token starting at or after its
    concept's end (`starts_*` sorted). None when a concept's end is unknown, nothing follows it, or the two
    remainders differ in text or in where their tokens start."""
    if end_a is None or end_b is None:
        return None
    i, j = bisect_left(starts_a, end_a), bisect_left(starts_b, end_b)
    if i == len(starts_a) or j == len(starts_b):
        return None
    ca, cb = starts_a[i], starts_b[j]
    if a[ca:] != b[cb:] or len(starts_a) - i != len(starts_b) - j:
        return None
    if any(x - ca != y - cb for x, y in zip(starts_a[i:], starts_b[j:])):
        return None
    return ca, cb


def concept_ends(pairs: pd.DataFrame) -> tuple[list[int | None], list[int | None]]:
    """The end of each row's acceptable and unacceptable concept span (None where the release has none)."""
    if not all(c in pairs.columns for c in SPAN_COLUMNS):
        return [None] * len(pairs), [None] * len(pairs)

    def ends(column: str) -> list[int | None]:
        return [None if span is None or len(span) != 2 or pd.isna(span[1]) else int(span[1]) for span in pairs[column]]

    return ends(SPAN_COLUMNS[0]), ends(SPAN_COLUMNS[1])


class ScoredTexts:
    """Many texts' scored tokens in flat arrays, ordered by text and then by start, so that the sum and count of
    the tokens starting at or after a character are read for many (text, character) at once."""

    def __init__(self, scores: Sequence[TokenScores]) -> None:
        counts = np.array([len(s.logprobs) for s in scores], dtype=np.int64)
        self.ends = np.cumsum(counts)
        text = np.repeat(np.arange(len(scores)), counts)
        starts = np.concatenate([s.starts for s in scores]) if scores else np.zeros(0, np.int64)
        order = np.lexsort((starts, text))
        starts = starts[order]
        logprobs = np.concatenate([s.logprobs for s in scores]) if scores else np.zeros(0)
        self.cumulative = np.concatenate([[0.0], np.cumsum(logprobs.astype(np.float64)[order])])
        self.stride = int(starts.max(initial=0)) + 2  # keys text * stride + start sort as (text, start)
        self.keys = text * self.stride + starts
        listed = starts.tolist()
        self.start_lists = [listed[e - c : e] for e, c in zip(self.ends.tolist(), counts.tolist())]

    def from_char(self, text: np.ndarray, char: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sum and count of the scored tokens of each `text` (an index) that start at or after its `char`."""
        first = np.searchsorted(self.keys, text * self.stride + np.minimum(char, self.stride - 1))
        return self.cumulative[self.ends[text]] - self.cumulative[first], self.ends[text] - first


def normalisations(span: str, total: np.ndarray, n: np.ndarray, chars: np.ndarray, nbytes: np.ndarray) -> dict[str, np.ndarray]:
    """The four normalisations of a span's scores (NaN where it has no scored token)."""
    total = np.where(n > 0, total, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {span: total, span + "_per_token": total / n, span + "_per_char": total / chars, span + "_per_byte": total / nbytes}


def pair_scores(pairs: pd.DataFrame, scores: dict[tuple[str, str], TokenScores]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per variant, the acceptable and unacceptable sentence's scores for each pair row."""
    good, bad = pairs["acceptable_sentence"].tolist(), pairs["unacceptable_sentence"].tolist()
    texts = list(dict.fromkeys(good + bad))
    table = ScoredTexts([scores[("", t)] for t in texts])
    index = {t: k for k, t in enumerate(texts)}
    ia, ib = np.array([index[t] for t in good], dtype=np.int64), np.array([index[t] for t in bad], dtype=np.int64)
    chars = np.array([len(t) for t in texts], dtype=np.int64)
    full = normalisations("full", *table.from_char(np.arange(len(texts)), np.zeros(len(texts), np.int64)),
                      chars, np.array([len(t.encode("utf-8")) for t in texts]))
    starts = [after_concept(a, table.start_lists[ka], ea, b, table.start_lists[kb], eb)
              for a, b, ka, kb, ea, eb in zip(good, bad, ia.tolist(), ib.tolist(), *concept_ends(pairs))]
    defined = np.array([s is not None for s in starts])
    at = np.array([s or (0, 0) for s in starts], dtype=np.int64).reshape(-1, 2)
    tail = np.where(defined, chars[ia] - at[:, 0], 0)
    tail_bytes = np.array([len(a[s[0]:].encode("utf-8")) if s else 0 for a, s in zip(good, starts)])
    sides = []
    for k, side in enumerate((ia, ib)):
        total, n = table.from_char(side, at[:, k])
        sides.append(normalisations("conditional", total, np.where(defined, n, 0), tail, tail_bytes))
    return {v: (full[v][ia], full[v][ib]) if v in full else (sides[0][v], sides[1][v]) for v in VARIANTS}


class Direct:
    name = "direct"
    headline = ("full", "accuracy")
    needs = (TextScorer,)

    def run(self, ctx: Context, pairs: pd.DataFrame) -> MethodOutput:
        sentences = list(dict.fromkeys(pairs["acceptable_sentence"].tolist() + pairs["unacceptable_sentence"].tolist()))
        scored = ctx.scorer.score([("", s) for s in sentences], lambda d, t: ctx.progress("direct: sentences", d, t))
        items = item_frame(pairs, self.name, pair_scores(pairs, scored))
        return MethodOutput(items, accuracy_scores(items))

    def report(self, page: Page) -> list[str]:
        sf = page.scores
        cond = sf[(sf["method"] == self.name) & (sf["variant"] == "conditional") & (sf["negative_type"] == ALL)]
        if cond.empty:
            return []
        undefined = [int(e.get("undefined", 0)) for e in cond["extra"]]
        counts = pd.DataFrame({"lang": cond["lang"], "scored": cond["n"], "undefined": undefined})
        return ["## Direct: conditional scores left undefined", "",
                "The conditional score starts at the first token after the concept in each sentence; pairs whose two "
                "remainders differ (in text or tokens), or whose release row carries no concept span, are left out.", "",
                table(counts), ""]


register(Direct())
