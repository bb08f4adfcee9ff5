"""The evaluation report: Markdown and HTML with the XCOMPS figures, from a results folder.

Each figure is saved as DIR/plots/<name>.png next to <name>.csv holding exactly the numbers drawn,
so a reader (or a test) can check what a plot shows. A figure without data is left out and the
report says why.
  fig2_heatmaps      language x negative type, one panel per method (headline metric)
  fig3_correlations  method against method over language x negative type cells, Pearson r
  fig4_typology      averages by morphological typology, English left out
  fig5_layers        layer-wise probe F1 per language, model against control
  fig6_peak_layer    peak probe layer by typology, English left out
  consistency_heatmaps  language x language agreement of decisions, one panel per decision source
                        (only when the consistency method ran)
  selftranslate_consistency  per language, consistency with the English original under I, X and T,
                        beside the BLEU of the model's sentence translations (only when selftranslate ran)
Sections for cross-lingual consistency, self-translation and M2C question answering follow the
method tables when those methods ran.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from markdown_it import MarkdownIt  # noqa: E402

from builder.languages import registry as language_registry  # noqa: E402
from builder.records import NEGATIVE_TYPES  # noqa: E402
from evaluate.methods import ALL, registry as method_registry  # noqa: E402
from evaluate.results import Results, read_results  # noqa: E402

TYPOLOGIES = ("analytic", "inflectional", "agglutinative")
EXCLUDED_FROM_TYPOLOGY = "en"


@dataclass
class Report:
    markdown: Path
    html: Path
    plots: dict[str, int]  # figure name -> number of values drawn
    omitted: dict[str, str]  # figure name -> why it has no data


def headline(results: Results) -> pd.DataFrame:
    """lang, negative_type, method, value: each method's headline metric per cell."""
    known = method_registry()
    sf = results.score_frame()
    rows = []
    for method in results.config.methods:
        variant, metric = known[method].headline
        sel = sf[(sf["method"] == method) & (sf["variant"] == variant) & (sf["metric"] == metric)]
        rows += [{"lang": r.lang, "negative_type": r.negative_type, "method": method, "value": r.value} for r in sel.itertuples()]
    return pd.DataFrame(rows, columns=["lang", "negative_type", "method", "value"])


def _typology(langs) -> dict[str, str]:
    reg = language_registry()
    return {lang: reg[lang].typology if lang in reg else "unknown" for lang in langs}


def _lang_order(langs) -> list[str]:
    typ = _typology(langs)
    rank = {t: i for i, t in enumerate(TYPOLOGIES)}
    return sorted(langs, key=lambda lang: (rank.get(typ[lang], len(rank)), lang))


def _save(fig, data: pd.DataFrame, plots: Path, name: str, drawn: dict[str, int]) -> None:
    fig.tight_layout()
    fig.savefig(plots / f"{name}.png", dpi=110)
    plt.close(fig)
    data.to_csv(plots / f"{name}.csv", index=False)
    drawn[name] = int(data["value"].notna().sum()) if "value" in data else len(data)


