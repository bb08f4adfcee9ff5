"""Method `consistency`: do the model's direct and meta decisions survive a change of language?

A decision is the concept (or sentence) a method prefers for an item: "acceptable", "unacceptable",
or None where it cannot be read (a tie, an undefined score, a generative reply naming neither). Pair
ids are shared by all languages, so every language pair is compared on its common items
(`evaluate.decision_agreement`), and every language against English with the split by whether English was
right. Decisions come from the direct and meta results of the same run (they are run first when
not asked for; direct needs scores, so behind an endpoint only meta's are compared).

The same-language baseline is the agreement of two runs that should not differ:
- local model (deterministic): meta with the options in one order against meta with them swapped,
  i.e. how much of a language's decisions depends on nothing but the option order;
- endpoint: the acceptable-first meta prompts sampled twice (temperature `sample_temperature`, seeds 1
  and 2), the sampling noise the paper compares cross-lingual consistency with.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from evaluate.decision_agreement import Decisions, agreement, consistency, label_distribution
from evaluate.meta import prompts as meta_prompts
from evaluate.methods import ALL, ITEM_COLUMNS, Context, MethodOutput, Score, register
from evaluate.reporting import Page, plt, table

SOURCE = "en"
GOLD = "acceptable"
DECISION_VARIANTS = {"direct": ("full",), "meta": ("acceptable_first", "acceptable_second")}
SWAPPED = "meta: options in one order against the other (acceptable first vs second)"
SAMPLED = "meta (acceptable first): two sampled runs, seeds 1 and 2"


def decisions(items: pd.DataFrame, method: str, variant: str) -> dict[str, dict[str, str | None]]:
    """lang -> pair id -> decision, from a method's item rows of one variant."""
    rows = items[(items["method"] == method) & (items["variant"] == variant)]
    a, u = rows["score_acceptable"].to_numpy(float), rows["score_unacceptable"].to_numpy(float)
    labels = np.where(a > u, "acceptable", np.where(u > a, "unacceptable", None))  # NaN compares False: None
    out: dict[str, dict[str, str | None]] = {}
    for lang, pid, label in zip(rows["lang"], rows["pair_id"], labels):
        out.setdefault(lang, {})[pid] = label
    return out


def assemble(tables: dict[str, dict[str, Decisions]], baseline: dict[str, tuple[Decisions, Decisions]],
             baseline_kind: str, source: str = SOURCE) -> MethodOutput:
    """Scores and tables from decision tables (key "method/variant" -> lang -> decisions) and baseline run pairs."""
    scores: list[Score] = []
    matrix, split, labels = [], [], []
    for key, by_lang in tables.items():
        gold = {pid: GOLD for d in by_lang.values() for pid in d}
        rep = consistency(by_lang, gold, source)
        for a in rep.langs:
            for b in rep.langs:
                matrix.append({"variant": key, "lang_a": a, "lang_b": b, "value": rep.matrix[a][b], "n": rep.items[a][b]})
                if a < b and rep.matrix[a][b] is not None:
                    scores.append(Score(method="consistency", variant=key, lang=f"{a}-{b}", negative_type=ALL,
                                        metric="consistency", value=rep.matrix[a][b], n=rep.items[a][b]))
            labels += [{"variant": key, "lang": a, "label": k, "share": v} for k, v in label_distribution(by_lang[a]).items()]
        for lang, br in rep.against_source.items():
            split.append({"variant": key, "lang": lang, **br.model_dump()})
            for metric, value, n in (("consistency_en", br.overall, br.n), ("consistency_en_correct", br.on_correct, br.n_correct),
                                     ("consistency_en_incorrect", br.on_incorrect, br.n_incorrect)):
                if value is not None:
                    scores.append(Score(method="consistency", variant=key, lang=lang, negative_type=ALL, metric=metric,
                                        value=value, n=n))
    base = []
    for lang, (first, second) in sorted(baseline.items()):
        value, n = agreement(first, second)
        base.append({"lang": lang, "second_run": baseline_kind, "value": value, "n": n})
        if value is not None:
            scores.append(Score(method="consistency", variant="baseline", lang=lang, negative_type=ALL, metric="consistency",
                                value=value, n=n, extra={"second_run": baseline_kind}))
    tables_out = {"consistency_matrix": pd.DataFrame(matrix, columns=["variant", "lang_a", "lang_b", "value", "n"]),
                  "consistency_breakdown": pd.DataFrame(split),
                  "consistency_labels": pd.DataFrame(labels, columns=["variant", "lang", "label", "share"]),
                  "consistency_baseline": pd.DataFrame(base, columns=["lang", "second_run", "value", "n"])}
    return MethodOutput(pd.DataFrame(columns=list(ITEM_COLUMNS)), scores, tables_out)


