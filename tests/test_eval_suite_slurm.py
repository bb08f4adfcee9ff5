"""`builder eval suite run --executor slurm`: a suite of the toy model as jobs on the real single-node Slurm of the
`slurm` fixture, driven as docs/cluster.md ("A suite on Slurm") drives it: submitted, watched with `suite status`,
collected, and compared with `--executor local`; a job cancelled with `scancel` and the suite run again; an entry
that fails, named with its log, submitted again by the same command once, then only with `--retry-failed`. The jobs
are CPU jobs on the toy model, with one or two methods and languages.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pandas as pd
import pytest
from eval_fixtures import VERSION
from toy_suites import same_results, store_rows, summary, toy_suite
from typer.testing import CliRunner

from builder.cli import app
from evaluate.suite import SuiteError, load_suite

runner = CliRunner()
RESOURCES = 'resources: {cpus: 1, mem: 2G, time: "0:30:00"}'  # the node has room for two such jobs side by side


def cli(*args, ok: bool | None = True):
    res = runner.invoke(app, ["eval", "suite", *map(str, args)], catch_exceptions=False)
    if ok is not None:
        assert (res.exit_code == 0) == ok, res.output
    return res


def write_suite(path: Path, body: str) -> Path:
    path.write_text(body, encoding="utf-8")
    return path


def until_finished(out: Path, timeout_s: float = 900) -> str:
    """`suite status` until no entry is pending or running; its last output (a bound on waiting, not a measure)."""
    deadline = time.monotonic() + timeout_s
    while True:
        shown = cli("status", out, ok=None).output
        if not any(f": {s}" in shown for s in ("pending", "running", "not submitted")):
            return shown
        assert time.monotonic() < deadline, f"still unfinished: {shown}"
        time.sleep(1)


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_resources_come_from_the_suite_and_an_entry_sets_its_own_over_them(tmp_path):
    path = write_suite(tmp_path / "suite.yaml", """methods: [direct]
resources: {cpus: 4, mem: 16G, time: "2:00:00", partition: cpu}
models:
  - name: small
    gguf: default
  - name: big
    gguf: default
    resources: {gpus: 1, partition: gpu, sbatch: {constraint: a100}}
