"""Direct: which sentence of a pair does the model find more probable (XCOMPS §4.2, COMPS)?

Each unique sentence is scored once (an acceptable sentence is shared by all its negatives).
Variants of the score, all recorded:
- `full`: log-probability of the whole sentence (XCOMPS's Direct);
- `conditional`: log-probability of the tokens after the point where the two sentences stop
  differing, i.e. the shared continuation given each sentence's own concept (COMPS); it starts at a
  token boundary present in both sentences, so both sides score the same text;
- `*_per_token`, `*_per_char`, `*_per_byte`: each divided by the scored tokens, characters or
  UTF-8 bytes (characters and bytes differ for non-Latin scripts: both are given).
All pairs' variants are read at once from flat arrays; per-pair Python only finds the shared
continuation (on a small model, per-pair bookkeeping was a third of the cost of the forward pass).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from evaluate.methods import Context, MethodOutput, accuracy_scores, item_frame, register
from evaluate.scoring import TokenScores

SPANS = ("full", "conditional")
NORMS = ("", "_per_token", "_per_char", "_per_byte")
VARIANTS = tuple(s + n for s in SPANS for n in NORMS)


def shared_continuation(a: str, starts_a: Iterable[int], b: str, starts_b: Iterable[int]) -> int:
    """Length in characters of the longest common suffix of a and b that begins at a scored token's start in
    both (0: none). Candidates are the distances from the end that both texts have a token start at; a suffix
    in common has all its shorter suffixes in common, so the longest candidate that matches is the answer."""
    common = {len(a) - s for s in starts_a} & {len(b) - s for s in starts_b}
    return next((d for d in sorted(common, reverse=True) if d > 0 and a[len(a) - d :] == b[len(b) - d :]), 0)


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


def normalised(span: str, total: np.ndarray, n: np.ndarray, chars: np.ndarray, nbytes: np.ndarray) -> dict[str, np.ndarray]:
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
    shared = np.array([shared_continuation(a, table.start_lists[ka], b, table.start_lists[kb])
                       for a, b, ka, kb in zip(good, bad, ia.tolist(), ib.tolist())], dtype=np.int64)
    chars = np.array([len(t) for t in texts], dtype=np.int64)
    full = normalised("full", *table.from_char(np.arange(len(texts)), np.zeros(len(texts), np.int64)),
                      chars, np.array([len(t.encode("utf-8")) for t in texts]))
    tail_bytes = np.array([len(a[len(a) - d :].encode("utf-8")) if d else 0 for a, d in zip(good, shared.tolist())])
    sides = []
    for side in (ia, ib):
        total, n = table.from_char(side, chars[side] - shared)
        sides.append(normalised("conditional", total, np.where(shared > 0, n, 0), shared, tail_bytes))
    return {v: (full[v][ia], full[v][ib]) if v in full else (sides[0][v], sides[1][v]) for v in VARIANTS}


class Direct:
    name = "direct"
    headline = ("full", "accuracy")

    def run(self, ctx: Context, pairs: pd.DataFrame) -> MethodOutput:
        sentences = list(dict.fromkeys(pairs["acceptable_sentence"].tolist() + pairs["unacceptable_sentence"].tolist()))
        scored = ctx.scorer.score([("", s) for s in sentences], lambda d, t: ctx.progress("direct: sentences", d, t))
        items = item_frame(pairs, self.name, pair_scores(pairs, scored))
        return MethodOutput(items, accuracy_scores(items))


register(Direct())