def sampled_baseline(ctx: Context, pairs: pd.DataFrame) -> dict[str, tuple[Decisions, Decisions]]:
    from evaluate.meta import ask

    templates = {c: lang.meta_prompt for c, lang in ctx.languages.items() if lang.meta_prompt}
    first = meta_prompts(pairs, templates)["acceptable_first"]
    runs = [ask(ctx, pairs, first, stage=f"consistency baseline (run {seed})", temperature=ctx.options.sample_temperature,
                seed=seed)[1] for seed in (1, 2)]
    out: dict[str, tuple[dict, dict]] = {}
    for lang, pid, one, two in zip(pairs["lang"], pairs["pair_id"], *runs):
        a, b = out.setdefault(lang, ({}, {}))
        a[pid], b[pid] = one, two
    return out


def consistency_heatmaps(matrix: pd.DataFrame, page: Page) -> None:
    """Language x language agreement of decisions, one panel per decision source."""
    if matrix.empty:
        page.omit("consistency_heatmaps", "no language has decisions")
        return
    variants = list(dict.fromkeys(matrix["variant"]))
    langs = page.lang_order(set(matrix["lang_a"]))
    fig, axes = plt.subplots(1, len(variants), figsize=(1.5 + 0.6 * len(langs) * len(variants), 1.2 + 0.55 * len(langs)), squeeze=False)
    for ax, variant in zip(axes[0], variants):
        grid = (matrix[matrix["variant"] == variant].pivot(index="lang_a", columns="lang_b", values="value")
                .reindex(index=langs, columns=langs).to_numpy(dtype=float))
        ax.imshow(grid, vmin=0, vmax=1, cmap="viridis")
        ax.set_xticks(range(len(langs)), langs)
        ax.set_yticks(range(len(langs)), langs)
        ax.set_title(variant, fontsize=9)
        for (i, j), v in np.ndenumerate(grid):
            if not np.isnan(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w" if v < 0.6 else "k")
    page.save(fig, matrix, "consistency_heatmaps")


def section(tables: dict[str, pd.DataFrame]) -> list[str]:
    lines = ["## Cross-lingual consistency", "",
             "Share of common items (pair ids) on which two languages' decisions agree; an unreadable answer is a label of "
             "its own. Against English, split by whether English was right.", ""]
    matrix = tables["consistency_matrix"]
    for variant in dict.fromkeys(matrix["variant"]):
        grid = matrix[matrix["variant"] == variant].pivot(index="lang_a", columns="lang_b", values="value")
        lines += [f"### {variant}", "", table(grid.reset_index().rename(columns={"lang_a": "lang"})), ""]
    split = tables.get("consistency_breakdown")
    if split is not None and not split.empty:
        lines += ["### Against English", "", table(split[["variant", "lang", "n", "overall", "n_correct", "on_correct",
                                                          "n_incorrect", "on_incorrect", "invalid_source", "invalid_target"]]), ""]
    base = tables.get("consistency_baseline")
    if base is not None and not base.empty:
        lines += ["### Same-language baseline (two runs)", "", table(base), ""]
    return lines


class Consistency:
    name = "consistency"
    headline = ("meta/acceptable_first", "consistency_en")

    def requires(self, ctx: Context) -> tuple[str, ...]:
        return ("direct", "meta") if ctx.scorer is not None else ("meta",)

    def run(self, ctx: Context, pairs: pd.DataFrame) -> MethodOutput:
        tables = {f"{m}/{v}": decisions(ctx.outputs[m].items, m, v)
                  for m in self.requires(ctx) for v in DECISION_VARIANTS[m]}
        if ctx.scorer is not None:
            first, second = tables["meta/acceptable_first"], tables["meta/acceptable_second"]
            baseline, kind = {lang: (first[lang], second.get(lang, {})) for lang in first}, SWAPPED
        else:
            baseline, kind = sampled_baseline(ctx, pairs), SAMPLED
        return assemble(tables, baseline, kind)

    def report(self, page: Page) -> list[str]:
        matrix = page.results.tables["consistency_matrix"]
        consistency_heatmaps(matrix, page)
        return section(page.results.tables) if not matrix.empty else []


register(Consistency())
