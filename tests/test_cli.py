"""The `builder` CLI as a user runs it, including the main job on the bundled recording."""

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass

import pandas as pd
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from annotation import server as ls_server
from builder import releases
from builder.cli import app
from builder.llm.cache import LLMCache
from builder.paths import sample_dir
from builder.workspace import schema as t
from builder.workspace.store import open_workspace

runner = CliRunner()


def cli(*args, env=None):
    return runner.invoke(app, list(args), env=env, catch_exceptions=False)


def _demo(directory, *flags):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return subprocess.run([sys.executable, "-m", "builder.cli", "demo", "-w", str(directory), *flags],
                          env=env, capture_output=True, text=True, timeout=900)


# The main job runs once per session, in the steps a user can take: the tests below share it, each step run by
# the first test that needs it, so no test carries the whole job.


@dataclass
class StoppedDemo:
    run: subprocess.CompletedProcess
    released: bool  # whether the workspace held a release when it stopped


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("demo") / "demo"
    yield directory
    ls_server.stop(directory)  # the demo leaves its Label Studio running for the curators


@pytest.fixture(scope="session")
def demo_stopped(demo_dir) -> StoppedDemo:
    """No endpoint configured and no --auto-review: every LLM reply comes from the bundled recording, and the
    job stops where curators must act."""
    run = _demo(demo_dir)
    return StoppedDemo(run, (demo_dir / "releases").exists())


@pytest.fixture(scope="session")
def demo_released(demo_dir, demo_stopped) -> subprocess.CompletedProcess:
    """The same command with --auto-review and --no-eval: the scripted curator decides, and the job goes on to the release."""
    return _demo(demo_dir, "--auto-review", "--no-eval")


@pytest.fixture(scope="session")
def demo_done(demo_dir, demo_released) -> subprocess.CompletedProcess:
    """Once more with --auto-review: it resumes at the release and evaluates it, with the toy (the default model's
    whole evaluation takes minutes; the parity and chat-model tests run SmolLM2)."""
    return _demo(demo_dir, "--auto-review", "--model", "toy")


def _llm_rows(cache: LLMCache, stmt) -> list[dict]:
    with cache.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(stmt)]


def test_demo_without_auto_review_stops_where_curators_must_act_and_says_how_to_go_on(demo_stopped):
    first = demo_stopped.run
    assert first.returncode == 0, first.stderr
    assert "the recording bundled with the sample" in first.stdout and "wait for curators" in first.stdout
    assert not demo_stopped.released


def test_demo_runs_the_whole_loop_on_the_recording_into_a_release(demo_released, demo_dir):
    released = demo_released
    assert released.returncode == 0, released.stderr
    assert "report:" not in released.stdout and not (demo_dir / "eval").exists()  # --no-eval: it stops at the release
    for task in ("translate ar", "generate ar", "fill de"):  # each LLM stage's progress, as lines in a log
        assert re.search(rf"^{task}: \d+/\d+ \(100%\) after \d+m\d\ds$", released.stdout, re.M), task
    ws = open_workspace(demo_dir)
    calls = ws.rows(select(t.llm_calls.c.source, t.llm_calls.c.stage))
    assert calls and {c["source"] for c in calls} == {"recording"}
    assert {c["stage"] for c in calls} >= {"translate", "generate", "fill"}
    words = ws.rows(select(t.verified_words.c.reviewer).where(t.verified_words.c.origin == "review"))
    assert words and {w["reviewer"] for w in words} == {"demo-curator@builder.local"}
    rows = ws.rows(select(t.sentence_pairs.c.lang, t.sentence_pairs.c.pair_id))
    per_lang = {lang: {r["pair_id"] for r in rows if r["lang"] == lang} for lang in {r["lang"] for r in rows}}
    assert set(per_lang) == {"en", "de", "zh", "ar", "ja", "ru", "vi"}
    assert len({frozenset(v) for v in per_lang.values()}) == 1  # parallel items join on pair id
    release = demo_dir / "releases"
    configs = releases.configs(release, "0.1.0")
    assert set(per_lang) <= set(configs) and {"m2c_de", "m2c_ru", "m2c_zh", "m2c_en"} <= set(configs)
    assert len(releases.load(release, "0.1.0", "ar")) == len(per_lang["ar"])
    ws.close()


