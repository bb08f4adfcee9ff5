"""`builder eval suite run`: a suite of models on a release through a shared score store.

Driven as a maintainer drives it: the command line on the demo release and the session's toy model,
then the same suite on a release with a tenth of the pairs reworded; the store is real SQLite (and
PostgreSQL for the test of two writers at once).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from eval_fixtures import VERSION
from sample_workspace import publish_changed
from toy_suites import same_results, store_rows, summary, toy_suite
from typer.testing import CliRunner

from builder.cli import app
from builder.m2c.template_files import template_type
from evaluate.data import load_release_pairs
from evaluate.scoring import ScoringSetup, TokenScores
from evaluate.store import ScoreStore, StoredScorer

runner = CliRunner()


def suite(*args: str, ok: bool = True) -> str:
    res = runner.invoke(app, ["eval", "suite", "run", *map(str, args)], catch_exceptions=False)
    assert (res.exit_code == 0) == ok, res.output
    return res.output


@pytest.mark.parametrize(("body", "line", "said"), [
    ("    dtype: float64\n", 12, "field models[1] (toy-eos).dtype: Input should be"),
    ("  - name: gone\n    folder: ./no-such-model\n", 13, "field models[2] (gone).folder:"),
    ("  - name: hub\n    hub: org/model\n", 12, "field models[2] (hub): a hub model needs its revision"),
    ("  - name: toy\n    gguf: default\n", 5, "field models: two entries named toy"),
    ("sample_m2c: 0\n", 12, "field sample_m2c: Input should be greater than or equal to 1"),
])
def test_a_bad_suite_file_is_refused_before_any_model_loads_naming_file_line_and_field(
        tmp_path, monkeypatch, body, line, said):
    def no_loading(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("evaluate.suite_run.load_model", no_loading)
    (tmp_path / "model").mkdir()
    path = toy_suite(tmp_path / "suite.yaml", tmp_path / "model", body=body)
    output = " ".join(suite(path, "--release", tmp_path, "--out", tmp_path / "out", ok=False).split())
    assert f"{path}:{line}: {said}" in output
    assert not (tmp_path / "out").exists()


def test_a_suite_on_a_changed_release_computes_only_the_new_texts_and_equals_a_run_from_scratch(
        release, toy_dir, tmp_path):
    root = Path(shutil.copytree(release.parent, tmp_path / "data"))  # its workspace and releases, changed here only
    path, store = toy_suite(tmp_path / "suite.yaml", toy_dir), tmp_path / "scores.sqlite"
    common = ["--release", root / "releases", "--store", store, "--no-report"]

    # The dry run on an empty store: every text is missing, and nothing is written (not even the store).
    shown = suite(path, *common, "--version", VERSION, "--out", tmp_path / "v1", "--dry-run")
    pairs, _ = load_release_pairs(root / "releases", VERSION, ["de", "en"])
    sentences = set(pairs["acceptable_sentence"]) | set(pairs["unacceptable_sentence"])
    assert f"│ toy     │ direct │ scores │ {len(sentences):5d} │ {len(sentences):10d} │" in shown
    assert not store.exists() and not (tmp_path / "v1").exists()

    suite(path, *common, "--version", VERSION, "--out", tmp_path / "v1")
    first = summary(tmp_path / "v1" / "toy")["store"]
    assert first["direct"] == {"computed": len(sentences), "stored": 0, "unstored": 0}
    rows = store_rows(store)

    changed = publish_changed(root, "1.0.1")
    new, _ = load_release_pairs(root / "releases", "1.0.1", ["de", "en"])
    now = set(new["acceptable_sentence"]) | set(new["unacceptable_sentence"])
    assert 0 < len(now - sentences) <= 0.25 * len(now)
    shown = suite(path, *common, "--version", "1.0.1", "--out", tmp_path / "v2", "--dry-run")
    assert f"│ toy     │ direct │ scores │ {len(now):5d} │ {len(now - sentences):10d} │" in shown
    assert store_rows(store) == rows and not (tmp_path / "v2").exists()

    suite(path, *common, "--version", "1.0.1", "--out", tmp_path / "v2")
    suite(path, "--release", root / "releases", "--store", tmp_path / "fresh.sqlite", "--no-report", "--version", "1.0.1",
          "--out", tmp_path / "scratch")
    listed = json.loads((tmp_path / "v2" / "suite.json").read_text(encoding="utf-8"))
    assert [(e["name"], e["folder"], e["ok"]) for e in listed["entries"]] == [("toy", "toy", True), ("toy-eos", "toy-eos", True)]
    assert listed["version"] == "1.0.1"
    board = pd.read_csv(tmp_path / "v2" / "leaderboard.csv")  # the suite's one leaderboard, beside suite.json
    assert set(board["model"]) == {"toy", "toy-eos"} and (tmp_path / "v2" / "leaderboard.html").is_file()
    for name in ("toy", "toy-eos"):
        counts, fresh = summary(tmp_path / "v2" / name)["store"], summary(tmp_path / "scratch" / name)["store"]
        assert counts["direct"] == {"computed": len(now - sentences), "stored": len(now & sentences), "unstored": 0}
        assert counts["meta"]["computed"] == 0  # meta asks about the concepts, which did not change
        for method in ("direct", "meta"):
            assert counts[method]["computed"] + counts[method]["stored"] == fresh[method]["computed"]
            assert fresh[method]["stored"] == 0
        same_results(tmp_path / "v2" / name, tmp_path / "scratch" / name)
        a = pd.read_parquet(tmp_path / "v2" / name / "results.parquet")
        assert set(a.loc[a["pair_id"].isin(changed), "pair_id"]) == changed & set(a["pair_id"])
    # the two configurations are apart in the store: the same sentences under another BOS policy
    assert summary(tmp_path / "v1" / "toy-eos")["store"]["direct"]["computed"] == len(sentences)


def test_two_entries_at_once_each_in_a_process_of_its_own_with_half_the_cores(release, toy_dir, tmp_path, monkeypatch):
    """--jobs 2 on CPUs: each entry's process runs torch on its share of the cores this one may use. A process left
    to itself takes every core (as OMP_NUM_THREADS says here), so with two cores or more an entry that did not share
    would show it."""
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setenv("OMP_NUM_THREADS", str(cores))
    path = toy_suite(tmp_path / "suite.yaml", toy_dir, methods="direct", langs="en")
    suite(path, "--release", release, "--version", VERSION, "--out", tmp_path / "out", "--store", tmp_path / "s.sqlite",
          "--jobs", "2", "--devices", "cpu", "--no-report")
    threads = []
    for name in ("toy", "toy-eos"):
        data = summary(tmp_path / "out" / name)
        assert data["config"]["langs"] == ["en"] and data["store"]["direct"]["stored"] == 0
        assert data["config"]["model"]["device"] == "cpu"
        threads.append(data["threads"])
    assert threads == [max(1, cores // 2)] * 2 and sum(threads) <= max(cores, 2)
    assert summary(tmp_path / "out" / "toy")["config"]["scoring"]["bos_policy"] == "bos"
    assert summary(tmp_path / "out" / "toy-eos")["config"]["scoring"]["bos_policy"] == "eos"
    assert [e["ok"] for e in json.loads((tmp_path / "out" / "suite.json").read_text())["entries"]] == [True, True]


class Deterministic:
    """A scorer whose scores are a function of the text (so any process's value can be checked), counting its texts."""

    setup = ScoringSetup(bos_policy="none", bos_token=None, first_token_scored=False)

    def __init__(self) -> None:
        self.scored: list[tuple[str, str]] = []

    def score(self, requests, progress=None):
        self.scored += list(requests)
        return {r: expected(r) for r in requests}


def expected(request: tuple[str, str]) -> TokenScores:
    n = len(request[1]) % 5 + 1
    seed = sum(map(ord, request[0] + request[1]))
    return TokenScores(-np.arange(1, n + 1, dtype=np.float32) * seed / 1000, np.arange(n), np.arange(1, n + 1))


def write_at_once(url: str, requests: list, ready, queue) -> None:
    """One process: open the store, wait for the other, score its requests through the store."""
    store, inner = ScoreStore.open(url), Deterministic()
    scorer = StoredScorer(inner, store, {"model": "deterministic"})
    ready.wait()
    for i in range(0, len(requests), 50):  # several calls, interleaved with the other process's
        scorer.score(requests[i : i + 50])
    store.close()
    queue.put(len(inner.scored))


@pytest.mark.both_databases
def test_two_processes_writing_the_store_at_once_lose_nothing_and_recompute_nothing_stored(tmp_path, database, request):
    url = request.getfixturevalue("new_database")() if database == "postgresql" else str(tmp_path / "scores.sqlite")
    texts = [(f"context {i % 7}", f" continuation {i}") for i in range(600)]
    first, second = texts[:400], texts[200:]  # 200 texts both ask for
    ctx = multiprocessing.get_context("spawn")
    ready, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=write_at_once, args=(url, part, ready, queue)) for part in (first, second)]
    for p in procs:
        p.start()
    computed = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert 600 <= sum(computed) <= 800  # each text once, but for those both asked for before either stored them
    store, inner = ScoreStore.open(url), Deterministic()
    try:
        got = StoredScorer(inner, store, {"model": "deterministic"}).score(texts + [("new", " text")])
    finally:
        store.close()
    assert inner.scored == [("new", " text")]  # everything the two processes stored is found, nothing is lost
    for r in texts:
        assert np.array_equal(got[r].logprobs, expected(r).logprobs) and np.array_equal(got[r].ends, expected(r).ends)


