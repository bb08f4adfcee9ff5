"""`builder eval run --endpoint … --methods consistency,selftranslate,m2c`, its report and its gates."""

from __future__ import annotations

import hashlib
import json
import sqlite3

from generative_fixtures import VERSION
from typer.testing import CliRunner

from builder.cli import app

runner = CliRunner()


def cli(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def sampled_run(server, release, out, methods: str, *flags) -> tuple[dict, int, str]:
    """`eval run` on the stand-in without the score store, so that a run's requests are what its sample asks: the
    options summary.json records, the requests sent, the report."""
    calls = server.stats.calls
    res = cli("eval", "run", "--release", str(release), "--version", VERSION, "--endpoint", server.base_url, "--model",
              "standin-chat", "--methods", methods, "--langs", "de,en", "--concurrency", "8", "--out", str(out),
              "--no-store", *flags)
    assert res.exit_code == 0, res.output
    return (json.loads((out / "summary.json").read_text())["config"]["options"], server.stats.calls - calls,
            (out / "report.md").read_text())


def stated_sample(rows, key: str, by: list[str], n: int) -> set:
    """The `key`s a seed-0 sample of at most `n` rows per `by` group holds: those whose sha256 of "0|key" ranks lowest."""
    rank = rows[key].map(lambda k: hashlib.sha256(f"0|{k}".encode()).hexdigest())
    return set(rows.assign(rank=rank).sort_values("rank").groupby(by).head(n)[key])


def test_endpoint_run_report_and_gates_on_consistency_and_morphological_errors(m2c_release, server, tmp_path):
    from builder import releases

    de = releases.load(m2c_release, VERSION, "m2c_de").to_pandas()
    with_forms = de[de["answer_forms"].map(len) > 0]
    for r in with_forms.itertuples():  # the stand-in answers every German test with another form of the answer
        server.lexicon.m2c_answers[(r.context, r.question)] = list(r.answer_forms)[0]
    out = tmp_path / "out"
    res = cli("eval", "run", "--release", str(m2c_release), "--version", VERSION, "--endpoint", server.base_url,
              "--model", "standin-chat", "--methods", "consistency,selftranslate,m2c", "--langs", "de,en",
              "--concurrency", "8", "--out", str(out))
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["model"]["source"] == "endpoint" and summary["config"]["model"]["name"] == "standin-chat"
    assert "m2c_de" in summary["config"]["dataset"]["configs"]
    assert (out / "plots" / "consistency_heatmaps.png").stat().st_size > 5000
    # Its LLM cache is one file in the results folder, holding the cache's tables only: no workspace anywhere.
    assert [p.name for p in out.rglob("*.sqlite*")] == ["llm-cache.sqlite"]
    with sqlite3.connect(out / "llm-cache.sqlite") as db:
        tables = {r[0] for r in db.execute("select name from sqlite_master where type = 'table'")}
        assert tables == {"llm_calls", "llm_cache", "llm_endpoints", "batches", "llm_claims"}
        cached = db.execute("select count(*) from llm_cache").fetchone()[0]
    assert cached > 0
    exported = cli("llm", "export-recording", str(tmp_path / "rec.jsonl"), "--cache", str(out / "llm-cache.sqlite"))
    assert exported.exit_code == 0 and f"wrote {cached} replies" in exported.output
    (tmp_path / "garbage.sqlite").write_text("not a database, " * 100)
    refused = cli("llm", "export-recording", str(tmp_path / "rec2.jsonl"), "--cache", str(tmp_path / "garbage.sqlite"))
    assert refused.exit_code == 1 and "garbage.sqlite is not an LLM cache" in refused.output
    md = (out / "report.md").read_text()
    assert "## M2C question answering" in md and "## Self-translation consistency" in md
    share = next(s["value"] for s in summary["scores"]
                 if (s["method"], s["variant"], s["lang"], s["metric"]) == ("m2c", "zero_shot", "de", "morph_error_share"))
    assert share == len(with_forms) / len(de)

    gates = tmp_path / "gates.yaml"
    gates.write_text("rules:\n"
                     "  - {method: consistency, variant: meta/acceptable_first, metric: consistency, lang: de-en, min: 0.99}\n"
                     "  - {method: m2c, variant: zero_shot, metric: morph_error_share, max: 0.6}\n")
    ok = cli("eval", "gate", str(out), "--gates", str(gates))
    assert ok.exit_code == 0, ok.output
    gates.write_text("rules:\n  - {method: m2c, variant: zero_shot, metric: morph_error_share, lang: de, max: 0.1}\n")
    bad = cli("eval", "gate", str(out), "--gates", str(gates))
    assert bad.exit_code == 1 and "FAIL m2c/zero_shot de all" in bad.output and "above 0.1" in bad.output


def test_endpoint_cannot_run_scoring_methods_and_m2c_needs_tests(m2c_release, server, tmp_path):
    res = cli("eval", "run", "--release", str(m2c_release), "--endpoint", server.base_url, "--model", "x",
              "--methods", "direct,meta", "--out", str(tmp_path / "o"))
    assert res.exit_code == 1 and ("method direct needs log-probability scores, which an endpoint does not offer: add "
                                   "--score-endpoint") in res.output
    res = cli("eval", "run", "--release", str(m2c_release), "--endpoint", server.base_url, "--model", "x",
              "--methods", "m2c", "--langs", "ja", "--out", str(tmp_path / "o"))
    assert res.exit_code == 1 and "no M2C tests for ja" in res.output


def test_a_method_the_backend_cannot_serve_is_refused_before_the_release_or_a_model_is_loaded(server, tmp_path):
    missing = tmp_path / "no-release"  # never read: the refusal comes first
    for flags, refusal in (([], "method direct needs log-probability scores"),
                           (["--score-endpoint"], "method neuro needs a local model's hidden states")):
        res = cli("eval", "run", "--release", str(missing), "--endpoint", server.base_url, "--model", "x",
                  "--methods", "direct,neuro", *flags, "--out", str(tmp_path / "o"))
        assert res.exit_code == 1 and refusal in res.output and "no-release" not in res.output
    assert server.stats.calls == 0 and not (tmp_path / "o").exists()
    # The same release path fails as a release once the methods can run there.
    res = cli("eval", "run", "--release", str(missing), "--endpoint", server.base_url, "--model", "x",
              "--methods", "meta", "--out", str(tmp_path / "o"))
    assert res.exit_code == 1 and "no-release" in res.output


def test_a_sample_asks_exactly_the_stated_m2c_tests_and_self_translation_pairs_and_records_it(m2c_release, server, tmp_path):
    """--sample-m2c N: at most N tests per language and test type; --sample-selftranslate N: at most N source pairs per
    negative type; each those whose sha256 of "seed|id" ranks lowest. Without them, every test and pair."""
    import pandas as pd

    from builder import releases
    from builder.m2c.template_files import template_type

    def run(out, *flags):
        options, calls, md = sampled_run(server, m2c_release, out, "selftranslate,m2c", *flags)
        m2c, st = (pd.read_parquet(out / f"{t}.parquet") for t in ("m2c_items", "selftranslate_items"))
        return options, m2c, st[st["condition"] == "original"], calls, md

    tests = pd.concat([releases.load(m2c_release, VERSION, f"m2c_{lang}").to_pandas() for lang in ("de", "en")])
    tests["test_type"] = tests["template_id"].map(template_type)
    en = releases.load(m2c_release, VERSION, "en").to_pandas()

    options, m2c, originals, whole_calls, md = run(tmp_path / "whole")
    assert options["sample_m2c"] is None and options["sample_selftranslate"] is None
    assert set(m2c["test_id"]) == set(tests["test_id"]) and set(originals["pair_id"]) == set(en["pair_id"])
    assert "A sample" not in md
    whole = m2c.set_index(["test_id", "variant"])["reply"]

    sample = ("--sample-m2c", "1", "--sample-selftranslate", "2")
    options, m2c, originals, sample_calls, md = run(tmp_path / "sample", *sample)
    assert options["sample_m2c"] == 1 and options["sample_selftranslate"] == 2 and options["seed"] == 0
    asked = set(m2c["test_id"])
    assert asked == stated_sample(tests, "test_id", ["lang", "test_type"], 1)
    assert len(asked) == tests.groupby(["lang", "test_type"]).ngroups < len(tests)
    assert set(originals["pair_id"]) == stated_sample(en, "pair_id", ["negative_type"], 2)
    assert len(originals) == 2 * en["negative_type"].nunique() < len(en)
    assert 0 < sample_calls < whole_calls
    # each sampled test asked as in the whole run (its one-shot exemplar drawn from every test)
    assert (m2c.set_index(["test_id", "variant"])["reply"] == whole.loc[m2c.set_index(["test_id", "variant"]).index]).all()
    assert (f"**A sample**: at most 1 tests per language and test type, drawn with seed 0 ({len(asked)} tests asked)"
            in md and f"at most 2 pairs per source language and negative type, drawn with seed 0 ({len(originals)} "
            "source pairs asked)" in md)
    again = run(tmp_path / "again", *sample)
    assert set(again[1]["test_id"]) == asked and set(again[2]["pair_id"]) == set(originals["pair_id"])


def test_a_consistency_sample_asks_the_stated_pairs_twice_and_says_so(m2c_release, server, tmp_path):
    """--sample-consistency N: the two sampled runs (the run-to-run baseline) ask at most N pairs per language and
    negative type, those whose sha256 of "seed|pair id" ranks lowest; the comparison across languages still reads
    every pair's decisions."""
    import pandas as pd

    from builder import releases

    def run(out, *flags):
        options, calls, md = sampled_run(server, m2c_release, out, "consistency", *flags)
        return (options, pd.read_parquet(out / "consistency_run_to_run.parquet"),
                pd.read_parquet(out / "consistency_matrix.parquet"), calls, md)

    pairs = pd.concat([releases.load(m2c_release, VERSION, lang).to_pandas() for lang in ("de", "en")])
    options, whole, whole_matrix, whole_calls, md = run(tmp_path / "whole")
    assert options["sample_consistency"] is None
    assert dict(zip(whole["lang"], whole["n"])) == pairs.groupby("lang").size().to_dict()
    assert "a sample" not in md

    options, sample, matrix, sample_calls, md = run(tmp_path / "sample", "--sample-consistency", "1")
    assert options["sample_consistency"] == 1
    stated = pairs[pairs["pair_id"].isin(stated_sample(pairs, "pair_id", ["lang", "negative_type"], 1))]
    assert dict(zip(sample["lang"], sample["n"])) == stated.groupby("lang").size().to_dict()
    assert (sample["n"] < sample["lang"].map(pairs.groupby("lang").size())).all()
    # the meta prompts asked for decisions are the whole run's; only the two sampled runs shrink, by 2 requests a pair
    assert whole_calls - sample_calls == 2 * (len(pairs) - len(stated))
    pd.testing.assert_frame_equal(matrix, whole_matrix)
    assert "a sample of at most 1 pairs per language and negative type, drawn with seed 0" in md