def fig2_heatmaps(head: pd.DataFrame, plots: Path, drawn, omitted) -> None:
    cells = head[head["negative_type"] != ALL]
    if cells.empty:
        omitted["fig2_heatmaps"] = "no per-negative-type scores"
        return
    methods = list(dict.fromkeys(cells["method"]))
    langs = _lang_order(cells["lang"].unique())
    fig, axes = plt.subplots(len(methods), 1, figsize=(1.2 + 0.7 * len(langs), 2.2 * len(methods)), squeeze=False)
    for ax, method in zip(axes[:, 0], methods):
        grid = (cells[cells["method"] == method].pivot(index="negative_type", columns="lang", values="value")
                .reindex(index=list(NEGATIVE_TYPES), columns=langs))
        ax.imshow(grid.to_numpy(dtype=float), vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(langs)), langs)
        ax.set_yticks(range(len(NEGATIVE_TYPES)), NEGATIVE_TYPES)
        ax.set_title(method)
        for (i, j), v in np.ndenumerate(grid.to_numpy(dtype=float)):
            if not np.isnan(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w" if v < 0.6 else "k")
    _save(fig, cells, plots, "fig2_heatmaps", drawn)


def fig3_correlations(head: pd.DataFrame, plots: Path, drawn, omitted) -> None:
    cells = head[head["negative_type"] != ALL].pivot_table(index=["lang", "negative_type"], columns="method", values="value")
    combos = [(a, b) for a, b in itertools.combinations(cells.columns, 2) if cells[[a, b]].dropna().shape[0] >= 2]
    if not combos:
        omitted["fig3_correlations"] = "needs two methods with at least two common cells"
        return
    fig, axes = plt.subplots(1, len(combos), figsize=(3.6 * len(combos), 3.4), squeeze=False)
    rows = []
    for ax, (a, b) in zip(axes[0], combos):
        both = cells[[a, b]].dropna()
        r = float(np.corrcoef(both[a], both[b])[0, 1]) if both[a].std() > 0 and both[b].std() > 0 else float("nan")
        ax.scatter(both[a], both[b], s=14)
        ax.set_xlabel(a)
        ax.set_ylabel(b)
        ax.set_title(f"r = {r:.2f}")
        rows += [{"x_method": a, "y_method": b, "lang": k[0], "negative_type": k[1], "x": x, "y": y, "value": r}
                 for k, x, y in zip(both.index, both[a], both[b])]
    _save(fig, pd.DataFrame(rows), plots, "fig3_correlations", drawn)


def fig4_typology(head: pd.DataFrame, plots: Path, drawn, omitted) -> None:
    cells = head[(head["negative_type"] != ALL) & (head["lang"] != EXCLUDED_FROM_TYPOLOGY)].copy()
    if cells.empty:
        omitted["fig4_typology"] = "no language other than English"
        return
    cells["typology"] = cells["lang"].map(_typology(cells["lang"].unique()))
    avg = cells.groupby(["method", "negative_type", "typology"], as_index=False)["value"].mean()
    methods = list(dict.fromkeys(avg["method"]))
    typs = [t for t in (*TYPOLOGIES, "unknown") if t in set(avg["typology"])]
    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods), 3.4), squeeze=False)
    for ax, method in zip(axes[0], methods):
        sub = avg[avg["method"] == method]
        width = 0.8 / len(typs)
        for k, typ in enumerate(typs):
            vals = [sub[(sub["negative_type"] == n) & (sub["typology"] == typ)]["value"].mean() for n in NEGATIVE_TYPES]
            ax.bar(np.arange(len(NEGATIVE_TYPES)) + k * width, vals, width, label=typ)
        ax.set_xticks(np.arange(len(NEGATIVE_TYPES)) + 0.4 - width / 2, NEGATIVE_TYPES, rotation=20)
        ax.set_ylim(0, 1)
        ax.set_title(method)
        ax.legend(fontsize=7)
    _save(fig, avg, plots, "fig4_typology", drawn)


def fig5_layers(probes: pd.DataFrame | None, plots: Path, drawn, omitted) -> None:
    if probes is None or probes.empty:
        omitted["fig5_layers"] = "no neuro probes"
        return
    curves = probes.groupby(["lang", "model", "layer"], as_index=False)["f1_mean"].mean().rename(columns={"f1_mean": "value"})
    langs = _lang_order(curves["lang"].unique())
    cols = min(len(langs), 4)
    nrows = -(-len(langs) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.6 * nrows), squeeze=False)
    for ax, lang in zip(axes.ravel(), langs):
        for model, style in (("probe", "-o"), ("control", "--x")):
            c = curves[(curves["lang"] == lang) & (curves["model"] == model)]
            ax.plot(c["layer"], c["value"], style, label=model, markersize=3)
        ax.set_title(lang)
        ax.set_ylim(0, 1)
        ax.set_xlabel("layer")
        ax.set_ylabel("F1")
    for ax in axes.ravel()[len(langs):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=7)
    _save(fig, curves, plots, "fig5_layers", drawn)


