"""Meta in generative mode, for models behind an endpoint: ask the question, read the free-text reply.

The prompt is the language's meta prompt (as in scoring mode), in both orders; the reply is mapped to
one of the two concepts by `evaluate.answers.normalize`, or to none ("invalid": it names neither or
both). Item rows keep meta's shape: the chosen concept scores 1 and the other 0, an invalid reply 0
and 0, so it counts as wrong, and `meta_replies` keeps every reply as read.
"""

from __future__ import annotations

import pandas as pd

from evaluate.answers import normalize
from evaluate.methods import Context, MethodOutput, Score, accuracy_scores, item_frame

ACCEPTABLE, UNACCEPTABLE = "acceptable", "unacceptable"
MAX_NEW_TOKENS = 20


def read_choice(reply: str, acceptable: str, unacceptable: str, lang: str) -> str | None:
    """Which concept a reply names: "acceptable", "unacceptable", or None."""
    answer = normalize(reply, [acceptable, unacceptable], lang)
    return None if answer is None else ACCEPTABLE if answer == acceptable else UNACCEPTABLE


def ask(ctx: Context, pairs: pd.DataFrame, prompts: list[str], *, stage: str, temperature: float | None = None,
        seed: int | None = None) -> tuple[list[str], list[str | None]]:
    """Replies to one prompt per pair row and the concept each names."""
    replies = ctx.generator.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, stage=stage, temperature=temperature,
                                     seed=seed, progress=lambda d, t: ctx.progress(stage, d, t))
    return replies, [read_choice(r, a, u, lang) for r, a, u, lang in
                     zip(replies, pairs["acceptable_concept"], pairs["unacceptable_concept"], pairs["lang"])]


def run_generative(ctx: Context, pairs: pd.DataFrame, name: str, orders: dict[str, list[str]]) -> MethodOutput:
    frames, logs, invalid = [], [], []
    for order, prompts in orders.items():
        replies, choices = ask(ctx, pairs, prompts, stage=f"meta ({order})")
        frames.append(item_frame(pairs, name, {order: ([float(c == ACCEPTABLE) for c in choices],
                                                       [float(c == UNACCEPTABLE) for c in choices])}))
        logs.append(pd.DataFrame({"pair_id": pairs["pair_id"], "lang": pairs["lang"], "variant": order,
                                  "reply": replies, "choice": choices}))
    items = pd.concat(frames, ignore_index=True)
    replies = pd.concat(logs, ignore_index=True)
    for (variant, lang), grp in replies.groupby(["variant", "lang"]):
        invalid.append(Score(method=name, variant=variant, lang=lang, negative_type="all", metric="invalid_share",
                             value=float(grp["choice"].isna().mean()), n=len(grp)))
    return MethodOutput(items, accuracy_scores(items) + invalid, {"meta_replies": replies})
