"""Run methods over a table of pairs and write the results.

Methods read each language's name, prompt and spacing from the dataset record, i.e. from the release
evaluated (`evaluate.data.load_release`), so a language declared only in a workspace is evaluated
as it was published.

The model is a loaded transformers model (scores and generated text) or, given `endpoint` settings,
an OpenAI-compatible endpoint: generated text, and with `score_endpoint` scores from its echoed prompt
log-probabilities (`evaluate.endpoint_scoring`). Each offers capabilities (`evaluate.protocols`), and a
method whose needs the backend does not offer is refused before anything is loaded (`check_needs`).
A method may require others (consistency reads direct's and meta's decisions); they run first.
Each finished method is kept under DIR/parts/<method>/ with the configuration it ran under; a
re-run with the same configuration reuses it, so an interrupted evaluation resumes where it stopped
and never scores anything twice. Runs may share a results folder (a cluster's jobs): a method is run
under a lock of its own in the folder (the other runs wait for it, then reuse its part) with a scratch
folder of its own (DIR/work/<method>), and the results and the report are each written by one run at a time.
Given a score store (`evaluate.store`), the scorer and the generator are wrapped by it, so a method's texts
already scored (by another run, on another release) are taken from it; `summary.json` records per method how
many texts were computed and how many came from the store (`store`), and with a local model the torch threads
the run used (`threads`: a suite's jobs on one machine share its cores).
"""

from __future__ import annotations

import ctypes
import gc
import json
import shutil
from pathlib import Path

import pandas as pd
import torch
from filelock import FileLock

from builder.errors import InputError
from builder.llm.config import LLMSettings
from builder.version import code_version
from evaluate.backends import CACHE_FILE, EndpointGenerator, TransformersGenerator, endpoint_info
from evaluate.data import check_pairs
from evaluate.endpoint_scoring import EndpointScorer
from evaluate.methods import Context, EvalOptions, Method, MethodOutput, Score, registry
from evaluate.models import LoadedModel
from evaluate.protocols import Capability, offered, unmet
from evaluate.results import DatasetInfo, Results, RunConfig, now, write_json, write_parquet, write_results
from evaluate.scoring import BOS_POLICIES, Scorer
from evaluate.store import ScoreStore, StoredGenerator, StoredScorer, Tally, model_identity


def _load_part(folder: Path, config: RunConfig) -> tuple[MethodOutput, dict] | None:
    """A saved part and its store counts (those of the run that computed it)."""
    done = folder / "done.json"
    if not done.is_file():
        return None
    meta = json.loads(done.read_text(encoding="utf-8"))
    if meta["config"] != config.fingerprint():
        return None
    return (MethodOutput(pd.read_parquet(folder / "items.parquet"), [Score.model_validate(s) for s in meta["scores"]],
                         {t: pd.read_parquet(folder / f"{t}.parquet") for t in meta["tables"]}), meta.get("store", {}))


def _save_part(folder: Path, config: RunConfig, out: MethodOutput, counts: dict) -> None:
    """Call under the method's lock (`_method_part`): `done.json`, written last, marks the part whole."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    write_parquet(folder / "items.parquet", out.items)
    for name, table in out.tables.items():
        write_parquet(folder / f"{name}.parquet", table)
    write_json(folder / "done.json", {"config": config.fingerprint(), "scores": [s.model_dump() for s in out.scores],
                                      "tables": sorted(out.tables), "store": counts})


try:
    _LIBC = ctypes.CDLL("libc.so.6")
except OSError:  # not glibc (macOS, Windows, musl): nothing to trim
    _LIBC = None


def _release_memory() -> None:
    """Give back what a finished method freed, before the next one runs: glibc keeps freed pages in its heaps (one
    per thread that allocated) unless asked to trim them, and the next method's peak (neuro's random control)
    would come on top of them."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


def endpoint_bos(policy: str) -> str | None:
    """What an endpoint's prompts start with: the server's own BOS (auto), or a token written as text."""
    if policy == "auto":
        return None
    if policy in BOS_POLICIES:
        raise InputError(f"--bos {policy}: an endpoint's tokens are the server's; give auto (the server's own BOS) or "
                         "the token to write before every prompt (e.g. '<|im_start|>')")
    return policy