def fig6_peak_layer(results: Results, plots: Path, drawn, omitted) -> None:
    sf = results.score_frame()
    peaks = sf[(sf["method"] == "neuro") & (sf["variant"] == "probe") & (sf["negative_type"] != ALL)
               & (sf["lang"] != EXCLUDED_FROM_TYPOLOGY)].copy() if not sf.empty else sf
    if peaks.empty:
        omitted["fig6_peak_layer"] = "no neuro probes outside English"
        return
    peaks["peak_layer"] = [e["peak_layer"] for e in peaks["extra"]]
    peaks["typology"] = peaks["lang"].map(_typology(peaks["lang"].unique()))
    avg = peaks.groupby("typology", as_index=False)["peak_layer"].mean().rename(columns={"peak_layer": "value"})
    avg = avg.set_index("typology").reindex([t for t in (*TYPOLOGIES, "unknown") if t in set(avg["typology"])]).reset_index()
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(avg["typology"], avg["value"])
    ax.set_ylabel("mean peak layer")
    _save(fig, avg, plots, "fig6_peak_layer", drawn)


def consistency_heatmaps(matrix: pd.DataFrame, plots: Path, drawn, omitted) -> None:
    if matrix.empty:
        omitted["consistency_heatmaps"] = "no language has decisions"
        return
    variants = list(dict.fromkeys(matrix["variant"]))
    langs = _lang_order(set(matrix["lang_a"]))
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
    _save(fig, matrix, plots, "consistency_heatmaps", drawn)


def selftranslate_figure(summary: pd.DataFrame, plots: Path, drawn, omitted) -> None:
    if summary.empty:
        omitted["selftranslate_consistency"] = "no language was translated"
        return
    langs = _lang_order(summary["lang"].unique())
    conditions = list(dict.fromkeys(summary["condition"]))
    data = summary[["lang", "condition", "overall"]].rename(columns={"overall": "value"}).assign(metric="consistency")
    bleu = summary.dropna(subset=["bleu"]).drop_duplicates("lang")[["lang", "bleu"]] if "bleu" in summary else pd.DataFrame()
    fig, ax = plt.subplots(figsize=(2 + 0.9 * len(langs), 3.2))
    width = 0.8 / len(conditions)
    for k, cond in enumerate(conditions):
        values = data[data["condition"] == cond].set_index("lang")["value"].reindex(langs)
        ax.bar(np.arange(len(langs)) + (k - (len(conditions) - 1) / 2) * width, values, width, label=cond)
    ax.set_xticks(range(len(langs)), langs)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("consistency with English")
    ax.legend(title="condition", fontsize=7, ncol=len(conditions), loc="upper center", bbox_to_anchor=(0.5, -0.12))
    if not bleu.empty:
        twin = ax.twinx()
        twin.plot([langs.index(x) for x in bleu["lang"]], bleu["bleu"], "k*", label="BLEU")
        twin.set_ylim(0, 105)
        twin.set_ylabel("BLEU of its translations")
        data = pd.concat([data, bleu.rename(columns={"bleu": "value"}).assign(condition="X/T", metric="bleu")])
    ax.set_title("Self-translation")
    _save(fig, data, plots, "selftranslate_consistency", drawn)


def _consistency_section(tables: dict[str, pd.DataFrame]) -> list[str]:
    lines = ["## Cross-lingual consistency", "",
             "Share of common items (pair ids) on which two languages' decisions agree; an unreadable answer is a label of "
             "its own. Against English, split by whether English was right.", ""]
    matrix = tables["consistency_matrix"]
    for variant in dict.fromkeys(matrix["variant"]):
        grid = matrix[matrix["variant"] == variant].pivot(index="lang_a", columns="lang_b", values="value")
        lines += [f"### {variant}", "", _table(grid.reset_index().rename(columns={"lang_a": "lang"})), ""]
    split = tables.get("consistency_breakdown")
    if split is not None and not split.empty:
        lines += ["### Against English", "", _table(split[["variant", "lang", "n", "overall", "n_correct", "on_correct",
                                                          "n_incorrect", "on_incorrect", "invalid_source", "invalid_target"]]), ""]
    base = tables.get("consistency_baseline")
    if base is not None and not base.empty:
        lines += ["### Same-language baseline (two runs)", "", _table(base), ""]
    return lines


