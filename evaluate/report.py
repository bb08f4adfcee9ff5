"""The evaluation report: Markdown and HTML from a results folder, with the figures every run shares and
a section from each method that ran.

The common part is the header (model, scoring, dataset and its languages), the headline scores,
each method's headline by negative type, and the cross-method figures:
  fig2_heatmaps      language x negative type, one panel per method (headline metric)
  fig3_correlations  method against method over language x negative type cells, Pearson r
  fig4_typology      averages by morphological typology, English left out
Each method then adds its own section, tables and figures (`Method.report`, in registry order), e.g.
neuro's layer curves and peak layers (Figures 5 and 6). Figures are saved as in `evaluate.page`, each
shown beside its table with a caption that says how to read it (or why it was not drawn); every
cell of a score table carries its 95% interval and n; "What this model knows" flags answers that
are constant, at chance or no better than the control (`evaluate.findings`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from html import escape
from pathlib import Path

import numpy as np
import pandas as pd
from markdown_it import MarkdownIt

from builder.files import write_text
from builder.records import NEGATIVE_TYPES
from evaluate.comparison import comparison_section
from evaluate.findings import findings
from evaluate.methods import ALL
from evaluate.methods import registry as method_registry
from evaluate.page import (
    EXCLUDED_FROM_TYPOLOGY,
    Page,
    chance,
        estimate,
    heat_panel,
    joined,
    model_label,
    plt,
    release_label,
    table,
    text,
)
from evaluate.results import Results, read_results, results_lock


@dataclass
class Report:
    markdown: Path
    html: Path
    plots: dict[str, int]  # figure name -> number of values drawn
    omitted: dict[str, str]  # figure name -> why it has no data


def headline(results: Results) -> pd.DataFrame:
    """lang, negative_type, method, value, n: each method's headline metric per cell."""
    known = method_registry()
    sf = results.score_frame()
    rows = []
    for method in results.config.methods:
        variant, metric = known[method].headline
        sel = sf[(sf["method"] == method) & (sf["variant"] == variant) & (sf["metric"] == metric)]
        rows += [{"lang": r.lang, "negative_type": r.negative_type, "method": method, "value": r.value, "n": r.n}
                 for r in sel.itertuples()]
    return pd.DataFrame(rows, columns=["lang", "negative_type", "method", "value", "n"])


def fig2_heatmaps(head: pd.DataFrame, page: Page) -> None:
    cells = head[head["negative_type"] != ALL]
    if cells.empty:
        page.omit("fig2_heatmaps", "no per-negative-type scores")
        return
    methods = list(dict.fromkeys(cells["method"]))
    langs = page.lang_order(cells["lang"].unique())
    known = method_registry()
    fig, axes = plt.subplots(len(methods), 1, figsize=(2.2 + 0.8 * len(langs), 2.4 * len(methods)), squeeze=False)
    for ax, method in zip(axes[:, 0], methods):
        mine = cells[cells["method"] == method]
        grid, n = (mine.pivot(index="negative_type", columns="lang", values=v).reindex(index=list(NEGATIVE_TYPES), columns=langs)
                   .to_numpy(dtype=float) for v in ("value", "n"))
        variant, metric = known[method].headline
        heat_panel(fig, ax, grid, f"{metric} ({variant})", chance(method, metric), n)
        ax.set_xticks(range(len(langs)), langs)
        ax.set_yticks(range(len(NEGATIVE_TYPES)), NEGATIVE_TYPES)
        ax.set_title(method)
    page.save(fig, cells, "fig2_heatmaps",
              "Each method's headline (one panel each) per language (columns, grouped by typology) and negative type (rows), "
              "coloured from 0 (dark) to 1 (yellow); the colour bar names the metric and marks chance in red. Each cell "
              "gives the value and n, the items it is measured on: a cell of few items can sit far from the truth (the "
              "tables give each cell's 95% interval).")


def fig3_correlations(head: pd.DataFrame, page: Page) -> None:
    cells = head[head["negative_type"] != ALL].pivot_table(index=["lang", "negative_type"], columns="method", values="value")
    combos = [(a, b) for a, b in itertools.combinations(cells.columns, 2) if cells[[a, b]].dropna().shape[0] >= 2]
    if not combos:
        page.omit("fig3_correlations", "needs two methods with at least two common cells")
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
    page.save(fig, pd.DataFrame(rows), "fig3_correlations",
              "One point per language x negative type cell: one method's headline (x) against another's (y), with Pearson's "
              "r above. Points along a rising line mean the two methods rank the cells alike; a cloud means they measure "
              "different things (or one is at chance).")