def test_an_endpoint_entry_takes_its_replies_from_the_store_on_the_next_run(m2c_release, server, tmp_path):
    from generative_fixtures import VERSION as M2C_VERSION

    path = tmp_path / "suite.yaml"
    path.write_text(f"methods: [selftranslate, m2c]\nlangs: [de, en]\nsample_m2c: 2\nmodels:\n  - name: served\n"
                    f"    endpoint: {server.base_url}\n    served_model: standin-chat\n    concurrency: 8\n", encoding="utf-8")
    common = ["--release", m2c_release, "--version", M2C_VERSION, "--store", tmp_path / "s.sqlite", "--no-report"]
    suite(path, *common, "--out", tmp_path / "first")
    sent = server.stats.calls
    first = summary(tmp_path / "first" / "served")["store"]
    assert sent > 0 and first["m2c"]["computed"] > 0 and first["selftranslate"]["computed"] > 0
    suite(path, *common, "--out", tmp_path / "second")  # another folder: no LLM cache of its own to replay from
    second = summary(tmp_path / "second" / "served")["store"]
    assert server.stats.calls == sent
    assert {m: (c["computed"], c["stored"]) for m, c in second.items()} == {
        m: (0, c["computed"] + c["stored"]) for m, c in first.items()}
    a, b = (pd.read_parquet(tmp_path / d / "served" / "m2c_items.parquet") for d in ("first", "second"))
    # the suite's sample, as `eval run --sample-m2c 2` asks it: at most 2 tests per language and test type
    assert summary(tmp_path / "first" / "served")["config"]["options"]["sample_m2c"] == 2
    asked = a[a["variant"] == "zero_shot"]
    assert asked.groupby(["lang", asked["template_id"].map(template_type)]).size().max() == 2
    assert a["reply"].tolist() == b["reply"].tolist() and a["correct"].tolist() == b["correct"].tolist()
