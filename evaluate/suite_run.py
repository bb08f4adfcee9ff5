"""Evaluating a suite (`evaluate.suite`): every entry into DIR/<name>/, N at a time, through one score store.

`evaluate_entry(EntryJob)` evaluates one entry into its results folder exactly as `builder eval run`
does (so `eval report` and `eval gate` work on it); its argument is one typed, picklable record, so a
local process pool (`run_suite`, `--jobs N`) and a cluster job alike call it. A re-run resumes: an
entry's finished methods are reused from its folder, and every text already scored, by any run on any
release, comes from the store. `DIR/suite.json` lists the entries, their folders and how each ended,
for the leaderboard to read.

`submit_suite` sends every entry to Slurm as a job (`builder.cluster`: one array per set of resources) whose
task, `entry_task`, calls `evaluate_entry` as the local run does; `suite_status` reads the jobs' states from
DIR/.jobs, and `collect` writes DIR/suite.json from their outcomes once every entry is done.

`plan_suite` is the dry run: each entry's methods run against the store alone (a text it holds
gets its stored value, a missing one is counted and gets a placeholder), so the texts that a method
derives from earlier replies (self-translation's answers to its own translations) are found wherever
those replies are stored; a short calibration on the model measures its speed. Nothing is written.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from builder import cluster, releases
from builder.errors import BuilderError, InputError
from builder.files import write_text
from builder.llm.config import LLMSettings
from builder.records import Record
from evaluate.backends import EndpointGenerator, TransformersGenerator, endpoint_info
from evaluate.data import ReleaseData, load_release
from evaluate.endpoint_scoring import EndpointScorer
from evaluate.gates import load_rules
from evaluate.leaderboard import build, suite_entries, write
from evaluate.methods import Context, EvalOptions, resolve
from evaluate.models import LoadedModel, load_model
from evaluate.run import check_needs, endpoint_bos, run_evaluation
from evaluate.scoring import ROW_TOKENS, Scorer, TokenScores, pack
from evaluate.store import (
    ScoreStore,
    StoredGenerator,
    StoredScorer,
    model_identity,
    said,
    store_url,
    text_key,
)
from evaluate.suite import ModelEntry, Suite

SUITE_FILE = "suite.json"
JOBS_DIR = ".jobs"  # DIR/.jobs: the cluster jobs' folder (builder.cluster) and what was submitted
SUBMITTED = "suite-submitted.json"
CALIBRATION_TEXTS = 64  # texts scored, and prompts answered, to measure a model's speed for a dry run
CALIBRATION_PROMPTS = 4


class EntryJob(Record):
    """One suite entry to evaluate into `out_dir / entry.name`."""

    suite: Suite
    entry: ModelEntry
    release: str
    version: str  # X.Y.Z (resolved once for every entry)
    out_dir: Path
    store: str  # the store's URL
    device: str | None = None
    threads: int | None = Field(None, ge=1)  # torch threads for a CPU job (cores shared among jobs)
    report: bool = True


class EntryOutcome(Record):
    name: str
    folder: Path
    ok: bool
    error: str | None = None
    store: dict[str, dict[str, int]] = {}  # per method: texts computed, stored, unstored
    seconds: float = 0.0


def _options(suite: Suite, entry: ModelEntry) -> EvalOptions:
    return EvalOptions(bos_policy=entry.bos, prompt_variant=suite.prompt_variant, sample_m2c=suite.sample_m2c,
                       sample_selftranslate=suite.sample_selftranslate, sample_consistency=suite.sample_consistency)


def _load(entry: ModelEntry, device: str | None, log=lambda message: None) -> tuple[LoadedModel | None, LLMSettings | None]:
    if not entry.local:
        return None, LLMSettings(base_url=entry.endpoint, api_key=os.environ.get("OPENAI_API_KEY") or "not-needed",
                                 model=entry.served_model, concurrency=entry.concurrency)
    return load_model(entry.path(), device=entry.device or device, dtype=entry.dtype, batch_size=entry.batch_size,
                      revision=entry.revision, log=log), None


def _release(job_release: str, version: str, suite: Suite) -> ReleaseData:
    return load_release(job_release, version, suite.langs, m2c="m2c" in suite.methods)


def evaluate_entry(job: EntryJob, progress: Callable[[str, int, int], None] | None = None) -> EntryOutcome:
    """Evaluate one entry into its folder (resuming what is there) and write its report. A `BuilderError` (a
    model that cannot load, an endpoint that refuses) is the entry's outcome; anything else is a bug and raised."""
    started, folder = time.monotonic(), job.out_dir / job.entry.name
    if job.threads:
        torch.set_num_threads(job.threads)
    try:
        methods = check_needs(resolve(job.suite.methods), local=job.entry.local, score_endpoint=job.entry.score_endpoint)
        data = _release(job.release, job.version, job.suite)
        loaded, settings = _load(job.entry, job.device)
        with ScoreStore.open(job.store) as store:
            results = run_evaluation(data.pairs, data.dataset, loaded, methods, folder, _options(job.suite, job.entry),
                                     progress, m2c=data.m2c, endpoint=settings, score_endpoint=job.entry.score_endpoint,
                                     store=store)
        if job.report:
            from evaluate.report import build_report

            build_report(folder)
    except BuilderError as exc:
        return EntryOutcome(name=job.entry.name, folder=folder, ok=False, error=str(exc),
                            seconds=time.monotonic() - started)
    return EntryOutcome(name=job.entry.name, folder=folder, ok=True, store=results.store,
                        seconds=time.monotonic() - started)