def fig4_typology(head: pd.DataFrame, page: Page) -> None:
    """Each bar's `langs` are the languages it averages."""
    cells = head[(head["negative_type"] != ALL) & (head["lang"] != EXCLUDED_FROM_TYPOLOGY)].copy()
    if cells.empty:
        page.omit("fig4_typology", "no language other than English")
        return
    cells["typology"] = cells["lang"].map(page.typology(cells["lang"].unique()))
    avg = cells.groupby(["method", "negative_type", "typology"], as_index=False).agg(value=("value", "mean"),
                                                                                      langs=("lang", joined))
    methods = list(dict.fromkeys(avg["method"]))
    known = method_registry()
    typs = page.typologies(avg["typology"])
    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods), 3.4), squeeze=False)
    for ax, method in zip(axes[0], methods):
        sub = avg[avg["method"] == method]
        width = 0.8 / len(typs)
        for k, typ in enumerate(typs):
            vals = [sub[(sub["negative_type"] == n) & (sub["typology"] == typ)]["value"].mean() for n in NEGATIVE_TYPES]
            ax.bar(np.arange(len(NEGATIVE_TYPES)) + k * width, vals, width, label=typ)
        ax.set_xticks(np.arange(len(NEGATIVE_TYPES)) + 0.4 - width / 2, NEGATIVE_TYPES, rotation=20)
        ax.set_ylim(0, 1)
        level = chance(method, known[method].headline[1])
        if level is not None:
            ax.axhline(level, color="red", linewidth=0.8, linestyle=":", label="chance")
        ax.set_title(method)
        ax.legend(fontsize=7)
    page.save(fig, avg, "fig4_typology",
              "Each method's headline per negative type, averaged over the languages of each morphological typology "
              "(English left out; the data lists the languages of each bar). Bars of one or two languages say little about "
              "a typology.")


def build_report(directory: Path, compare: Path | None = None) -> Report:
    """The report of a results folder; with `compare`, another results folder shown beside it (`evaluate.comparison`)."""
    directory = Path(directory)
    with results_lock(directory):  # one run at a time writes the report, from one run's whole results
        results = read_results(directory)
        page = Page(results, directory / "plots")
        page.plots.mkdir(exist_ok=True)
        head = headline(results)
        fig2_heatmaps(head, page)
        fig3_correlations(head, page)
        fig4_typology(head, page)
        sections = [line for name, method in method_registry().items() if name in results.config.methods
                    for line in getattr(method, "report", lambda _: [])(page)]
        if compare is not None:
            other = read_results(compare)
            sections += comparison_section(results.config, head, other.config, headline(other), str(compare))
        md = _markdown(page, head, sections)
        write_text(directory / "report.md", md)
        body = MarkdownIt("commonmark", {"html": False}).enable("table").render(md)  # raw HTML in the Markdown stays text
        title = escape(f"{model_label(results.config)} on {release_label(results.config)}")
        html = (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>"
                "body{font-family:sans-serif;max-width:72em;margin:2em auto}table{border-collapse:collapse}"
                "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}img{max-width:100%}</style></head><body>"
                f"{body}</body></html>")
        write_text(directory / "report.html", html)
        return Report(directory / "report.md", directory / "report.html", page.drawn, page.omitted)


def _languages(page: Page) -> list[str]:
    """The evaluated languages as the release declares them, and why any is not described."""
    c = page.results.config
    rows, missing = [], []
    for code, typology in page.typology(c.langs).items():
        lang = page.languages.get(code)
        if lang is None:
            missing.append(code)
        name, native, family, script = (lang.name, lang.native_name or "—", lang.family, lang.script) if lang else ("—",) * 4
        rows.append({"lang": code, "name": name, "native name": native, "typology": typology, "family": family, "script": script})
    lines = ["## Languages", "", "As declared in the release evaluated.", "", table(pd.DataFrame(rows)), ""]
    if c.dataset.languages_note:
        lines += [f"*{text(c.dataset.languages_note)}*", ""]
    elif missing:
        lines += [f"*These results record no declaration for {', '.join(missing)}: typology unknown.*", ""]
    return lines