def test_demo_evaluates_the_release_and_reports_it(demo_done, demo_dir):
    done = demo_done
    assert done.returncode == 0, done.stderr
    assert "re-using it" in done.stdout  # the release the step before published
    # Output not on a terminal: each evaluation task's progress as lines, the LLM's self-translation's included.
    shown = re.findall(r"^(\S+?): .*: \d+/\d+ \((\d+)%\) after \d+m\d\ds$", done.stdout, re.M)
    assert {"direct", "m2c", "selftranslate"} <= {task for task, _ in shown} and ("direct", "100") in shown
    report = demo_dir / "eval" / "0.1.0" / "report.html"
    assert "report:" in done.stdout and "report.html" in done.stdout
    html = report.read_text(encoding="utf-8")
    assert "toy model" in html
    for section in ("Cross-lingual consistency", "M2C question answering"):
        assert section in html
    plots = sorted((report.parent / "plots").glob("*.png"))
    assert len(plots) >= 6 and all(p.stat().st_size > 1000 for p in plots)
    # The toy cannot translate: self-translation is the LLM's, replayed from the recording too.
    llm_report = report.parent / "llm" / "report.html"
    assert str(llm_report.relative_to(demo_dir)) in done.stdout
    llm_html = llm_report.read_text(encoding="utf-8")
    assert "Self-translation consistency" in llm_html and "recorded replies (recording.jsonl)" in llm_html
    assert (llm_report.parent / "plots" / "selftranslate_consistency.png").stat().st_size > 1000
    assert (report.parent / "llm" / "llm-cache.sqlite").is_file() and not (report.parent / "llm" / "workspace.sqlite").exists()
    llm_cache = LLMCache.open(report.parent / "llm" / "llm-cache.sqlite")
    llm_calls = _llm_rows(llm_cache, select(t.llm_calls.c.source, t.llm_calls.c.stage))
    llm_cache.close()
    assert llm_calls and {c["source"] for c in llm_calls} == {"recording"}
    assert {c["stage"] for c in llm_calls} == {"selftranslate: translation", "selftranslate: answer"}
    summary = pd.read_parquet(report.parent / "llm" / "selftranslate_summary.parquet")
    assert set(summary["target"]) == {"de", "zh", "ar", "ja", "ru", "vi"} and (summary["bleu"].dropna() > 50).all()
    # The demo asks a stated sample of what the model generates; its results and reports say which.
    for folder, option, n, said in (
            (report.parent, "sample_m2c", 4, "**A sample**: at most 4 tests per language and test type"),
            (report.parent, "sample_consistency", 2, "a sample of at most 2 pairs per language and negative type"),
            (report.parent / "llm", "sample_selftranslate", 2, "**A sample**: at most 2 pairs per source language")):
        options = json.loads((folder / "summary.json").read_text())["config"]["options"]
        assert options[option] == n and options["seed"] == 0
        assert said in (folder / "report.md").read_text(encoding="utf-8")
    m2c_items = pd.read_parquet(report.parent / "m2c_items.parquet")
    assert m2c_items[m2c_items["variant"] == "zero_shot"].groupby("lang").size().to_dict() == {
        "de": 4 * 11, "en": 4 * 10, "ru": 4 * 12, "zh": 4 * 11}  # test types: de 10 and the sample template's, ru 12
    assert summary.groupby("direction")["n"].first().eq(8).all()  # 2 of each of the 4 negative types
    run_to_run = pd.read_parquet(report.parent / "consistency_run_to_run.parquet")
    assert run_to_run["n"].eq(8).all() and len(run_to_run) == 7  # 2 pairs of each negative type in every language


def test_resuming_the_finished_demo_costs_nothing_and_changes_nothing(demo_done, demo_dir):
    assert demo_done.returncode == 0, demo_done.stderr
    ws = open_workspace(demo_dir)
    llm_cache = LLMCache.open(demo_dir / "eval" / "0.1.0" / "llm" / "llm-cache.sqlite")
    try:
        calls, llm_calls = len(ws.rows(select(t.llm_calls.c.id))), len(_llm_rows(llm_cache, select(t.llm_calls.c.id)))
        again = _demo(demo_dir, "--auto-review", "--model", "toy")
        assert again.returncode == 0 and "re-using it" in again.stdout
        assert len(ws.rows(select(t.llm_calls.c.id))) == calls
        assert len(_llm_rows(llm_cache, select(t.llm_calls.c.id))) == llm_calls
    finally:
        llm_cache.close()
        ws.close()


