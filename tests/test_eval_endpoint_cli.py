"""`builder eval run --endpoint … --methods consistency,selftranslate,m2c`, its report and its gates."""

from __future__ import annotations

import json
import sqlite3

from generative_fixtures import VERSION
from typer.testing import CliRunner

from builder.cli import app

runner = CliRunner()


def cli(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


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