""")
    small, big = load_suite(path).models
    assert small.resources.model_dump() == {"gpus": 0, "cpus": 4, "mem": "16G", "time": "2:00:00", "partition": "cpu",
                                            "account": None, "sbatch": {}}
    assert big.resources.model_dump() == {"gpus": 1, "cpus": 4, "mem": "16G", "time": "2:00:00", "partition": "gpu",
                                          "account": None, "sbatch": {"constraint": "a100"}}


@pytest.mark.parametrize(("where", "line", "field"), [
    ("entry", 7, "models[1] (big).resources.mem"),
    ("suite", 2, "resources.mem"),
])
def test_bad_resources_are_refused_naming_file_line_and_field(tmp_path, where, line, field):
    entry = "    resources: {mem: lots}\n" if where == "entry" else ""
    suite = "resources: {mem: lots}\n" if where == "suite" else ""
    path = write_suite(tmp_path / "suite.yaml", f"methods: [direct]\n{suite}models:\n  - name: small\n    gguf: default\n"
                                                f"  - name: big\n    gguf: default\n{entry}")
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    assert str(caught.value).startswith(f"{path}:{line}: field {field}: String should match pattern")


def test_the_local_executors_options_are_refused_with_slurm_before_anything_is_submitted(tmp_path):
    path = write_suite(tmp_path / "suite.yaml", "methods: [direct]\nmodels:\n  - name: small\n    gguf: default\n")
    said = cli("run", path, "--release", tmp_path, "--out", tmp_path / "out", "--executor", "slurm", "--jobs", "2",
               ok=False).output
    assert "--jobs and --devices are for --executor local" in " ".join(said.split())
    assert "--executor pbs: local or slurm" in cli("run", path, "--release", tmp_path, "--out", tmp_path / "out",
                                                   "--executor", "pbs", ok=False).output
    assert not (tmp_path / "out").exists()


@pytest.mark.slurm
def test_a_suite_on_slurm_is_submitted_watched_collected_and_equals_the_local_run(slurm, release, toy_dir, tmp_path):
    path = toy_suite(tmp_path / "suite.yaml", toy_dir, methods="direct", langs="en", suite=f"{RESOURCES}\n",
                     body="    resources: {mem: 3G}\n")
    common = ["--release", release, "--version", VERSION, "--no-report"]
    out = tmp_path / "results"
    shown = cli("run", path, *common, "--out", out, "--store", tmp_path / "scores.sqlite", "--executor", "slurm").output
    assert "toy: pending" in shown or "toy: running" in shown
    assert f"builder eval suite status {out}" in shown
    # Returned at once: nothing is collected before every entry is done.
    refused = cli("collect", out, ok=False).output
    assert "not every entry is done" in " ".join(refused.split())
    # Each entry's resources, the suite's with the entry's own over them, as sbatch is given them (an array for each).
    scripts = [p.read_text() for p in (out / ".jobs" / "jobs").glob("*_submission.sh")]
    assert sorted(re.search(r"#SBATCH --mem=(\S+)", s).group(1) for s in scripts) == ["2G", "3G"]
    assert all("#SBATCH --cpus-per-task=1" in s and "#SBATCH --time=30" in s for s in scripts)

    watched = until_finished(out)
    assert "toy: done" in watched and "toy-eos: done" in watched, watched
    assert "collected" in cli("collect", out).output

    local = tmp_path / "local"
    cli("run", path, *common, "--out", local, "--store", tmp_path / "local.sqlite")  # computed again, its own store
    on_slurm, here = (json.loads((d / "suite.json").read_text()) for d in (out, local))
    assert [(e["name"], e["folder"], e["ok"], e["store"]) for e in on_slurm["entries"]] == \
        [(e["name"], e["folder"], e["ok"], e["store"]) for e in here["entries"]]
    assert [e["ok"] for e in on_slurm["entries"]] == [True, True]
    for name in ("toy", "toy-eos"):
        assert files(out / name) == files(local / name)
        same_results(out / name, local / name)
        assert summary(out / name)["store"] == summary(local / name)["store"]
    # The same leaderboard, whichever executor ran the entries.
    board, board_here = (pd.read_csv(d / "leaderboard.csv") for d in (out, local))
    assert set(board["model"]) == {"toy", "toy-eos"}
    pd.testing.assert_frame_equal(board, board_here, check_exact=False, atol=1e-4)


@pytest.mark.slurm
def test_a_cancelled_job_resumes_when_the_suite_runs_again_and_computes_nothing_stored_again(
        slurm, release, toy_dir, tmp_path):
    # batch_size 1: meta's prompts take long enough for the job to be cancelled while it scores them
    path = write_suite(tmp_path / "suite.yaml", f"""methods: [direct, meta]
langs: [de, en]
{RESOURCES}
models:
  - name: toy
    folder: {toy_dir}
    batch_size: 1