def _markdown(page: Page, head: pd.DataFrame, sections: list[str]) -> str:
    c = page.results.config
    m = c.model
    toy = " (a toy model trained on the spot: its numbers say nothing about real models)" if m.toy else ""
    lines = [f"# {text(model_label(c))} on {text(release_label(c))}{toy}", "",
             f"Dataset **{text(c.dataset.source)}** version **{text(c.dataset.version)}** (manifest sha256 "
             f"`{c.dataset.manifest_sha256}`), languages {', '.join(c.langs)}; methods {', '.join(c.methods)}.", "",
             "| setting | value |", "|---|---|",
             f"| model | {text(m.name)} ({text(m.architecture)}, {m.n_params:,} parameters, {m.n_layers} layers) |",
             f"| revision / weights sha256 | {text(m.revision or '—')} / {m.weights_sha256 or '—'} |",
             *([f"| converted from | {text(m.gguf_file)} (GGUF, sha256 {m.gguf_sha256}) |"] if m.gguf_file else []),
             f"| device, dtype, batch size | {text(m.device)}, {m.dtype}, {m.batch_size} |",
             *([f"| BOS policy | {c.scoring.bos_policy} (token {text(repr(c.scoring.bos_token))}; first token scored: "
                f"{c.scoring.first_token_scored}){'; ' + text(c.scoring.bos_reason) if c.scoring.bos_reason else ''} |",
                f"| continuation | {text(c.scoring.continuation)} |", f"| precision | {c.scoring.precision} |"] if c.scoring else
               [f"| endpoint | {text(m.device)} (OpenAI-compatible; generated text only) |"]),
             *([f"| generation prompt | {text(c.prompt_format)} |"] if c.prompt_format else []),
             f"| probes | {c.options.probe_pooling}-token pooling, {c.options.probe_folds}-fold nested CV grouped by "
             f"{c.options.probe_groups}, C={c.options.probe_C}, control seed {c.options.control_seed} |",
             f"| meta prompts | {c.options.prompt_variant} ("
             + ("Figure 8 of the paper, as published" if c.options.prompt_variant == "paper"
                else "corrected where the paper's are wrong, as the release declares them") + ") |",
             f"| code version | {c.code_version} |", f"| run at | {c.created_at.isoformat()} |", "",
             *_knows(page.results),
             *_languages(page),
             "## Headline scores (all negative types)", "",
             "Each cell: the method's headline metric, its 95% interval (Wilson) and n, the items it is measured on. Chance is "
             "0.5 for every method but m2c (open answers).", ""]
    overall = head[head["negative_type"] == ALL].assign(cell=lambda h: [estimate(v, n) for v, n in zip(h["value"], h["n"])])
    lines += [table(overall.pivot(index="lang", columns="method", values="cell").fillna("—").reset_index()), "",
              *page.figure("fig3_correlations")]
    for method in c.methods:
        sub = head[(head["method"] == method) & (head["negative_type"] != ALL)]
        if not sub.empty:
            sub = sub.assign(cell=[estimate(v, n) for v, n in zip(sub["value"], sub["n"])])
            lines += [f"## {method} by negative type", "",
                      table(sub.pivot(index="lang", columns="negative_type", values="cell").fillna("—").reset_index()), ""]
    lines += [*page.figure("fig2_heatmaps"), *page.figure("fig4_typology")]
    lines += sections
    rest = page.unplaced()
    return "\n".join(lines + (["## Other figures", "", *rest] if rest else []))


def _knows(results: Results) -> list[str]:
    """The report's "What this model knows": each flag with the languages it holds for."""
    found = findings(results)
    lines = ["## What this model knows", "",
             "Read from its answers item by item: answers that are *constant* (one option or letter whatever is right), "
             "scores whose 95% interval holds chance, and probes *no better than the control* (a randomly initialised copy "
             "of the model).", ""]
    if not found:
        return lines + ["*Nothing flagged.*", ""]
    return lines + [f"- **{f.flag}**, {text(f.method)}: {text(', '.join(f.where))}: {text(f.detail)}" for f in found] + [""]