def _selftranslate_section(tables: dict[str, pd.DataFrame]) -> list[str]:
    summary = tables["selftranslate_summary"]
    cols = [c for c in ("lang", "condition", "n", "overall", "on_correct", "on_incorrect", "accuracy", "bleu", "chrf",
                        "tokenizer", "pearson_chrf", "spearman_chrf", "n_high_quality", "consistency_high_quality") if c in summary]
    lines = ["## Self-translation consistency (multisense I / X / T)", "",
             "The model's decisions on its own translation of the instruction (I), the input (X) or both (T) against its "
             "decisions on the English original; its sentence translations scored against the released ones "
             "(BLEU, chrF), quality correlated with consistency, and consistency on items with BLEU >= 50.", "",
             _table(summary[cols]), ""]
    labels = tables.get("selftranslate_labels")
    if labels is not None and not labels.empty:
        dist = labels.pivot_table(index=["lang", "condition"], columns="label", values="share", fill_value=0.0).reset_index()
        lines += ["### Predicted label distributions", "", _table(dist), ""]
    return lines


def _m2c_section(tables: dict[str, pd.DataFrame]) -> list[str]:
    t = tables["m2c_templates"]
    lines = ["## M2C question answering", "",
             "Accuracy per template and language (zero-shot and one-shot, greedy, at most 20 new tokens) and the share of "
             "tests answered with another form of the gold lexeme (morphological errors).", ""]
    grid = t.pivot_table(index=["lang", "capability", "template_id"], columns="variant",
                         values=["n", "accuracy", "morph_error_share"])
    grid.columns = [f"{metric} ({variant})" for metric, variant in grid.columns]
    lines += ["### Per template", "", _table(grid.reset_index()), ""]
    per_lang = t.assign(correct=t["accuracy"] * t["n"], morph=t["morph_error_share"] * t["n"]).groupby(
        ["lang", "variant"], as_index=False)[["n", "correct", "morph"]].sum()
    per_lang["accuracy"] = per_lang["correct"] / per_lang["n"]
    per_lang["morph_error_share"] = per_lang["morph"] / per_lang["n"]
    lines += ["### Per language", "", _table(per_lang[["lang", "variant", "n", "accuracy", "morph_error_share"]]), ""]
    return lines


def _table(df: pd.DataFrame) -> str:
    def fmt(v):
        return f"{v:.3f}" if isinstance(v, float) else str(v)
    head = "| " + " | ".join(map(str, df.columns)) + " |\n|" + "---|" * len(df.columns) + "\n"
    return head + "".join("| " + " | ".join(fmt(v) for v in row) + " |\n" for row in df.itertuples(index=False))


def build_report(directory: Path) -> Report:
    directory = Path(directory)
    results = read_results(directory)
    plots = directory / "plots"
    plots.mkdir(exist_ok=True)
    head = headline(results)
    drawn: dict[str, int] = {}
    omitted: dict[str, str] = {}
    fig2_heatmaps(head, plots, drawn, omitted)
    fig3_correlations(head, plots, drawn, omitted)
    fig4_typology(head, plots, drawn, omitted)
    fig5_layers(results.tables.get("probes"), plots, drawn, omitted)
    fig6_peak_layer(results, plots, drawn, omitted)
    if "consistency_matrix" in results.tables:
        consistency_heatmaps(results.tables["consistency_matrix"], plots, drawn, omitted)
    if "selftranslate_summary" in results.tables:
        selftranslate_figure(results.tables["selftranslate_summary"], plots, drawn, omitted)
    md = _markdown(results, head, drawn, omitted)
    (directory / "report.md").write_text(md, encoding="utf-8")
    body = MarkdownIt("commonmark").enable("table").render(md)
    html = ("<!doctype html><html><head><meta charset='utf-8'><title>Evaluation report</title><style>"
            "body{font-family:sans-serif;max-width:72em;margin:2em auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}img{max-width:100%}</style></head><body>"
            f"{body}</body></html>")
    (directory / "report.html").write_text(html, encoding="utf-8")
    return Report(directory / "report.md", directory / "report.html", drawn, omitted)


