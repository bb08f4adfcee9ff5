"""Method `consistency`: do the model's direct and meta decisions survive a change of language?

A decision is the concept (or sentence) a method prefers for an item: "acceptable", "unacceptable",
or None where it cannot be read (a tie, an undefined score, a generative reply naming neither). Pair
ids are shared by all languages, so every language pair is compared on its common items
(`evaluate.decision_agreement`), and every language against English with the split by whether English was
right. Decisions come from the direct and meta results of the same run (they are run first when
not asked for; direct needs scores, so behind an endpoint only meta's are compared).

Two same-language figures put those numbers in proportion, each named for what it measures:
- run-to-run agreement, the paper's baseline (its second English run): the acceptable-first meta
  prompts answered twice, sampled (temperature `sample_temperature`, seeds 1 and 2), read as
  generative meta reads replies, per language. Every model that samples gets it: behind an endpoint,
  and locally, where `evaluate.backends.TransformersGenerator` samples with a seed. (A local model's
  scored decisions are deterministic: run again, they agree with themselves entirely.) With
  `EvalOptions.sample_consistency` only a stated sample of the pairs is asked twice.
- order agreement, for scored meta only: the decisions with the options in one order against those
  with them swapped, i.e. how much of a language's decisions does not depend on the option order
  alone. It is no run-to-run baseline: a model that always picks the first option scores 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from evaluate.data import sample_rows
from evaluate.decision_agreement import Decisions, agreement, consistency, label_distribution
from evaluate.meta import ask
from evaluate.meta import prompts as meta_prompts
from evaluate.methods import ALL, ITEM_COLUMNS, Context, MethodOutput, Score, register
from evaluate.page import Page, heat_panel, plt, table
from evaluate.protocols import Capability, TextGenerator, TextScorer

SOURCE = "en"
GOLD = "acceptable"
DECISION_VARIANTS = {"direct": ("full",), "meta": ("acceptable_first", "acceptable_second")}
SEEDS = (1, 2)  # the two sampled runs of the run-to-run baseline
ORDER = "scored meta: acceptable first against acceptable second"


def decisions(items: pd.DataFrame, method: str, variant: str) -> dict[str, dict[str, str | None]]:
    """lang -> pair id -> decision, from a method's item rows of one variant."""
    rows = items[(items["method"] == method) & (items["variant"] == variant)]
    a, u = rows["score_acceptable"].to_numpy(float), rows["score_unacceptable"].to_numpy(float)
    labels = np.where(a > u, "acceptable", np.where(u > a, "unacceptable", None))  # NaN compares False: None
    out: dict[str, dict[str, str | None]] = {}
    for lang, pid, label in zip(rows["lang"], rows["pair_id"], labels):
        out.setdefault(lang, {})[pid] = label
    return out


def same_language(runs: dict[str, tuple[Decisions, Decisions]], variant: str, what: str) -> tuple[list[Score], pd.DataFrame]:
    """Per language, the agreement of two decision tables that differ only by `what`."""
    rows, scores = [], []
    for lang, (first, second) in sorted(runs.items()):
        value, n = agreement(first, second)
        rows.append({"lang": lang, "value": value, "n": n, "compared": what})
        if value is not None:
            scores.append(Score(method="consistency", variant=variant, lang=lang, negative_type=ALL, metric="agreement",
                                value=value, n=n, extra={"compared": what}))
    return scores, pd.DataFrame(rows, columns=["lang", "value", "n", "compared"])


def assemble(tables: dict[str, dict[str, Decisions]], run_to_run: dict[str, tuple[Decisions, Decisions]],
             run_to_run_what: str, order: dict[str, tuple[Decisions, Decisions]] | None = None,
             source: str = SOURCE) -> MethodOutput:
    """Scores and tables from decision tables (key "method/variant" -> lang -> decisions), the two sampled runs
    per language and, for scored meta, its two option orders per language."""
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
    run_scores, run_table = same_language(run_to_run, "run_to_run", run_to_run_what)
    order_scores, order_table = same_language(order or {}, "order_agreement", ORDER)
    tables_out = {"consistency_matrix": pd.DataFrame(matrix, columns=["variant", "lang_a", "lang_b", "value", "n"]),
                  "consistency_breakdown": pd.DataFrame(split),
                  "consistency_labels": pd.DataFrame(labels, columns=["variant", "lang", "label", "share"]),
                  "consistency_run_to_run": run_table, "consistency_order_agreement": order_table}
    return MethodOutput(pd.DataFrame(columns=list(ITEM_COLUMNS)), scores + run_scores + order_scores, tables_out)