def _quiet_entry(job: EntryJob) -> EntryOutcome:
    """A pool worker's entry: progress as lines on stderr, each naming the entry."""
    import sys

    shown: dict[str, int] = {}

    def show(task: str, done: int, total: int) -> None:
        step = 10 if not total else done * 10 // total
        if step > shown.get(task, -1):
            shown[task] = step
            print(f"{job.entry.name}: {task}: {done}/{total}", file=sys.stderr, flush=True)

    return evaluate_entry(job, show)


class EntryFailed(BuilderError):
    """An entry's evaluation ended in an error: raised in its job, so that Slurm and `suite status` see it fail."""


def entry_task(job: EntryJob) -> EntryOutcome:
    """A cluster job's work: one entry evaluated (its progress in the job's log); an entry that failed raises."""
    outcome = _quiet_entry(job)
    if not outcome.ok:
        raise EntryFailed(f"{outcome.name}: {outcome.error}")
    return outcome


class Submitted(Record):
    """What `submit_suite` sent, in DIR/.jobs/suite-submitted.json: what `collect` writes suite.json from."""

    suite: Suite
    release: str
    version: str
    previous: Path | None = None


def submit_suite(suite: Suite, release: str, version: str, out_dir: Path, *, store: str | None = None,
                 previous: Path | None = None, report: bool = True, executor: cluster.Executor = "slurm",
                 retry_failed: bool = False) -> list[cluster.EntryState]:
    """Every entry as a job with its resources (returns once queued); an entry done is not submitted again, one
    cancelled, killed or failed is (up to `cluster.MAX_ATTEMPTS`, or once more with `retry_failed`), and resumes from
    its folder and the store."""
    check_suite(suite)
    version = resolved_version(release, version)
    folder = Path(out_dir) / JOBS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    write_text(folder / SUBMITTED, Submitted(suite=suite, release=str(release), version=version,
                                             previous=previous).model_dump_json(indent=1))
    entries = []
    for job in jobs_for(suite, release, version, out_dir, store, report=report):
        resources = job.entry.resources
        if job.entry.local and not resources.gpus:  # a CPU job: torch's threads are the cores it asked for
            job = job.model_copy(update={"threads": resources.cpus})
        entries.append(cluster.Entry(job.entry.name, functools.partial(entry_task, job), resources))
    return cluster.submit(folder, entries, executor=executor, retry_failed=retry_failed)


def _submitted(out_dir: Path) -> Submitted:
    path = Path(out_dir) / JOBS_DIR / SUBMITTED
    if not path.is_file():
        raise InputError(f"{out_dir}: no suite was submitted there (builder eval suite run … --executor slurm --out {out_dir})")
    return Submitted.model_validate_json(path.read_text(encoding="utf-8"))


def suite_status(out_dir: Path) -> list[cluster.EntryState]:
    """Each submitted entry's state (pending, running, done, failed with its log's tail), in the suite's order."""
    names = [m.name for m in _submitted(out_dir).suite.models]
    states = {s.name: s for s in cluster.status(Path(out_dir) / JOBS_DIR)}
    return [states.get(n, cluster.EntryState(name=n, state="not submitted")) for n in names]


