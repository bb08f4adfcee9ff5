"""Direct: which sentence of a pair does the model find more probable (XCOMPS §4.2, COMPS)?

Each unique sentence is scored once (an acceptable sentence is shared by all its negatives).
Variants of the score, all recorded:
- `full`: log-probability of the whole sentence (XCOMPS's Direct);
- `conditional`: log-probability of the tokens after the point where the two sentences stop
  differing, i.e. the shared continuation given each sentence's own concept (COMPS); it starts at a
  token boundary present in both sentences, so both sides score the same text;
- `*_per_token`, `*_per_char`, `*_per_byte`: each divided by the scored tokens, characters or
  UTF-8 bytes (characters and bytes differ for non-Latin scripts: both are given).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from evaluate.methods import Context, MethodOutput, accuracy_scores, item_frame, register
from evaluate.scoring import TokenScores

SPANS = ("full", "conditional")
NORMS = ("", "_per_token", "_per_char", "_per_byte")
VARIANTS = tuple(s + n for s in SPANS for n in NORMS)


def shared_continuation(a: str, sa: TokenScores, b: str, sb: TokenScores) -> tuple[int, int] | None:
    """Start (in a, in b) of the longest common suffix that begins at a scored token boundary in both."""
    limit, longest = 0, min(len(a), len(b))  # the longest common suffix, by bisection
    while limit < longest:
        mid = (limit + longest + 1) // 2
        limit, longest = (mid, longest) if a[len(a) - mid :] == b[len(b) - mid :] else (limit, mid - 1)
    common = set((len(a) - sa.starts).tolist()) & set((len(b) - sb.starts).tolist())
    lengths = [d for d in common if 0 < d <= limit]
    if not lengths:
        return None
    d = max(lengths)
    return len(a) - d, len(b) - d


def span_scores(text: str, ts: TokenScores, start: int | None) -> dict[str, float]:
    """The four normalisations of the scored tokens from character `start` (NaN when undefined)."""
    if start is None:
        return dict.fromkeys(NORMS, float("nan"))
    total, n = ts.from_char(start)
    span = text[start:]
    if n == 0:
        return dict.fromkeys(NORMS, float("nan"))
    return {"": total, "_per_token": total / n, "_per_char": total / len(span),
            "_per_byte": total / len(span.encode("utf-8"))}


def pair_scores(pairs: pd.DataFrame, scores: dict[tuple[str, str], TokenScores]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per variant, the acceptable and unacceptable sentence's scores for each pair row."""
    full = {t: span_scores(t, ts, 0) for (_, t), ts in scores.items()}
    out = {v: (np.empty(len(pairs)), np.empty(len(pairs))) for v in VARIANTS}
    for i, (a, b) in enumerate(zip(pairs["acceptable_sentence"], pairs["unacceptable_sentence"])):
        sa, sb = scores[("", a)], scores[("", b)]
        cut = shared_continuation(a, sa, b, sb)
        ca, cb = (span_scores(a, sa, cut[0]), span_scores(b, sb, cut[1])) if cut else (span_scores(a, sa, None),) * 2
        for norm in NORMS:
            out["full" + norm][0][i], out["full" + norm][1][i] = full[a][norm], full[b][norm]
            out["conditional" + norm][0][i], out["conditional" + norm][1][i] = ca[norm], cb[norm]
    return out


class Direct:
    name = "direct"
    headline = ("full", "accuracy")

    def run(self, ctx: Context, pairs: pd.DataFrame) -> MethodOutput:
        sentences = pd.unique(pd.concat([pairs["acceptable_sentence"], pairs["unacceptable_sentence"]]))
        scored = ctx.scorer.score([("", s) for s in sentences], lambda d, t: ctx.progress("direct: sentences", d, t))
        items = item_frame(pairs, self.name, pair_scores(pairs, scored))
        return MethodOutput(items, accuracy_scores(items))


register(Direct())