def _markdown(results: Results, head: pd.DataFrame, drawn, omitted) -> str:
    c = results.config
    m = c.model
    toy = " (a toy model trained on the spot: its numbers say nothing about real models)" if m.toy else ""
    lines = [f"# Evaluation of {m.name}{toy}", "",
             f"Dataset **{c.dataset.source}** version **{c.dataset.version}** (manifest sha256 `{c.dataset.manifest_sha256}`), "
             f"languages {', '.join(c.langs)}; methods {', '.join(c.methods)}.", "",
             "| setting | value |", "|---|---|",
             f"| model | {m.name} ({m.architecture}, {m.n_params:,} parameters, {m.n_layers} layers) |",
             f"| revision / weights sha256 | {m.revision or '—'} / {m.weights_sha256 or '—'} |",
             f"| device, dtype, batch size | {m.device}, {m.dtype}, {m.batch_size} |",
             *([f"| BOS policy | {c.scoring.bos_policy} (token {c.scoring.bos_token!r}; first token scored: {c.scoring.first_token_scored}) |",
                f"| continuation | {c.scoring.continuation} |"] if c.scoring else
               [f"| endpoint | {m.device} (OpenAI-compatible; generated text only) |"]),
             f"| probes | {c.options.probe_pooling}-token pooling, {c.options.probe_folds}-fold CV grouped by {c.options.probe_groups}, "
             f"C={c.options.probe_C}, control seed {c.options.control_seed} |",
             f"| code version | {c.code_version} |", f"| run at | {c.created_at.isoformat()} |", "",
             "## Headline scores (all negative types)", ""]
    overall = head[head["negative_type"] == ALL].pivot(index="lang", columns="method", values="value")
    lines += [_table(overall.reset_index()), ""]
    for method in c.methods:
        sub = head[(head["method"] == method) & (head["negative_type"] != ALL)]
        if not sub.empty:
            lines += [f"## {method} by negative type", "",
                      _table(sub.pivot(index="lang", columns="negative_type", values="value").reset_index()), ""]
    sf = results.score_frame()
    bias = sf[(sf["method"] == "meta") & (sf["variant"] == "order_bias") & (sf["negative_type"] == ALL)] if not sf.empty else sf
    if not bias.empty:
        lines += ["## Meta order bias (accuracy with the acceptable word first minus second)", "",
                  _table(bias[["lang", "value"]].rename(columns={"value": "order_bias"})), ""]
    neuro = sf[(sf["method"] == "neuro") & (sf["negative_type"] == ALL)] if not sf.empty else sf
    if not neuro.empty:
        t = neuro.pivot(index="lang", columns="variant", values="value").reset_index()
        lines += ["## Neuro: best layer's F1, model against its randomly initialised control", "", _table(t), ""]
    for table, section in (("consistency_matrix", _consistency_section), ("selftranslate_summary", _selftranslate_section),
                           ("m2c_templates", _m2c_section)):
        if table in results.tables and not results.tables[table].empty:
            lines += section(results.tables)
    lines += ["## Figures", ""]
    figures = ["fig2_heatmaps", "fig3_correlations", "fig4_typology", "fig5_layers", "fig6_peak_layer"]
    for name in figures + [n for n in ("consistency_heatmaps", "selftranslate_consistency") if n in drawn or n in omitted]:
        if name in drawn:
            lines += [f"![{name}](plots/{name}.png)", "", f"{drawn[name]} values ([data](plots/{name}.csv))", ""]
        else:
            lines += [f"*{name}: not drawn ({omitted[name]})*", ""]
    return "\n".join(lines)