def sampled_runs(ctx: Context, pairs: pd.DataFrame) -> tuple[dict[str, tuple[Decisions, Decisions]], str]:
    """The acceptable-first meta prompts (of the run's prompt variant) answered twice, sampled with seeds 1 and 2; per
    language, and what was compared. With `sample_consistency` only a sample of the pairs is asked twice (the baseline
    is a share, so a sample estimates it; the decisions compared across languages stay every pair's)."""
    opts = ctx.options
    pairs = sample_rows(pairs, opts.sample_consistency, opts.seed, "pair_id", ["lang", "negative_type"])
    variant = opts.prompt_variant
    templates = {c: lang.prompt(variant) for c, lang in ctx.languages.items() if lang.prompt(variant)}
    first = meta_prompts(pairs, templates)["acceptable_first"]
    t = ctx.options.sample_temperature
    runs = [ask(ctx, pairs, first, stage=f"consistency: sampled run (seed {seed})", temperature=t, seed=seed)[1]
            for seed in SEEDS]
    out: dict[str, tuple[dict, dict]] = {}
    for lang, pid, one, two in zip(pairs["lang"], pairs["pair_id"], *runs):
        a, b = out.setdefault(lang, ({}, {}))
        a[pid], b[pid] = one, two
    sample = (f"; a sample of at most {opts.sample_consistency} pairs per language and negative type, drawn with seed "
              f"{opts.seed} (without `--sample-consistency`, every pair)" if opts.sample_consistency is not None else "")
    return out, (f"generative meta (acceptable first), sampled at temperature {t:g}: seed {SEEDS[0]} against seed "
                 f"{SEEDS[1]}{sample}")


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
        heat_panel(fig, ax, grid, "agreement of decisions", 0.5, aspect="equal")
        ax.set_xticks(range(len(langs)), langs)
        ax.set_yticks(range(len(langs)), langs)
        ax.set_title(variant, fontsize=9)
    page.save(fig, matrix, "consistency_heatmaps",
              "Each panel, one source of decisions: the share of common items (pair ids) on which the row's and the column's "
              "language decide alike, coloured from 0 (dark) to 1 (yellow); 0.5, marked on the colour bar, is what two "
              "languages answering at random agree on. High agreement is knowledge only beside accuracy: a model that always "
              "gives the same answer agrees with itself everywhere.")


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
    runs = tables.get("consistency_run_to_run")
    if runs is not None and not runs.empty:
        lines += ["### Run-to-run agreement (the baseline: the same prompts answered twice)", "",
                  f"{runs['compared'].iloc[0]}.", "", table(runs[["lang", "value", "n"]]), ""]
    order = tables.get("consistency_order_agreement")
    if order is not None and not order.empty:
        lines += ["### Order agreement (not a baseline: the options swapped)", "",
                  "Scored meta's decisions with the acceptable concept listed first against those with it listed second: "
                  "the share of decisions that do not depend on the option order alone.", "",
                  table(order[["lang", "value", "n"]]), ""]
    return lines


class Consistency:
    name = "consistency"
    headline = ("meta/acceptable_first", "consistency_en")
    needs = (TextGenerator,)  # the sampled runs

    def requires(self, offers: tuple[Capability, ...]) -> tuple[str, ...]:
        return ("direct", "meta") if TextScorer in offers else ("meta",)

    def run(self, ctx: Context, pairs: pd.DataFrame) -> MethodOutput:
        tables = {f"{m}/{v}": decisions(ctx.outputs[m].items, m, v)
                  for m in self.requires(ctx.offers) for v in DECISION_VARIANTS[m]}
        order = None
        if ctx.scorer is not None:
            first, second = tables["meta/acceptable_first"], tables["meta/acceptable_second"]
            order = {lang: (first[lang], second.get(lang, {})) for lang in first}
        runs, what = sampled_runs(ctx, pairs)
        return assemble(tables, runs, what, order)

    def report(self, page: Page) -> list[str]:
        matrix = page.results.tables["consistency_matrix"]
        consistency_heatmaps(matrix, page)
        return [*section(page.results.tables), *page.figure("consistency_heatmaps")] if not matrix.empty else []


register(Consistency())
