"""Jobs on a Slurm cluster through `submitit`, watched from any process through one folder.

`submit(folder, entries)` sends each named entry (a picklable callable and its resources) to Slurm as
a task of a job array (one array per distinct set of resources) and returns at once; `status(folder)`
tells each entry's state from that folder alone, so another process, a later shell or another login
node can watch it; `submit` again resubmits what was killed, preempted, timed out or failed, and stops
resubmitting an entry that failed `MAX_ATTEMPTS` times, reporting it with its log instead (until asked to retry it:
`retry_failed`, once its cause is fixed).

Slurm's accounting (`sacct`, which needs slurmdbd) is not required: an entry is done or failed by the
result file submitit writes when its function returns or raises, pending or running by `squeue`, and
failed without a result (cancelled, killed, out of time or memory) when the job ended without one.
`executor="local"` runs the same wrapped entries in this process, one after the other, writing the same
files, so both paths run the same code and `status` reads both alike.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from filelock import FileLock
from pydantic import Field

from builder.errors import BuilderError, InputError
from builder.files import write_text
from builder.llm.cache import Worker
from builder.records import Record

MAX_ATTEMPTS = 2  # an entry that failed this many times is reported with its log, not submitted again
LOG_TAIL_CHARS = 2000
State = Literal["not submitted", "pending", "running", "done", "failed"]
Executor = Literal["slurm", "local"]
_QUEUED = {"PENDING": "pending", "CONFIGURING": "pending", "REQUEUED": "pending", "REQUEUE_HOLD": "pending",
           "RESV_DEL_HOLD": "pending", "SUSPENDED": "pending", "RUNNING": "running", "COMPLETING": "running",
           "STAGE_OUT": "running", "SIGNALING": "running", "RESIZING": "running"}


class ClusterError(BuilderError):
    """Slurm refused a submission, or cannot be reached."""


class Resources(Record):
    """What one entry's job asks Slurm for; `sbatch` holds further options as `sbatch` spells them without `--`."""

    gpus: int = Field(0, ge=0)
    cpus: int = Field(1, ge=1)
    mem: str | None = Field(None, pattern=r"^\d+[KMGT]?B?$")  # `16G`, as sbatch --mem takes it
    time: str | None = Field(None, pattern=r"^(\d+-)?\d+(:\d+){0,2}$")  # `90`, `2:00:00`, `1-12:00:00`
    partition: str | None = None
    account: str | None = None
    sbatch: dict[str, str] = Field(default_factory=dict)  # {"constraint": "a100", "qos": "high"}

    def minutes(self) -> int | None:
        """`time` in whole minutes (Slurm's forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S)."""
        if self.time is None:
            return None
        days, _, rest = self.time.rpartition("-")
        parts = [int(p) for p in rest.split(":")]
        if days:
            h, m, s = (parts + [0, 0])[:3]
        else:
            h, m, s = {1: [0, parts[0], 0], 2: [0, *parts], 3: parts}[len(parts)]
        return max(1, math.ceil(((int(days or 0) * 24 + h) * 60 + m) + s / 60))

    def parameters(self) -> dict[str, Any]:
        """submitit's SlurmExecutor parameters for these resources."""
        params: dict[str, Any] = {"cpus_per_task": self.cpus}
        if self.gpus:
            params["gpus_per_node"] = self.gpus
        for key, value in (("mem", self.mem), ("time", self.minutes()), ("partition", self.partition),
                           ("account", self.account)):
            if value is not None:
                params[key] = value
        if self.sbatch:
            params["additional_parameters"] = dict(self.sbatch)
        return params


@dataclass(frozen=True)
class Entry:
    """One job: `run()` computes the entry (it should resume from what an earlier attempt stored).

    `run` is pickled into the job folder: it carries no secret (an API key, a password); the job reads those
    from the environment `sbatch` exports to it.
    """

    name: str
    run: Callable[[], Any]
    resources: Resources = Resources()


class Attempt(Record):
    executor: Executor
    job_id: str
    host: str | None = None  # a local run's machine and process: running while that process is
    pid: int | None = None


class EntryRecord(Record):
    """What `submit` remembers of an entry, in `FOLDER/entries/<name>.json`."""

    name: str
    attempts: list[Attempt] = Field(default_factory=list)


class EntryState(Record):
    name: str
    state: State
    job_id: str | None = None
    attempts: int = 0
    detail: str = ""  # why it failed (the exception, or the job's end such as CANCELLED), or that it is not resubmitted
    log: str | None = None  # the attempt's log file
    log_tail: str = ""

    @property
    def finished(self) -> bool:
        """Done, or failed and not to be resubmitted unless asked (`submit(retry_failed=True)`)."""
        return self.state == "done" or (self.state == "failed" and self.attempts >= MAX_ATTEMPTS)


