"""`builder.cluster` against the real single-node Slurm of the `slurm` fixture (and its local executor here):
job arrays with per-entry resources, state read from the folder by another process, a cancelled job
resubmitted while a done one is not, and a job that fails twice reported with its log, not retried again."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cloudpickle
import pytest

from builder import cluster
from builder.cluster import Entry, Resources

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the jobs' functions travel with them (tests/ is no package)


def _answer(value: int, gate: Path | None = None, mark: Path | None = None) -> int:
    """A job: waits for `gate` (if given), notes that it ran in `mark`, returns `value` squared."""
    if mark is not None:
        with mark.open("a") as f:
            f.write(f"{value}\n")
    while gate is not None and not gate.exists():
        time.sleep(0.2)
    return value * value


def _fail(message: str) -> None:
    raise RuntimeError(message)


def entry(name: str, *args, resources: Resources = Resources(), **kw) -> Entry:
    return Entry(name, lambda: _answer(*args, **kw), resources)


def _until(what: str, done, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s  # a bound on waiting, not a measure
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.2)


def _states(folder: Path) -> dict[str, cluster.EntryState]:
    return {s.name: s for s in cluster.status(folder)}


@pytest.mark.slurm
def test_entries_go_as_one_array_per_resources_and_any_process_reads_their_state(slurm, tmp_path):
    gate = tmp_path / "gate"
    small = Resources(cpus=1, mem="200M", time="0:10:00")
    other = Resources(cpus=1, mem="300M", time="15", sbatch={"comment": "entry-c"})
    entries = [entry("a", 2, gate, resources=small), entry("b", 3, gate, resources=small), entry("c", 4, gate, resources=other)]
    submitted = {s.name: s for s in cluster.submit(tmp_path / "run", entries)}
    # Returned at once: nothing can be done before the gate opens.
    assert {s.state for s in submitted.values()} <= {"pending", "running"}, cluster.describe(submitted.values())
    ids = {n: s.job_id for n, s in submitted.items()}
    assert ids["a"].split("_")[0] == ids["b"].split("_")[0] != ids["c"].split("_")[0]  # one array per set of resources
    scripts = {p.read_text() for p in (tmp_path / "run" / "jobs").glob("*_submission.sh")}
    assert len(scripts) == 2
    small_script = next(s for s in scripts if "--mem=200M" in s)
    other_script = next(s for s in scripts if "--mem=300M" in s)
    assert "#SBATCH --array=0-1%2" in small_script and "#SBATCH --time=10" in small_script
    assert "#SBATCH --comment=entry-c" in other_script and "#SBATCH --time=15" in other_script
    # A second submit while they are queued or running submits nothing again.
    assert {s.name: s.job_id for s in cluster.submit(tmp_path / "run", entries)} == ids
    gate.touch()
    cluster.wait(tmp_path / "run", poll_s=0.5, timeout_s=300)
    # Another process (a later shell, a login node) sees the same states from the folder alone.
    seen = subprocess.run([sys.executable, "-c", "import sys, json; from builder import cluster; "
                           "print(json.dumps({s.name: s.state for s in cluster.status(sys.argv[1])}))", str(tmp_path / "run")],
                          capture_output=True, text=True, check=True)
    assert json.loads(seen.stdout) == {"a": "done", "b": "done", "c": "done"}
    assert [cluster.result(tmp_path / "run", n) for n in "abc"] == [4, 9, 16]


@pytest.mark.slurm
def test_a_cancelled_job_is_resubmitted_by_the_same_call_and_a_done_one_is_not(slurm, tmp_path):
    folder, gate, mark = tmp_path / "run", tmp_path / "gate", tmp_path / "ran"
    entries = [entry("quick", 5, mark=mark), entry("slow", 6, gate, mark=mark)]
    cluster.submit(folder, entries)
    _until("quick done and slow running its function", lambda: [s.state for s in cluster.status(folder)] == ["done", "running"]
           and "6" in mark.read_text().split())
    first = _states(folder)["slow"].job_id
    slurm.run("scancel", first)
    _until("slow cancelled", lambda: _states(folder)["slow"].state == "failed")
    cancelled = _states(folder)["slow"]
    assert "CANCELLED" in cancelled.detail and cancelled.attempts == 1
    assert "resubmits it" in cluster.describe([cancelled])
    gate.touch()
    again = {s.name: s for s in cluster.submit(folder, entries)}
    assert again["slow"].job_id != first and again["slow"].attempts == 2
    assert again["quick"].attempts == 1 and again["quick"].state == "done"
    cluster.wait(folder, poll_s=0.5, timeout_s=300)
    assert cluster.result(folder, "slow") == 36
    assert sorted(mark.read_text().split()) == ["5", "6", "6"]  # quick ran once; slow twice (cancelled, then resubmitted)


@pytest.mark.slurm
def test_a_job_that_fails_twice_is_reported_with_its_log_and_not_submitted_again(slurm, tmp_path):
    folder = tmp_path / "run"
    entries = [Entry("broken", lambda: _fail("no such model: /models/missing"), Resources())]
    cluster.submit(folder, entries)
    once = cluster.wait(folder, poll_s=0.5, timeout_s=300)[0]
    assert once.state == "failed" and once.attempts == 1 and "no such model: /models/missing" in once.detail
    assert Path(once.log).is_file() and "no such model" in once.log_tail
    twice = cluster.submit(folder, entries)[0]
    assert twice.attempts == 2 and twice.job_id != once.job_id
    twice = cluster.wait(folder, poll_s=0.5, timeout_s=300)[0]
    assert twice.state == "failed" and twice.finished
    third = cluster.submit(folder, entries)[0]
    assert third.job_id == twice.job_id and third.attempts == 2  # not submitted a third time
    shown = cluster.describe([third])
    assert f"failed 2 times: not resubmitted; see {twice.log}" in shown and "no such model: /models/missing" in shown
    assert "with --retry-failed resubmits it" in shown
    forced = cluster.submit(folder, entries, retry_failed=True)[0]  # asked to: once more
    assert forced.attempts == 3 and forced.job_id != twice.job_id
    assert cluster.wait(folder, poll_s=0.5, timeout_s=300)[0].finished
    assert cluster.submit(folder, entries)[0].attempts == 3


def test_the_local_executor_runs_the_same_entries_here_and_status_reads_them_alike(tmp_path):
    folder, mark, gate = tmp_path / "run", tmp_path / "ran", tmp_path / "gate"
    entries = [entry("fine", 7, gate, mark=mark), Entry("broken", lambda: _fail("bad input"))]
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(cluster.submit, folder, entries, executor="local")
        _until("fine running", lambda: mark.is_file())
        assert {s.name: s.state for s in cluster.status(folder)} == {"fine": "running"}  # its process is alive
        gate.touch()
        states = {s.name: s for s in running.result()}
    assert states["fine"].state == "done" and cluster.result(folder, "fine") == 49
    assert states["broken"].state == "failed" and "RuntimeError: bad input" in states["broken"].detail
    assert "bad input" in Path(states["broken"].log).read_text()
    cluster.submit(folder, entries, executor="local")  # the done entry is not run again; the failed one once more
    assert mark.read_text().split() == ["7"]
    assert _states(folder)["broken"].attempts == 2 and _states(folder)["broken"].finished


def test_resources_are_checked_and_times_read_as_slurm_writes_them():
    assert [Resources(time=t).minutes() for t in ("90", "1:30", "2:00:00", "1-12", "1-00:30:00")] == [90, 2, 120, 2160, 1470]
    with pytest.raises(ValueError, match="mem"):
        Resources(mem="lots")
    with pytest.raises(ValueError, match="repeat"):
        cluster.submit(Path("/nonexistent-never-made"), [entry("x", 1), entry("x", 2)], executor="local")
