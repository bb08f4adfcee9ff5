"""Meta: ask the model, in the pair's language, which concept has the property (XCOMPS §4.2, Figure 8).

The language's prompt template names both concepts and ends with the answer prefix; each concept is
scored as the continuation. Both orders are asked, because models favour a position: accuracy with
the acceptable concept listed first and second, their mean (order-averaged accuracy, the headline)
and the order bias (first minus second: 1 for a model that always picks the first word, 0 for none).

Behind an endpoint (no scores) meta is generative: the same prompts are asked and the free-text reply
is mapped to one of the two concepts by `evaluate.answers.read_answer`, or to none ("invalid": it names
neither or both). Item rows keep meta's shape: the chosen concept scores 1 and the other 0, an invalid
reply 0 and 0, so it counts as wrong, and `meta_replies` keeps every reply as read.
"""

from __future__ import annotations

import pandas as pd

from builder.errors import InputError
from evaluate.answers import read_answer
from evaluate.methods import ALL, Context, MethodOutput, Score, accuracy_scores, item_frame, register
from evaluate.page import Page, table
from evaluate.protocols import TextGenerator

ORDERS = ("acceptable_first", "acceptable_second")
ACCEPTABLE, UNACCEPTABLE = "acceptable", "unacceptable"
MAX_NEW_TOKENS = 20


def read_choice(reply: str, acceptable: str, unacceptable: str, lang: str) -> str | None:
    """Which concept a reply names: "acceptable", "unacceptable", or None."""
    answer = read_answer(reply, [acceptable, unacceptable], lang)
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


def prompts(pairs: pd.DataFrame, templates: dict[str, str]) -> dict[str, list[str]]:
    """For each order, the prompt of every pair row."""
    out = {o: [] for o in ORDERS}
    for lang, prop, acc, unacc in zip(pairs["lang"], pairs["property"], pairs["acceptable_concept"], pairs["unacceptable_concept"]):
        t = templates[lang]
        out["acceptable_first"].append(t.format(property=prop, word1=acc, word2=unacc))
        out["acceptable_second"].append(t.format(property=prop, word1=unacc, word2=acc))
    return out


def order_scores(scores: list[Score]) -> list[Score]:
    """Order-averaged accuracy and order bias from the two orders' accuracies."""
    by_key = {(s.lang, s.negative_type, s.variant): s for s in scores}
    out = []
    for (lang, neg, variant), first in by_key.items():
        second = by_key.get((lang, neg, "acceptable_second"))
        if variant != "acceptable_first" or second is None:
            continue
        n = min(first.n, second.n)
        out.append(Score(method="meta", variant="order_averaged", lang=lang, negative_type=neg, metric="accuracy",
                         value=(first.value + second.value) / 2, n=n))
        out.append(Score(method="meta", variant="order_bias", lang=lang, negative_type=neg, metric="bias",
                         value=first.value - second.value, n=n))
    return out


class Meta:
    name = "meta"
    headline = ("order_averaged", "accuracy")
    needs = (TextGenerator,)  # and scores where the backend offers them

    def run(self, ctx: Context, pairs: pd.DataFrame) -> MethodOutput:
        variant = ctx.options.prompt_variant
        missing = sorted(lang for lang in pairs["lang"].unique()
                         if lang not in ctx.languages or not ctx.languages[lang].prompt(variant))
        if missing:
            raise InputError(f"meta: the release declares no prompt template for {', '.join(missing)} (a language's "
                             "meta_prompt: data/languages.yaml or `builder language add --meta-prompt`, then publish)")
        by_order = prompts(pairs, {c: lang.prompt(variant) for c, lang in ctx.languages.items() if lang.prompt(variant)})
        if ctx.scorer is None:  # behind an endpoint without scores: generative mode
            out = run_generative(ctx, pairs, self.name, by_order)
            out.scores += order_scores([s for s in out.scores if s.metric == "accuracy"])
            return out
        requests = [(p, w) for order in ORDERS for p, a, u in zip(by_order[order], pairs["acceptable_concept"],
                                                                   pairs["unacceptable_concept"]) for w in (a, u)]
        scored = ctx.scorer.score(requests, lambda d, t: ctx.progress("meta: prompts", d, t))

        def total(prompt: str, word: str) -> float:
            return float(scored[(prompt, word)].logprobs.sum())

        items = item_frame(pairs, self.name, {
            order: ([total(p, a) for p, a in zip(by_order[order], pairs["acceptable_concept"])],
                    [total(p, u) for p, u in zip(by_order[order], pairs["unacceptable_concept"])])
            for order in ORDERS})
        scores = accuracy_scores(items)
        return MethodOutput(items, scores + order_scores(scores))

    def report(self, page: Page) -> list[str]:
        sf = page.scores
        bias = sf[(sf["method"] == self.name) & (sf["variant"] == "order_bias") & (sf["negative_type"] == ALL)]
        if bias.empty:
            return []
        return ["## Meta order bias (accuracy with the acceptable word first minus second)", "",
                table(bias[["lang", "value"]].rename(columns={"value": "order_bias"})), ""]


register(Meta())