def test_status_json_counts_per_language_and_stage(tmp_path):
    ws_dir = str(tmp_path / "w")
    assert cli("init", ws_dir).exit_code == 0
    assert cli("seeds", "import", str(sample_dir() / "seeds"), "-w", ws_dir).exit_code == 0
    res = cli("status", "--json", "-w", ws_dir)
    data = {r["lang"]: r for r in json.loads(res.stdout)}
    assert data["hu"]["translate"]["pending"] == 193 and data["de"]["translate"]["verified"] == 193
    assert data["en"]["generate"]["pending"] > 300


def test_language_add_validates_and_unknown_codes_list_known_ones(tmp_path):
    ws_dir = str(tmp_path / "w")
    cli("init", ws_dir)
    bad = cli("language", "add", "sw", "--name", "Swahili", "--typology", "bantu", "--family", "Niger-Congo",
              "--script", "Latn", "-w", ws_dir)
    assert bad.exit_code == 1 and "typology" in bad.output
    ok = cli("language", "add", "sw", "--name", "Swahili", "--typology", "agglutinative", "--family",
             "Niger-Congo (Bantu)", "--script", "Latn", "-w", ws_dir)
    assert ok.exit_code == 0
    listed = json.loads(cli("language", "list", "--json", "-w", ws_dir).stdout)
    assert {"en", "sw"} <= {lang["code"] for lang in listed} and len(listed) == 19
    res = cli("translate", "--lang", "sw,xx", "-w", ws_dir, "--dry-run")
    assert res.exit_code == 1 and "unknown language code(s): xx; known: ar, ca" in res.output


def test_seed_errors_exit_nonzero_and_name_the_line(tmp_path):
    ws_dir = str(tmp_path / "w")
    cli("init", ws_dir)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"property": "can fly"}\n', encoding="utf-8")
    res = cli("seeds", "import", str(bad), "-w", ws_dir)
    assert res.exit_code == 1 and "bad.jsonl:1: field 'acceptable_concept': missing" in res.output


def test_dry_run_prints_requests_tokens_and_cost(tmp_path):
    ws_dir = str(tmp_path / "w")
    cli("init", ws_dir)
    cli("seeds", "import", str(sample_dir() / "seeds"), "-w", ws_dir)
    res = cli("translate", "--lang", "fr,es", "--dry-run", "-w", ws_dir,  # no network here: nothing can be sent
              env={"OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "https://api.openai.com/v1"})
    assert res.exit_code == 0, res.output
    assert "dry run: 40 request(s)" in res.output and "estimated cost $" in res.output
    assert '"model": "gpt-4o-2024-08-06"' in res.output  # the hosted API's documented default
    assert "sk-x" not in res.output
    local = cli("translate", "--lang", "fr,es", "--dry-run", "-w", ws_dir,  # nothing listens at port 9
                env={"OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "BUILDER_LLM_MODEL": "smollm2"})
    assert local.exit_code == 0, local.output
    assert "dry run: 40 request(s)" in local.output and "estimated cost unknown" in local.output


def test_tables_keep_every_column_whole_in_a_log_or_a_pipe(tmp_path):
    """Off a terminal rich assumed 80 columns and cut `review status`'s seventeen headers to "s… l… p…"."""
    ws_dir = str(tmp_path / "w")
    cli("init", ws_dir)
    cli("seeds", "import", str(sample_dir() / "seeds"), "-w", ws_dir)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    for args, headers in ((("review", "status"), ("stage", "pending", "corrected", "ambiguous", "false negative", "skipped",
                                                  "disagree", "adjudicated", "text exact", "reviewers")),
                          (("status",), ("translate: pending", "generate: pending", "LLM flags (--flags)"))):
        piped = subprocess.run([sys.executable, "-m", "builder.cli", *args, "-w", ws_dir], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, env=env, timeout=120)
        assert piped.returncode == 0, piped.stderr
        assert "…" not in piped.stdout
        for header in headers:
            assert header in piped.stdout, (header, piped.stdout)
    rows = cli("status", "-w", ws_dir).output.splitlines()  # through the CLI runner too: a row is one line
    assert any(line.startswith("│ hu ") and " 193 │" in line for line in rows), rows