def collect(out_dir: Path) -> Path:
    """DIR/suite.json from the outcomes of the submitted entries' jobs; refused unless every entry is done."""
    submitted = _submitted(out_dir)
    if waiting := [s for s in suite_status(out_dir) if s.state != "done"]:
        raise InputError(f"{out_dir}: not every entry is done ({', '.join(f'{s.name} {s.state}' for s in waiting)}); "
                         f"see builder eval suite status {out_dir}")
    outcomes = [cluster.result(Path(out_dir) / JOBS_DIR, m.name) for m in submitted.suite.models]
    return finish(Path(out_dir), submitted.suite, submitted.release, submitted.version, submitted.previous, outcomes)


def resolved_version(release: str, version: str) -> str:
    """X.Y.Z for `latest`, so that every entry evaluates the same version even if one is published meanwhile."""
    return str(releases.manifest(release, version).get("version", version))


def check_suite(suite: Suite) -> None:
    """Every entry's methods served by its backend: refused before anything is loaded."""
    for entry in suite.models:
        try:
            check_needs(resolve(suite.methods), local=entry.local, score_endpoint=entry.score_endpoint)
        except InputError as exc:
            raise InputError(f"{suite.source}: model {entry.name}: {exc}") from exc


def jobs_for(suite: Suite, release: str, version: str, out_dir: Path, store: str | None, *, jobs: int = 1,
             devices: list[str] | None = None, report: bool = True) -> list[EntryJob]:
    """One job per entry: devices given round-robin (an entry's own `device` first), and with several jobs at once
    on CPUs, each job an equal share of the cores this process may run on (a Slurm allocation's or `taskset`'s, not
    the machine's), shared by the jobs that can run at once."""
    url = store_url(store)
    at_once = min(jobs, len(suite.models))
    threads = max(1, available_cores() // at_once) if at_once > 1 else None
    out = []
    for i, entry in enumerate(suite.models):
        device = entry.device or (devices[i % len(devices)] if devices else None)
        cpu = device is None and not torch.cuda.is_available() or (device or "").startswith("cpu")
        out.append(EntryJob(suite=suite, entry=entry, release=str(release), version=version, out_dir=Path(out_dir),
                            store=url, device=device, threads=threads if cpu and entry.local else None, report=report))
    return out


def available_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_suite(suite: Suite, release: str, version: str, out_dir: Path, *, store: str | None = None, jobs: int = 1,
              devices: list[str] | None = None, previous: Path | None = None, report: bool = True,
              progress: Callable[[str, int, int], None] | None = None,
              log: Callable[[str], None] = lambda message: None) -> list[EntryOutcome]:
    """Every entry into DIR/<name>/ (`jobs` at a time, each in a process of its own), then DIR/suite.json."""
    check_suite(suite)
    version = resolved_version(release, version)
    todo = jobs_for(suite, release, version, out_dir, store, jobs=jobs, devices=devices, report=report)
    if jobs == 1:
        outcomes = []
        for job in todo:
            log(f"{job.entry.name}: evaluating into {job.out_dir / job.entry.name}")
            outcomes.append(evaluate_entry(job, progress))
            log(_said(outcomes[-1]))
    else:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
            futures = [pool.submit(_quiet_entry, job) for job in todo]
            outcomes = []
            for future in futures:
                outcomes.append(future.result())
                log(_said(outcomes[-1]))
    finish(Path(out_dir), suite, release, version, previous, outcomes)
    return outcomes


def _said(outcome: EntryOutcome) -> str:
    if not outcome.ok:
        return f"{outcome.name}: FAILED: {outcome.error}"
    return f"{outcome.name}: done in {outcome.seconds:.0f} s ({said(outcome.store)})"


def finish(out_dir: Path, suite: Suite, release: str, version: str, previous: Path | None,
           outcomes: list[EntryOutcome]) -> Path:
    """DIR/suite.json, then the leaderboard of the entries that finished (against `previous`'s, by name), the same
    whichever executor ran them; the leaderboard page's path (suite.json's when no entry finished)."""
    listed = write_suite_file(out_dir, suite, release, version, previous, outcomes)
    entries = suite_entries(out_dir)
    if not entries:
        return listed
    board = build(entries, suite_entries(previous) if previous else None, load_rules(suite.gates), links_from=out_dir)
    return write(out_dir, board)["html"]


def write_suite_file(out_dir: Path, suite: Suite, release: str, version: str, previous: Path | None,
                     outcomes: list[EntryOutcome]) -> Path:
    """DIR/suite.json: the suite, the release, and each entry's folder and outcome (the leaderboard's input)."""
    path = out_dir / SUITE_FILE
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps({
        "suite": str(suite.source) if suite.source else None, "release": str(release), "version": version,
        "previous": str(previous) if previous else None, "gates": str(suite.gates) if suite.gates else None,
        "methods": suite.methods, "langs": suite.langs,
        "entries": [{**o.model_dump(mode="json"), "folder": o.folder.name, "entry": e.model_dump(mode="json")}
                    for o, e in zip(outcomes, suite.models)],
    }, ensure_ascii=False, indent=1))
    return path