""")
    out, store = tmp_path / "results", tmp_path / "scores.sqlite"
    run = ["run", path, "--release", release, "--version", VERSION, "--no-report", "--out", out, "--store", store,
           "--executor", "slurm"]
    cli(*run)
    direct = out / "toy" / "parts" / "direct" / "done.json"
    deadline = time.monotonic() + 900  # a bound on waiting, not a measure
    while not direct.is_file():
        assert time.monotonic() < deadline and "toy: failed" not in cli("status", out, ok=None).output
        time.sleep(0.2)
    job = json.loads((out / ".jobs" / "entries" / "toy.json").read_text())["attempts"][-1]["job_id"]
    slurm.run("scancel", job)
    before, direct_rows = direct.read_bytes(), store_rows(store)

    shown = until_finished(out)
    assert "toy: failed" in shown and "CANCELLED" in shown and "the same command again resubmits it" in shown
    assert not (out / "toy" / "parts" / "meta" / "done.json").exists()  # cancelled while meta ran

    cli(*run, "--wait")  # the same command again: resubmitted, waited for, collected
    assert json.loads((out / "suite.json").read_text())["entries"][0]["ok"]
    assert direct.read_bytes() == before  # direct's part, saved before the cancel, was not computed again
    counts = summary(out / "toy")["store"]
    direct_n = counts["direct"]["computed"] + counts["direct"]["stored"]
    assert direct_rows == direct_n  # all that was stored by the cancel: direct's sentences
    assert store_rows(store) == direct_n + counts["meta"]["computed"]  # every text computed once across both jobs

    # The suite once more, into another folder, with the same store: every score comes from it.
    again = tmp_path / "again"
    cli("run", path, "--release", release, "--version", VERSION, "--no-report", "--out", again, "--store", store)
    reused = summary(again / "toy")["store"]
    assert {m: (c["computed"], c["stored"]) for m, c in reused.items()} == {
        m: (0, c["computed"] + c["stored"]) for m, c in counts.items()}
    same_results(out / "toy", again / "toy")


@pytest.mark.slurm
def test_an_entry_that_fails_is_named_with_its_log_and_after_two_failures_resubmitted_only_when_asked(
        slurm, release, toy_dir, tmp_path):
    (tmp_path / "not-a-model").mkdir()  # exists (the suite file is accepted) but holds no model: the job fails
    path = write_suite(tmp_path / "suite.yaml", f"""methods: [direct]
langs: [en]
{RESOURCES}
models:
  - name: broken
    folder: ./not-a-model
""")
    out = tmp_path / "results"
    run = ["run", path, "--release", release, "--version", VERSION, "--no-report", "--out", out,
           "--store", tmp_path / "scores.sqlite", "--executor", "slurm"]
    cli(*run)
    shown = until_finished(out)
    assert cli("status", out, ok=False).output == shown  # exit 1: an entry failed
    log = next((out / ".jobs" / "jobs").glob("*_log.err"))
    assert f"log {log}" in shown
    assert "broken: failed" in shown and "no config.json" in shown  # the error, from the log's tail
    assert "EntryFailed" in log.read_text()
    assert "not every entry is done (broken failed)" in " ".join(cli("collect", out, ok=False).output.split())

    # The same command again: submitted once more, and failed again; then only reported, with the way to force a retry.
    twice = " ".join(cli(*run, "--wait", ok=False).output.split())
    assert "broken failed 2 times and is not resubmitted" in twice and "with --retry-failed resubmits it" in twice
    assert "no config.json" in twice  # its log's tail, shown above the message
    logs = set((out / ".jobs" / "jobs").glob("*_log.err"))
    assert len(logs) == 2 and attempts(out, "broken") == 2
    again = " ".join(cli(*run, "--wait", ok=False).output.split())
    assert "broken failed 2 times and is not resubmitted" in again
    assert set((out / ".jobs" / "jobs").glob("*_log.err")) == logs and attempts(out, "broken") == 2  # no third job
    unwaited = " ".join(cli(*run, ok=False).output.split())  # without --wait too: exit 1, nothing submitted
    assert "broken failed 2 times and is not resubmitted" in unwaited and attempts(out, "broken") == 2
    assert "broken: failed" in cli("status", out, ok=False).output
    forced = " ".join(cli(*run, "--retry-failed", "--wait", ok=False).output.split())
    assert attempts(out, "broken") == 3 and len(set((out / ".jobs" / "jobs").glob("*_log.err"))) == 3
    assert "broken failed 3 times and is not resubmitted" in forced
    assert "--retry-failed is for --executor slurm" in " ".join(
        cli(*run[:-2], "--retry-failed", ok=False).output.split())  # a local run runs every entry not done anyway


def attempts(out: Path, name: str) -> int:
    """How many jobs were submitted for the entry, as its record in DIR/.jobs says."""
    return len(json.loads((out / ".jobs" / "entries" / f"{name}.json").read_text())["attempts"])