class _Task:
    """The callable submitit pickles: runs the entry under its name (its log names it first)."""

    def __init__(self, name: str, run: Callable[[], Any]) -> None:
        self.name, self.run = name, run

    def __call__(self) -> Any:
        print(f"builder.cluster: entry {self.name}", flush=True)
        return self.run()


def _paths(folder: Path, job_id: str):
    from submitit.core.utils import JobPaths

    return JobPaths(folder / "jobs", job_id=job_id, task_id=0)


def _record(folder: Path, name: str) -> EntryRecord:
    path = folder / "entries" / f"{name}.json"
    return EntryRecord.model_validate_json(path.read_text()) if path.is_file() else EntryRecord(name=name)


def _records(folder: Path) -> list[EntryRecord]:
    return [EntryRecord.model_validate_json(p.read_text()) for p in sorted((folder / "entries").glob("*.json"))]


def _save(folder: Path, record: EntryRecord) -> None:
    (folder / "entries").mkdir(parents=True, exist_ok=True)
    write_text(folder / "entries" / f"{record.name}.json", record.model_dump_json(indent=1))


def _queue() -> dict[str, str]:
    """Slurm's state of this user's jobs it still knows (array tasks one per line: `123_4`), by job id."""
    if shutil.which("squeue") is None:
        return {}
    done = subprocess.run(["squeue", "--me", "--noheader", "--array", "--states=all", "--format=%i|%T"],
                          capture_output=True, text=True, timeout=60)
    if done.returncode:
        raise ClusterError(f"squeue failed: {done.stderr.strip()}")
    return dict(line.split("|", 1) for line in done.stdout.split())


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-LOG_TAIL_CHARS:] if path.is_file() else ""


def _state(folder: Path, record: EntryRecord, queue: dict[str, str]) -> EntryState:
    if not record.attempts:
        return EntryState(name=record.name, state="not submitted")
    from submitit.core.utils import pickle_load

    job_id = record.attempts[-1].job_id
    paths = _paths(folder, job_id)
    common = dict(name=record.name, job_id=job_id, attempts=len(record.attempts), log=str(paths.stderr))
    if paths.result_pickle.is_file():
        outcome, value = pickle_load(paths.result_pickle)
        if outcome == "success":
            return EntryState(state="done", **common)
        detail = str(value).strip().splitlines()[-1] if str(value).strip() else "the job raised"
        return EntryState(state="failed", detail=detail, log_tail=_tail(paths.stderr), **common)
    slurm = queue.get(job_id)
    if slurm in _QUEUED:
        return EntryState(state=_QUEUED[slurm], **common)
    attempt = record.attempts[-1]
    if attempt.executor == "local":
        if not Worker(job_id, attempt.host or "", attempt.pid or 0).gone():
            return EntryState(state="running", **common)
        detail = "the local run ended without a result (its process was killed)"
    else:
        detail = f"the job ended {slurm or 'and left the queue'} without a result"
    return EntryState(state="failed", detail=detail, log_tail=_tail(paths.stderr) or _tail(paths.stdout), **common)


def status(folder: Path) -> list[EntryState]:
    """Each submitted entry's state, from `folder` and `squeue` alone (any process, any login node)."""
    folder = Path(folder)
    records = _records(folder)
    queue = _queue() if any(a.executor == "slurm" for r in records for a in r.attempts[-1:]) else {}
    return [_state(folder, r, queue) for r in records]


def result(folder: Path, name: str) -> Any:
    """What a done entry's `run()` returned."""
    from submitit.core.utils import pickle_load

    record = _record(Path(folder), name)
    if not record.attempts:
        raise KeyError(f"{name} was never submitted to {folder}")
    outcome, value = pickle_load(_paths(Path(folder), record.attempts[-1].job_id).result_pickle)
    if outcome != "success":
        raise ClusterError(f"{name} failed: {value}")
    return value