# -- the dry run ----------------------------------------------------------------------------------------------


class MethodCost(Record):
    """What one method of one entry would compute: texts not in the store, and their size."""

    entry: str
    method: str
    kind: str  # scores, replies, hidden states (neuro: recomputed every run)
    texts: int  # asked for
    missing: int  # not in the store: to compute
    positions: int  # decoder positions of the missing texts (a local model; packed as scoring packs them)
    requests: int = 0  # requests to an endpoint
    characters: int = 0  # characters sent to an endpoint (its tokenizer is the server's)
    estimated_s: float | None = None
    device: str


@dataclass
class _Planner:
    """A scorer and a generator that answer from the store only: a missing text is counted (with its decoder
    positions) and answered with a placeholder, so a method runs through without its model."""

    store: ScoreStore | None
    scorer: StoredScorer | None
    generator: StoredGenerator
    asked: dict[str, list] = field(default_factory=lambda: {"scores": [], "replies": []})

    @property
    def setup(self):
        return self.scorer.setup

    def score(self, requests, progress=None):
        keys = self.scorer.keys(requests)
        have = self.store.get_scores(self.scorer.config_key, list(keys.values())) if self.store is not None else {}
        empty = TokenScores(np.zeros(0, np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64))
        for r, k in keys.items():
            self.asked["scores"].append((r, k in have))
        return {r: have.get(k, empty) for r, k in keys.items()}

    def generate(self, prompts, *, max_new_tokens, stage, lang=None, temperature=None, seed=None, progress=None):
        unique = list(dict.fromkeys(prompts))
        keys = {p: text_key(p, max_new_tokens) for p in unique}
        have = (self.store.get_replies(self.generator.config_key, list(keys.values()))
                if self.store is not None and not temperature else {})
        for p, k in keys.items():
            self.asked["replies"].append(((p, max_new_tokens), k in have))
        return [have.get(keys[p], "") for p in prompts]


def packed_positions(scorer: Scorer, requests: list[tuple[str, str]]) -> int:
    """The decoder positions that scoring `requests` runs (packed as `Scorer.score` packs them; padding aside)."""
    if not requests:
        return 0
    inputs = [(scorer.prefix() + t.ids)[:-1] for t in scorer.tokenize(requests)]
    rows = pack(inputs, max(ROW_TOKENS, 2 * max(map(len, inputs))) if scorer.packs else 0).rows
    return sum(len(r.tokens) for r in rows)


def _calibrate(loaded: LoadedModel | None, options: EvalOptions, texts: list[tuple[str, str]],
               prompts: list[tuple[str, int]]) -> tuple[float | None, float | None]:
    """(seconds per decoder position scoring, seconds per prompt generating), measured on a few of the missing
    texts; nothing is stored."""
    if loaded is None:
        return None, None
    per_position = per_prompt = None
    if texts:
        scorer = Scorer(loaded, options.bos_policy)
        scorer.score(texts[:2])  # warm up (the probes of packing and of the output layer)
        sample, t0 = texts[:CALIBRATION_TEXTS], time.perf_counter()
        scorer.score(sample)
        per_position = (time.perf_counter() - t0) / max(packed_positions(scorer, sample), 1)
    if prompts:
        generator, t0 = TransformersGenerator(loaded), time.perf_counter()
        sample = prompts[:CALIBRATION_PROMPTS]
        generator.generate([p for p, _ in sample], max_new_tokens=max(n for _, n in sample), stage="calibration")
        per_prompt = (time.perf_counter() - t0) / len(sample)
    return per_position, per_prompt


