"""A model's report as a researcher reads it: titled by model and release, every figure beside its table with a caption,
colour bars naming the metric and marking chance, n and a 95% interval in every cell, and what the model knows."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from eval_fixtures import VERSION, first_mention_model

from evaluate.findings import findings
from evaluate.intervals import paired_change, wilson
from evaluate.methods import EvalOptions, resolve
from evaluate.models import random_control
from evaluate.page import Page, estimate
from evaluate.report import build_report, fig2_heatmaps, headline
from evaluate.results import read_results
from evaluate.run import run_evaluation
from evaluate.selftranslate import acceptable_first, letter_sentence

FIGURES = ("fig2_heatmaps", "fig3_correlations", "fig4_typology", "fig5_layers", "fig6_peak_layer")


def section(md: str, title: str) -> str:
    start = md.index(f"## {title}")
    following = md.find("\n## ", start + 3)
    return md[start: following if following >= 0 else len(md)]


def test_report_is_titled_by_model_and_release_and_shows_each_figure_beside_its_table(results_copy, toy_dir):
    build_report(results_copy)
    md = (results_copy / "report.md").read_text(encoding="utf-8")
    title = md.splitlines()[0]
    assert title.startswith(f"# {Path(toy_dir).name} on eval-release0 {VERSION} (a toy model") and str(toy_dir) not in title
    html = (results_copy / "report.html").read_text(encoding="utf-8")
    assert f"<title>{Path(toy_dir).name} on eval-release0 {VERSION}</title>" in html
    assert "## Figures" not in md and "## Other figures" not in md
    for name in FIGURES:  # the image, then the caption saying what it shows, with its data
        image = md.index(f"![{name}](plots/{name}.png)")
        caption = md[image:].split("\n\n")[1]
        assert caption.startswith(f"*Figure {name}.* ") and f"[data](plots/{name}.csv)" in caption and len(caption) > 120
    # Beside its table: the heatmaps after the by-negative-type tables they draw, the layer curves in neuro's section.
    assert md.index("## neuro by negative type") < md.index("plots/fig2_heatmaps.png") < md.index("## Neuro: probe F1")
    assert "plots/fig5_layers.png" in section(md, "Neuro: probe F1") and "plots/fig6_peak_layer.png" in section(md, "Neuro: probe F1")
    assert "chance" in md[md.index("![fig2_heatmaps]"):].split("\n\n")[1]


def test_every_score_cell_shows_its_n_and_95_percent_interval(results_copy):
    build_report(results_copy)
    md = (results_copy / "report.md").read_text(encoding="utf-8")
    scores = {(s.method, s.lang, s.negative_type): s for s in read_results(results_copy).scores
              if (s.method, s.variant) in {("direct", "full"), ("meta", "order_averaged"), ("neuro", "probe")}}
    for lang in ("ar", "de", "en", "ja", "ru", "vi", "zh"):
        cells = [scores[(m, lang, "all")] for m in ("direct", "meta", "neuro")]
        assert f"| {lang} | " + " | ".join(estimate(s.value, s.n) for s in cells) + " |" in section(md, "Headline scores")
    meta_de = scores[("meta", "de", "taxonomic")]
    low, high = wilson(meta_de.value, meta_de.n)
    assert meta_de.n == 26 and f"{meta_de.value:.3f} ({low:.2f}–{high:.2f}, n 26)" in section(md, "meta by negative type")


def test_heatmap_colour_bars_name_the_metric_and_mark_chance(results_copy):
    results = read_results(results_copy)
    page = Page(results, results_copy / "plots")
    drawn = {}
    page.save = lambda fig, data, name, caption: drawn.update(fig=fig, data=data, caption=caption)
    fig2_heatmaps(headline(results), page)
    bars = [ax for ax in drawn["fig"].axes if ax.get_label() == "<colorbar>"]
    assert [ax.get_ylabel() for ax in bars] == ["accuracy (full)", "accuracy (order_averaged)", "f1 (probe)"]
    for ax in bars:
        labels = {t.get_text(): t.get_color() for t in ax.get_yticklabels()}
        assert labels["0.5 chance"] == "red" and {"0", "1"} <= set(labels)
    panel = drawn["fig"].axes[0]
    texts = [t.get_text() for t in panel.texts]
    assert len(texts) == 28 and all(re.fullmatch(r"\d\.\d\d\nn 26", t) for t in texts)  # value and n in every cell
    assert set(drawn["data"]["n"]) == {26}


def test_what_the_toy_knows_is_above_chance_on_direct_and_neuro_and_where_meta_is_at_chance(results_copy):
    build_report(results_copy)
    knows = section((results_copy / "report.md").read_text(encoding="utf-8"), "What this model knows")
    assert "- **above chance**, direct: ar, de, en, ja, ru, vi, zh:" in knows
    assert "- **above chance**, neuro: ar, de, en, ja, ru, vi, zh:" in knows
    meta = {s.lang: wilson(s.value, s.n) for s in read_results(results_copy).scores
            if (s.method, s.variant, s.negative_type) == ("meta", "order_averaged", "all")}
    at_chance = [lang for lang, (lo, hi) in sorted(meta.items()) if lo <= 0.5 <= hi]
    assert at_chance and f"- **at chance**, meta: {', '.join(at_chance)}:" in knows
    assert "constant" not in knows.split("\n\n", 2)[2] and "no better than the control" not in knows.split("\n\n", 2)[2]


def test_a_model_that_always_names_the_first_option_is_called_constant_and_at_chance(toy, release_pairs, tmp_path):
    pairs, info = release_pairs
    sub = pairs[pairs["lang"].isin(["en", "de", "zh"])].groupby("lang").head(12).reset_index(drop=True)
    run_evaluation(sub, info, first_mention_model(toy.tokenizer), resolve("meta"), tmp_path / "out", EvalOptions())
    build_report(tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert md.splitlines()[0] == f"# first-mention (hand-built) on eval-release0 {VERSION}"
    knows = section(md, "What this model knows")
    assert "- **constant**, meta: de, en, zh: always names the option listed first (100% of answers or more)" in knows
    assert "- **at chance**, meta: de, en, zh: accuracy exactly 0.5 everywhere" in knows


def test_probes_of_a_random_network_are_called_no_better_than_their_control(toy, release_pairs, tmp_path):
    """A randomly initialised toy probed against another random initialisation: the report says which languages' probes
    decide their pairs no better than the control's, with the paired numbers."""
    pairs, info = release_pairs
    sub = pairs[pairs["lang"].isin(["de", "en"])].reset_index(drop=True)
    results = run_evaluation(sub, info, random_control(toy, seed=7), resolve("neuro"), tmp_path / "out", EvalOptions())
    build_report(tmp_path / "out")
    knows = section((tmp_path / "out" / "report.md").read_text(encoding="utf-8"), "What this model knows")
    items = results.items
    expected = []
    for lang in ("de", "en"):
        probe, control = (items[(items["lang"] == lang) & (items["variant"] == v)].set_index(["pair_id", "negative_type"])["correct"]
                          for v in ("probe", "control"))
        change = paired_change(control.astype(bool), probe[control.index].astype(bool))
        if not (change.significant and change.change > 0):
            expected.append(f"{lang} ({change.after:.2f} against {change.before:.2f}, n {change.n})")
    assert expected, "a random network's probes beat another random network's"
    assert f"- **no better than the control**, neuro: {', '.join(expected)}:" in knows


def test_a_self_translation_answering_a_to_everything_is_called_constant(results_copy):
    """Decisions read from letters as selftranslate reads them: "A" to every question of the original and of en→de T,
    A or B by the pair's option order under en→de X. Only the first two are constant."""
    results = read_results(results_copy)
    ids = sorted(results.items[results.items["lang"] == "en"]["pair_id"].unique())[:40]
    rows = [{"pair_id": pid, "source": "en", "target": target, "condition": cond, "reply": letter,
             "decision": letter_sentence(pid, letter)}
            for pid in ids for target, cond, letter in (("en", "original", "A"), ("de", "T", "A"),
                                                         ("de", "X", "A" if acceptable_first(pid) else "B"))]
    results.tables["selftranslate_items"] = pd.DataFrame(rows)
    flagged = [f for f in findings(results) if f.method == "selftranslate"]
    assert [(f.flag, f.where) for f in flagged] == [("constant", ("en→de T", "en"))]
    assert flagged[0].detail.startswith("answers “A” to 100% of the questions")