def submit(folder: Path, entries: Sequence[Entry], *, executor: Executor = "slurm",
           retry_failed: bool = False) -> list[EntryState]:
    """Submit every entry that is neither done, queued, running, nor failed `MAX_ATTEMPTS` times (with `retry_failed`,
    also one that did: once more, its cause fixed); return all states.

    On Slurm this returns once the arrays are queued; locally it returns once every entry has run.
    Two `submit` calls on one folder at once submit each entry once (a lock on the folder).
    """
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise InputError(f"entry names repeat: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".submit.lock")):
        records = {e.name: _record(folder, e.name) for e in entries}
        queue = _queue() if executor == "slurm" or any(a.executor == "slurm" for r in records.values()
                                                       for a in r.attempts[-1:]) else {}
        states = {name: _state(folder, r, queue) for name, r in records.items()}
        todo = [e for e in entries if states[e.name].state == "not submitted"
                or (states[e.name].state == "failed" and (retry_failed or not states[e.name].finished))]
        if executor == "local":
            for e in todo:
                _run_local(folder, e, records[e.name])
        else:
            if todo and shutil.which("sbatch") is None:
                raise ClusterError("no `sbatch` here: --executor slurm submits from a Slurm login node (or use --executor local)")
            for resources, group in _by_resources(todo):
                _submit_array(folder, resources, group, records)
        queue = _queue() if executor == "slurm" else {}
        return [_state(folder, _record(folder, e.name), queue) for e in entries]


def _by_resources(entries: Sequence[Entry]) -> list[tuple[Resources, list[Entry]]]:
    groups: dict[str, tuple[Resources, list[Entry]]] = {}
    for e in entries:
        groups.setdefault(e.resources.model_dump_json(), (e.resources, []))[1].append(e)
    return list(groups.values())


def _submit_array(folder: Path, resources: Resources, entries: list[Entry], records: dict[str, EntryRecord]) -> None:
    import submitit

    executor = submitit.SlurmExecutor(folder=folder / "jobs", max_num_timeout=0)
    name = entries[0].name if len(entries) == 1 else f"{entries[0].name}+{len(entries) - 1}"
    executor.update_parameters(job_name=f"builder-{name}", use_srun=False, **resources.parameters())
    try:
        jobs = executor.submit_array([_Task(e.name, e.run) for e in entries])
    except subprocess.CalledProcessError as exc:
        raise ClusterError(f"sbatch refused the job array for {', '.join(e.name for e in entries)}: "
                           f"{(exc.stderr or exc.output or b'').decode(errors='replace').strip()}") from exc
    except submitit.core.utils.FailedJobError as exc:
        raise ClusterError(f"sbatch refused the job array for {', '.join(e.name for e in entries)}: {exc}") from exc
    for e, job in zip(entries, jobs):
        record = records[e.name]
        _save(folder, record.model_copy(update={"attempts": [*record.attempts, Attempt(executor="slurm", job_id=job.job_id)]}))


def _run_local(folder: Path, entry: Entry, record: EntryRecord) -> None:
    """Run the entry here, writing its result (or its traceback) and its log where a Slurm task writes them."""
    from submitit.core.utils import cloudpickle_dump

    here = Worker.current()
    attempt = Attempt(executor="local", job_id=f"local-{here.token[:12]}", host=here.host, pid=here.pid)
    job_id = attempt.job_id
    _save(folder, record.model_copy(update={"attempts": [*record.attempts, attempt]}))
    paths = _paths(folder, job_id)
    paths.folder.mkdir(parents=True, exist_ok=True)
    try:
        outcome = ("success", _Task(entry.name, entry.run)())
    except Exception:  # the entry's failure is its result, reported by `status` as a Slurm task's would be
        trace = traceback.format_exc()
        paths.stderr.write_text(trace)
        outcome = ("error", trace)
    tmp = paths.result_pickle.with_name(f".{paths.result_pickle.name}.tmp")
    cloudpickle_dump(outcome, tmp)
    tmp.replace(paths.result_pickle)


def wait(folder: Path, *, poll_s: float = 5.0, timeout_s: float | None = None) -> list[EntryState]:
    """Poll `status` until every entry is done or failed (a failed one is not resubmitted here: `submit` does)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        states = status(folder)
        if all(s.state in ("done", "failed") for s in states):
            return states
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"jobs in {folder} still running after {timeout_s} s: "
                               + ", ".join(f"{s.name} {s.state}" for s in states if s.state not in ("done", "failed")))
        time.sleep(poll_s)


def describe(states: Sequence[EntryState]) -> str:
    """One line per entry, and a failed entry's log tail under it: what `status` shows a person."""
    lines = []
    for s in states:
        job = f" (job {s.job_id}, attempt {s.attempts})" if s.job_id else ""
        lines.append(f"{s.name}: {s.state}{job}" + (f": {s.detail}" if s.detail else ""))
        if s.state == "failed":
            if s.attempts >= MAX_ATTEMPTS:
                lines.append(f"  failed {s.attempts} times: not resubmitted; see {s.log}; once its cause is fixed, "
                             "the same command with --retry-failed resubmits it")
            else:
                lines.append(f"  log {s.log}; the same command again resubmits it")
            lines.extend("  | " + ln for ln in s.log_tail.rstrip().splitlines()[-15:])
    return "\n".join(lines)