def _method_part(method: Method, ctx: Context, pairs: pd.DataFrame, out_dir: Path, config: RunConfig,
                 tally: Tally | None) -> tuple[MethodOutput, dict]:
    """The method's output and its store counts: its part saved under this configuration, else run now (in a
    scratch folder of its own, removed once the part is saved) and saved. Under the method's lock in the results
    folder, so that of two runs sharing the folder one runs the method and the other waits, then reuses its part."""
    folder = out_dir / "parts" / method.name
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(folder.parent / f".{method.name}.lock"):
        saved = _load_part(folder, config)
        if saved is None:
            ctx.work_dir = out_dir / "work" / method.name
            before = tally.copy() if tally is not None else None
            out = method.run(ctx, pairs)
            counts = tally.since(before) if tally is not None else {}
            _release_memory()
            _save_part(folder, config, out, counts)
            shutil.rmtree(ctx.work_dir, ignore_errors=True)
            saved = out, counts
    return saved


def with_requirements(methods: list[Method], offers: tuple[Capability, ...]) -> list[Method]:
    """The methods with those they require placed before them, each once."""
    known = registry()
    ordered: dict[str, Method] = {}
    for method in methods:
        for name in getattr(method, "requires", lambda _: ())(offers):
            ordered.setdefault(name, known[name])
        ordered.setdefault(method.name, method)
    return list(ordered.values())


def check_needs(methods: list[Method], *, local: bool, score_endpoint: bool = False) -> list[Method]:
    """The methods to run (those required first), or one sentence naming the first method whose needs the backend
    does not offer; called before anything is loaded."""
    offers = offered(local=local, score_endpoint=score_endpoint)
    methods = with_requirements(methods, offers)
    for method in methods:
        if refusal := unmet(method.name, method.needs, offers, local=local):
            raise InputError(refusal)
    return methods


def run_evaluation(pairs: pd.DataFrame, dataset: DatasetInfo, loaded: LoadedModel | None, methods: list[Method],
                   out_dir: Path, options: EvalOptions = EvalOptions(), progress=None, *,
                   m2c: pd.DataFrame | None = None, endpoint: LLMSettings | None = None,
                   score_endpoint: bool = False, store: ScoreStore | None = None) -> Results:
    """Run `methods` with a local model (`loaded`) or, when `loaded` is None, the model behind `endpoint` (scored
    through its prompt log-probabilities with `score_endpoint`, else generated text only); with `store`, every
    score and greedy reply is looked up there first and what is computed is stored."""
    if loaded is None and endpoint is None:
        raise ValueError("a model is needed: a loaded local model or endpoint settings")
    methods = check_needs(methods, local=loaded is not None, score_endpoint=score_endpoint)
    pairs = check_pairs(pairs, f"dataset {dataset.source} {dataset.version}")
    out_dir = Path(out_dir)
    languages = {lang.code: lang for lang in dataset.languages}  # as the release declares them, never the registry's
    if loaded is not None:
        scorer, generator, info = Scorer(loaded, options.bos_policy), TransformersGenerator(loaded), loaded.info
        backend = {"scorer": scorer, "generator": generator, "hidden": scorer, "reply_format": generator}
    else:
        backend = {"scorer": EndpointScorer(endpoint, endpoint_bos(options.bos_policy)) if score_endpoint else None,
                   "generator": EndpointGenerator(endpoint, out_dir / CACHE_FILE)}
        info = endpoint_info(endpoint)
    tally = Tally() if store is not None else None
    if store is not None:
        identity = model_identity(info)
        if backend["scorer"] is not None:
            backend["scorer"] = StoredScorer(backend["scorer"], store, identity, tally)
        prompt_format = backend["reply_format"].prompt_format if backend.get("reply_format") else None
        backend["generator"] = StoredGenerator(backend["generator"], store, identity, prompt_format, tally)
    ctx = Context(languages, options, out_dir / "work", **backend, progress=progress or (lambda *a: None), m2c=m2c)
    langs = set(pairs["lang"]) | (set(m2c["lang"]) if m2c is not None else set())
    config = RunConfig(model=info, scoring=ctx.scorer.setup if ctx.scorer else None, dataset=dataset, options=options,
                       prompt_format=ctx.reply_format.prompt_format if ctx.reply_format else None,
                       methods=[m.name for m in methods], langs=sorted(langs), code_version=code_version(), created_at=now())
    items, scores, tables, counts = [], [], {}, {}
    for method in methods:
        out, counts[method.name] = _method_part(method, ctx, pairs, out_dir, config, tally)
        ctx.outputs[method.name] = out
        items.append(out.items)
        scores += out.scores
        tables.update(out.tables)
    results = Results(config, pd.concat(items, ignore_index=True), scores, tables,
                      {m: c for m, c in counts.items() if c} if store is not None else {},
                      torch.get_num_threads() if loaded is not None else None)
    write_results(out_dir, results)
    try:
        (out_dir / "work").rmdir()
    except OSError:  # not there, or another run's method is working in it
        pass
    return results