def plan_entry(suite: Suite, entry: ModelEntry, data: ReleaseData, store: ScoreStore | None,
               device: str | None = None) -> list[MethodCost]:
    """What evaluating `entry` would compute, per method, given what the store holds; writes nothing."""
    options = _options(suite, entry)
    methods = check_needs(resolve(suite.methods), local=entry.local, score_endpoint=entry.score_endpoint)
    loaded, settings = _load(entry, device)
    if loaded is not None:
        inner_scorer, inner_gen, info = Scorer(loaded, options.bos_policy), TransformersGenerator(loaded), loaded.info
        reply_format, where = inner_gen, f"{info.device} ({info.dtype})"

        def tokens(text: str) -> int:
            return len(loaded.tokenizer(text, add_special_tokens=False)["input_ids"])
    else:
        inner_scorer = EndpointScorer(settings, endpoint_bos(options.bos_policy)) if entry.score_endpoint else None
        inner_gen, info, reply_format, where, tokens = EndpointGenerator(settings, Path(os.devnull)), endpoint_info(settings), None, settings.endpoint, None
    identity = model_identity(info)
    scorer = StoredScorer(inner_scorer, store, identity) if inner_scorer is not None else None
    generator = StoredGenerator(inner_gen, store, identity, reply_format.prompt_format if reply_format else None)
    planner = _Planner(store, scorer, generator)
    languages = {lang.code: lang for lang in data.dataset.languages}
    ctx = Context(languages, options, Path(os.devnull), scorer=planner if scorer else None, generator=planner,
                  hidden=None, reply_format=reply_format, m2c=data.m2c)
    costs, pending = [], []
    for method in methods:
        if method.name == "neuro":
            texts = list(pd.unique(pd.concat([data.pairs["acceptable_sentence"], data.pairs["unacceptable_sentence"]])))
            n_tok = sum(tokens(t) + 1 for t in texts) if tokens else 0
            costs.append(MethodCost(entry=entry.name, method="neuro", kind="hidden states (recomputed every run)",
                                    texts=len(texts), missing=len(texts), positions=2 * n_tok, device=where))
            continue
        planner.asked = {"scores": [], "replies": []}
        ctx.outputs[method.name] = method.run(ctx, data.pairs)
        scored, replied = planner.asked["scores"], planner.asked["replies"]
        miss_s = [r for r, have in scored if not have]
        miss_r = [r for r, have in replied if not have]
        positions = (packed_positions(inner_scorer, miss_s) + sum(tokens(p) + n for p, n in miss_r)) if tokens else 0
        cost = MethodCost(entry=entry.name, method=method.name,
                          kind=" and ".join(k for k, v in (("scores", scored), ("replies", replied)) if v) or "nothing",
                          texts=len(scored) + len(replied), missing=len(miss_s) + len(miss_r), positions=positions,
                          requests=0 if tokens else len(miss_s) + len(miss_r),
                          characters=0 if tokens else sum(len(c + t) for c, t in miss_s) + sum(len(p) for p, _ in miss_r),
                          device=where)
        costs.append(cost)
        pending.append((cost, miss_s, miss_r))
    all_s = [r for _, s, _ in pending for r in s]
    all_r = [r for _, _, g in pending for r in g]
    per_position, per_prompt = _calibrate(loaded, options, all_s, all_r)
    out = []
    for cost in costs:
        match = next(((s, g) for c, s, g in pending if c is cost), None)
        if match is None or loaded is None:
            out.append(cost)
            continue
        s, g = match
        estimate = packed_positions(inner_scorer, s) * (per_position or 0) + len(g) * (per_prompt or 0)
        out.append(cost.model_copy(update={"estimated_s": round(estimate, 1)}))
    return out


def plan_suite(suite: Suite, release: str, version: str, *, store: str | None = None,
               devices: list[str] | None = None) -> list[MethodCost]:
    """The dry run of every entry; the store is only read (a SQLite store not made yet counts every text as missing)."""
    check_suite(suite)
    version = resolved_version(release, version)
    data = _release(release, version, suite)
    url = store_url(store)
    opened = ScoreStore.open_existing(url)
    try:
        costs = []
        for i, entry in enumerate(suite.models):
            device = entry.device or (devices[i % len(devices)] if devices else None)
            costs += plan_entry(suite, entry, data, opened, device)
        return costs
    finally:
        if opened is not None:
            opened.close()
