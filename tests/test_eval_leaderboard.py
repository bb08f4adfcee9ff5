"""`builder eval leaderboard`: one page over a suite's results folders, read back as headless Chromium renders it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from chromium import Elements, grid, rendered
from eval_fixtures import VERSION
from typer.testing import CliRunner

from builder.cli import app
from builder.errors import InputError
from evaluate.intervals import paired_change, wilson
from evaluate.leaderboard import suite_entries
from evaluate.results import read_results

runner = CliRunner()
HOSTILE = "<img src=x onerror=alert(1)>"  # an entry name as a suite file may give it: shown, never markup


@pytest.fixture(scope="module")
def eos_run(release, toy_dir, tmp_path_factory) -> Path:
    """The toy under another BOS policy, direct and meta only: a second configuration of one model, as a suite has."""
    out = tmp_path_factory.mktemp("eos") / "toy-eos"
    res = runner.invoke(app, ["eval", "run", "--release", str(release), "--version", VERSION, "--model", str(toy_dir),
                              "--methods", "direct,meta", "--bos", "eos", "--batch-size", "16", "--out", str(out)],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return out


def headline_from_items(items: pd.DataFrame, method: str, variant: str, lang: str) -> tuple[float, int]:
    sel = items[(items["method"] == method) & (items["variant"] == variant) & (items["lang"] == lang)]
    sel = sel[sel["score_acceptable"].notna() & sel["score_unacceptable"].notna()]
    return float(sel["correct"].mean()), len(sel)


def test_leaderboard_shows_every_model_s_heatmaps_gates_and_changes_as_chromium_renders_them(evaluated, eos_run, tmp_path):
    toy, res = evaluated
    assert res.exit_code == 0, res.output
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "suite.json").write_text(json.dumps({"entries": [{"name": "toy", "folder": str(toy), "ok": True},
                                                              {"name": HOSTILE, "folder": str(eos_run), "ok": True}]}))
    # The previous release's run of "toy": a tenth of German's pairs absent, and 12 shared ones answered the other way.
    prev = Path(shutil.copytree(toy, tmp_path / "previous" / "toy", ignore=shutil.ignore_patterns("report*", "plots")))
    items = pd.read_parquet(prev / "results.parquet")
    de_ids = sorted(items[(items["lang"] == "de") & (items["method"] == "direct")]["pair_id"].unique())
    dropped, flipped = set(de_ids[:10]), set(de_ids[10:22])
    items = items[~((items["lang"] == "de") & items["pair_id"].isin(dropped))].copy()
    flip = (items["lang"] == "de") & items["pair_id"].isin(flipped) & (items["method"] == "direct")
    items.loc[flip, "correct"] = ~items.loc[flip, "correct"].astype(bool)
    items.to_parquet(prev / "results.parquet", index=False)
    now_items = pd.read_parquet(toy / "results.parquet")
    scores = {(s.method, s.lang, s.negative_type): s for r in (read_results(toy),) for s in r.scores
              if (s.method, s.variant) in {("direct", "full"), ("meta", "order_averaged"), ("neuro", "probe")}}
    eos_scores = {(s.method, s.lang): s for s in read_results(eos_run).scores
                  if (s.variant, s.negative_type) in {("full", "all"), ("order_averaged", "all")}}
    # A gate one model passes and the other fails: direct on Japanese between the two.
    low, high = sorted((scores[("direct", "ja", "all")].value, eos_scores[("direct", "ja")].value))
    assert low < high
    gates = tmp_path / "gates.yaml"
    gates.write_text(f"rules:\n  - {{method: direct, variant: full, metric: accuracy, lang: ja, min: {(low + high) / 2}}}\n")

    out = tmp_path / "board"
    done = runner.invoke(app, ["eval", "leaderboard", str(suite), "--out", str(out), "--previous", str(tmp_path / "previous"),
                               "--gates", str(gates)], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert "suite gate fail" in done.output
    page = Elements(rendered(out / "leaderboard.html"))

    # No markup from a name: the hostile entry is text, nowhere an element.
    assert not [t for t, _ in page.tags if t in ("img", "script")]
    models = grid(page.table(id="models"))
    assert models[(HOSTILE, "model")]["text"] == "model" and models[("toy", "release")]["text"] == f"eval-release0 {VERSION}"
    assert ("report", ) == tuple({text for _, text in page.links})
    # What each model's answers show, as its report flags it: the toy's meta is at chance where its interval holds 0.5.
    meta = {s.lang: wilson(s.value, s.n) for s in read_results(toy).scores
            if (s.method, s.variant, s.negative_type) == ("meta", "order_averaged", "all")}
    at_chance = ", ".join(lang for lang, (lo, hi) in sorted(meta.items()) if lo <= 0.5 <= hi)
    assert f"meta at chance: {at_chance}" in models[("toy", "flags (what it knows)")]["text"]
    for href, _ in page.links:
        assert (out / href).resolve() in {(toy / "report.html").resolve(), (eos_run / "report.html").resolve()}

    # Each method's models x languages heatmap: values, n and the 95% interval, equal to what the results hold.
    direct = grid(page.table(**{"class": "heatmap", "data-method": "direct"}))
    for lang in ("ar", "de", "en", "ja", "ru", "vi", "zh"):
        value, n = headline_from_items(now_items, "direct", "full", lang)
        cell = direct[("toy", lang)]
        assert cell["text"] == f"{value:.3f}" and cell["attrs"]["data-n"] == str(n) == str(scores[("direct", lang, "all")].n)
        lo, hi = wilson(value, n)
        assert cell["small"] == f"n {n}, {lo:.2f}–{hi:.2f}" and "background:#" in cell["attrs"]["style"]
        assert direct[(HOSTILE, lang)]["text"] == f"{eos_scores[('direct', lang)].value:.3f}"
    neuro = grid(page.table(**{"class": "heatmap", "data-method": "neuro"}))
    assert neuro[("toy", "de")]["text"] == f"{scores[('neuro', 'de', 'all')].value:.3f}"
    assert neuro[(HOSTILE, "de")]["text"] == "—"  # that entry did not run neuro
    assert "accuracy: 0 (left) to 1 (right); chance 0.5 (red mark)" in rendered(out / "leaderboard.html")
    # The negative-type breakdown pools every language's items.
    breakdown = grid(page.table(**{"class": "breakdown", "data-method": "direct"}))
    sel = now_items[(now_items["method"] == "direct") & (now_items["variant"] == "full") & (now_items["negative_type"] == "random")]
    assert breakdown[("toy", "random")]["text"] == f"{sel['correct'].mean():.3f}"
    assert breakdown[("toy", "random")]["attrs"]["data-n"] == str(len(sel))

    # Gates: each model's verdict with the rule it failed, and the suite's.
    gate = grid(page.table(id="gate-table"))
    failing, passing = ("toy", HOSTILE) if scores[("direct", "ja", "all")].value < high else (HOSTILE, "toy")
    assert gate[(failing, "verdict")]["text"] == "fail" and "direct/full accuracy ja all" in gate[(failing, "failed rules")]["text"]
    assert "below" in gate[(failing, "failed rules")]["text"]
    assert gate[(passing, "verdict")]["text"] == "pass" and gate[(passing, "failed rules")]["text"].strip() == ""

    # Against the previous release: German's direct change on the 94 shared pairs, paired, apart from the whole change.
    changes = page.table(id="change-table")
    head = [c["text"] for c in changes["rows"][0]]
    rows = {(r[0]["text"], r[1]["text"], r[2]["text"]): {h: c["text"] for h, c in zip(head, r)} for r in changes["rows"][1:]}
    assert not any(m == HOSTILE for m, _, _ in rows)  # no previous run of that entry
    de = rows[("toy", "direct", "de")]
    before = pd.read_parquet(prev / "results.parquet")
    sel = lambda f: f[(f["method"] == "direct") & (f["variant"] == "full") & (f["lang"] == "de")].set_index("pair_id")["correct"]  # noqa: E731
    shared = sel(before).index.intersection(sel(now_items).index)
    assert len(shared) == len(de_ids) - 10 and de["n shared"] == str(len(shared))
    expected = paired_change(sel(before)[shared].astype(bool), sel(now_items)[shared].astype(bool))
    assert de["change on shared items"] == f"{expected.change:.3f}" and de["McNemar p"] == f"{expected.p_value:.3f}"
    assert expected.gained + expected.lost == 12
    assert de["whole change"] == "0.000"  # the summaries agree: only the items differ
    assert de["from changed items"] == f"{-expected.change:.3f}"
    en = rows[("toy", "direct", "en")]
    assert en["change on shared items"] == "0.000" and en["McNemar p"] == "1.000"
    assert "no significant change" in en["reading"]

    # The same numbers as data.
    for data in (pd.read_csv(out / "leaderboard.csv"), pd.read_parquet(out / "leaderboard.parquet")):
        cell = data[(data["table"] == "headline") & (data["model"] == "toy") & (data["method"] == "direct")
                    & (data["lang"] == "de") & (data["negative_type"] == "all")]
        assert cell["value"].item() == pytest.approx(scores[("direct", "de", "all")].value)
        change = data[(data["table"] == "change") & (data["model"] == "toy") & (data["method"] == "direct") & (data["lang"] == "de")]
        assert change["n_shared"].item() == len(shared) and change["shared_change"].item() == pytest.approx(expected.change)
        assert set(data[data["table"] == "gate"]["model"]) == {"toy", HOSTILE}
        assert f"meta at chance: {at_chance}" in data[(data["table"] == "flags") & (data["model"] == "toy")]["notes"].item()


def test_suite_folders_are_read_from_suite_json_or_their_results_subfolders(evaluated, tmp_path):
    toy, _ = evaluated
    suite = tmp_path / "suite"
    suite.mkdir()
    with pytest.raises(InputError, match="no suite.json and no results folder"):
        suite_entries(suite)
    shutil.copytree(toy, suite / "a", ignore=shutil.ignore_patterns("plots", "report*"))
    (suite / "notes").mkdir()
    assert suite_entries(suite) == {"a": suite / "a"}
    assert suite_entries(suite / "a") == {"a": suite / "a"}
    (suite / "suite.json").write_text('{"models": []}')
    with pytest.raises(InputError, match=r"suite.json: expected \{\"entries\""):
        suite_entries(suite)
    (suite / "suite.json").write_text('{"entries": [{"name": "first", "folder": "a", "ok": true}, '
                                      '{"name": "failed", "folder": "b", "ok": false}]}')
    assert suite_entries(suite) == {"first": suite / "a"}  # an entry that failed has no results to show
