"""Meta: ask the model, in the pair's language, which concept has the property (XCOMPS §4.2, Figure 8).

The language's prompt template names both concepts and ends with the answer prefix; each concept is
scored as the continuation. Both orders are asked, because models favour a position: accuracy with
the acceptable concept listed first and second, their mean (order-averaged accuracy, the headline)
and the order bias (first minus second: 1 for a model that always picks the first word, 0 for none).
"""

from __future__ import annotations

import pandas as pd

from evaluate.methods import Context, MethodOutput, Score, accuracy_scores, item_frame, register

ORDERS = ("acceptable_first", "acceptable_second")


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

    def run(self, ctx: Context, pairs: pd.DataFrame) -> MethodOutput:
        missing = sorted(lang for lang in pairs["lang"].unique()
                         if lang not in ctx.languages or not ctx.languages[lang].meta_prompt)
        if missing:
            raise ValueError(f"meta: no prompt template for {', '.join(missing)} (meta_prompt in data/languages.yaml)")
        by_order = prompts(pairs, {c: lang.meta_prompt for c, lang in ctx.languages.items() if lang.meta_prompt})
        if ctx.scorer is None:  # behind an endpoint: generative mode
            from evaluate.meta_generative import run_generative

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


register(Meta())
