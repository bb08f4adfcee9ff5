"""The `builder` command line: a thin layer over the stage functions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from builder import languages as languages_mod
from builder.cli_eval import eval_app
from builder.cli_m2c import lexicon_app, templates_app
from builder.cli_release import publish as publish_cmd, releases_app
from builder.workspace.store import default_dir, init_workspace, open_workspace

app = typer.Typer(help="Build, review and release multilingual benchmarks with a human-LLM loop.", no_args_is_help=True)
language_app = typer.Typer(help="Languages: list the declared ones, declare a new one.", no_args_is_help=True)
seeds_app = typer.Typer(help="Seed data: COMPS pairs, concept categories, expert seed translations.", no_args_is_help=True)
llm_app = typer.Typer(help="LLM calls, cache and recordings.", no_args_is_help=True)
review_app = typer.Typer(help="Expert review in Label Studio: serve, push, pull, re-propose, status.", no_args_is_help=True)
app.add_typer(review_app, name="review")
app.add_typer(language_app, name="language")
app.add_typer(seeds_app, name="seeds")
app.add_typer(llm_app, name="llm")
app.add_typer(lexicon_app, name="lexicon")
app.add_typer(templates_app, name="templates")
app.add_typer(eval_app, name="eval")
app.add_typer(releases_app, name="releases")
app.command("publish")(publish_cmd)

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

WorkspaceOpt = typer.Option(None, "--workspace", "-w", envvar="BUILDER_WORKSPACE", help="Workspace folder [default: ./workspace]")
LangOpt = typer.Option(..., "--lang", "-l", help="Language codes, comma-separated, or 'all'")
PropsOpt = typer.Option(None, "--properties", help="Only pairs of these properties: a file (one per line) or a comma list")
OfflineOpt = typer.Option(False, "--offline", help="Serve replies from the cache only; fail on a miss")
DryRunOpt = typer.Option(False, "--dry-run", help="Print requests, estimated tokens and cost; send nothing")
BatchOpt = typer.Option(False, "--batch", help="Use the Batch API; a later run collects the results")
ConcOpt = typer.Option(None, "--concurrency", help="Concurrent requests [default: 16]")


def _fail(exc: Exception) -> None:
    err.print(f"[red]error:[/red] {exc}", highlight=False)
    raise typer.Exit(1)


def _ws(workspace: Optional[Path]):
    try:
        return open_workspace(workspace or default_dir())
    except Exception as exc:  # noqa: BLE001
        _fail(exc)


def _langs(ws, spec: str, exclude: tuple[str, ...] = ()):
    reg = languages_mod.registry(ws)
    try:
        return [reg[c] for c in languages_mod.resolve(spec, reg, exclude=exclude)]
    except languages_mod.UnknownLanguageError as exc:
        _fail(exc)


@app.command()
def init(directory: Optional[Path] = typer.Argument(None, envvar="BUILDER_WORKSPACE", help="Workspace folder")) -> None:
    """Create a workspace (idempotent)."""
    ws = init_workspace(directory or default_dir())
    out.print(f"workspace ready at {ws.directory}")


@app.command()
def status(workspace: Optional[Path] = WorkspaceOpt, as_json: bool = typer.Option(False, "--json")) -> None:
    """Per language and stage: pending, proposed, verified, generated, flagged."""
    from builder.status import status as compute

    ws = _ws(workspace)
    reg = languages_mod.registry(ws)
    rows = compute(ws, list(reg))
    if as_json:
        print(json.dumps([r.model_dump() for r in rows], ensure_ascii=False, indent=1))
        return
    table = Table(title=f"workspace {ws.directory}")
    for col in ("lang", "translate: pending", "proposed", "verified", "flagged", "generate: pending", "generated", "flagged"):
        table.add_column(col, justify="right" if col != "lang" else "left")
    for r in rows:
        tr, ge = r.translate, r.generate
        table.add_row(r.lang, *map(str, (tr.pending, tr.proposed, tr.verified, tr.flagged, ge.pending, ge.generated, ge.flagged)))
    out.print(table)


@language_app.command("list")
def language_list(workspace: Optional[Path] = WorkspaceOpt, as_json: bool = typer.Option(False, "--json")) -> None:
    """The declared languages."""
    ws = None
    try:
        ws = open_workspace(workspace or default_dir())
    except Exception:  # noqa: BLE001 - listing works without a workspace
        pass
    reg = languages_mod.registry(ws)
    if as_json:
        print(json.dumps([lang.model_dump() for lang in reg.values()], ensure_ascii=False, indent=1))
        return
    table = Table()
    for col in ("code", "name", "typology", "family", "script", "dir", "spaced", "source"):
        table.add_column(col)
    for lang in reg.values():
        table.add_row(lang.code, lang.name, lang.typology, lang.family, lang.script, lang.direction,
                      "yes" if lang.spaced else "no", "built-in" if lang.builtin else "workspace")
    out.print(table)


@language_app.command("add")
def language_add(
    code: str,
    name: str = typer.Option(...),
    typology: str = typer.Option(..., help="analytic | inflectional | agglutinative"),
    family: str = typer.Option(...),
    script: str = typer.Option(..., help="ISO 15924 code, e.g. Latn"),
    rtl: bool = typer.Option(False, "--rtl", help="Written right to left"),
    no_spaces: bool = typer.Option(False, "--no-spaces", help="Words are not separated by spaces"),
    native_name: Optional[str] = typer.Option(None),
    meta_prompt: Optional[str] = typer.Option(None, help="Metalinguistic prompt with {property}, {word1}, {word2}"),
    notes: str = typer.Option("", help="Guidance for sentence generation in this language"),
    workspace: Optional[Path] = WorkspaceOpt,
) -> None:
    """Declare a new language; every stage then accepts its code."""
    ws = _ws(workspace)
    try:
        lang = languages_mod.declare(
            ws, code=code, name=name, native_name=native_name, typology=typology, family=family, script=script,
            direction="rtl" if rtl else "ltr", spaced=not no_spaces, meta_prompt=meta_prompt, generation_notes=notes,
        )
    except Exception as exc:  # noqa: BLE001 - pydantic and duplicate errors alike
        _fail(exc)
    out.print(f"declared {lang.code} ({lang.name}, {lang.typology}, {lang.family}, {lang.script})")


@seeds_app.command("import")
def seeds_import(paths: list[Path], workspace: Optional[Path] = WorkspaceOpt) -> None:
    """Import COMPS JSONL, concept categories and expert seed translations (files or folders)."""
    from builder.seeds import SeedImportError, import_seeds

    ws = _ws(workspace)
    try:
        s = import_seeds(ws, *paths)
    except SeedImportError as exc:
        _fail(exc)
    out.print(f"imported {s.files} file(s): {s.concepts} new concepts, {s.properties} new properties, "
              f"{s.pairs} new pairs, {s.seed_translations} new seed translations")


def _settings(offline, dry_run, batch, concurrency):
    from builder.llm.config import LLMSettings

    s = LLMSettings.from_env(offline=offline, dry_run=dry_run, batch=batch, concurrency=concurrency)
    if s.mode == "recording":
        err.print("[yellow]no OPENAI_API_KEY or OPENAI_BASE_URL: replaying the bundled recording[/yellow]")
    return s


def _llm_stage(ws, name: str, properties, llm_flags, work):
    """Run an LLM stage over the chosen scope; any failure is one clear error line."""
    from builder.runner import run_stage
    from builder.selection import Scope

    try:
        scope = Scope.parse(ws, properties)
        return run_stage(ws, _settings(*llm_flags), name, lambda c, p: work(c, p, scope))
    except Exception as exc:  # noqa: BLE001
        _fail(exc)


def _report(run, what: str) -> None:
    s = run.stats
    if run.plan is not None and run.plan.requests and not run.batch_id:
        cost = f"${run.plan.cost_usd:.4f}" if run.plan.cost_known else "unknown (model not in the price table)"
        out.print(f"dry run: {run.plan.requests} request(s), ~{run.plan.tokens_in} tokens in, "
                  f"~{run.plan.tokens_out} tokens out, estimated cost {cost}")
    if run.batch_id:
        out.print(f"submitted batch {run.batch_id} ({run.plan.requests} requests); run the same command again to collect")
    for bid, st in run.collected.items():
        out.print(f"batch {bid}: {st}")
    out.print(f"{what}; requests sent {s.sent}, retries {s.retries}, cache hits {s.cache_hits}, re-asks {s.reasks}")


@app.command()
def translate(
    lang: str = LangOpt,
    properties: Optional[str] = PropsOpt,
    items_per_request: int = typer.Option(10, "--items-per-request", min=1),
    offline: bool = OfflineOpt,
    dry_run: bool = DryRunOpt,
    batch: bool = BatchOpt,
    concurrency: Optional[int] = ConcOpt,
    workspace: Optional[Path] = WorkspaceOpt,
) -> None:
    """Stage 2: the LLM translates concepts and properties not yet verified."""
    from builder.languages import SOURCE_LANGUAGE
    from builder.translate import translate as stage

    ws = _ws(workspace)
    langs = _langs(ws, lang, exclude=(SOURCE_LANGUAGE, *languages_mod.SEED_LANGUAGES))
    run = _llm_stage(ws, "translate", properties, (offline, dry_run, batch, concurrency),
                     lambda c, p, scope: stage(ws, c, langs, scope=scope, items_per_request=items_per_request, progress=p))
    r = run.result
    _report(run, "proposed " + ", ".join(f"{k} {v}" for k, v in r.proposed.items())
            + ("; flagged " + ", ".join(f"{k} {v}" for k, v in r.flagged.items() if v) if any(r.flagged.values()) else ""))


@app.command()
def accept(
    lang: str = LangOpt,
    item: Optional[list[str]] = typer.Option(None, "--item", help="Only these item ids"),
    reviewer: str = typer.Option(..., "--reviewer", envvar="BUILDER_REVIEWER", help="Who is accepting"),
    include_ambiguous: bool = typer.Option(False, "--include-ambiguous"),
    workspace: Optional[Path] = WorkspaceOpt,
) -> None:
    """Mark proposals verified (a stand-in for review in Label Studio)."""
    from builder.verify import accept as do_accept

    ws = _ws(workspace)
    for lg in _langs(ws, lang):
        try:
            s = do_accept(ws, lg.code, reviewer=reviewer, item_ids=item, include_ambiguous=include_ambiguous)
        except ValueError as exc:
            _fail(exc)
        out.print(f"{lg.code}: accepted {s.accepted}, left ambiguous {s.skipped_ambiguous}, already verified {s.already_verified}")


@app.command()
def generate(
    lang: str = LangOpt,
    properties: Optional[str] = PropsOpt,
    offline: bool = OfflineOpt,
    dry_run: bool = DryRunOpt,
    batch: bool = BatchOpt,
    concurrency: Optional[int] = ConcOpt,
    workspace: Optional[Path] = WorkspaceOpt,
) -> None:
    """Stage 4: the LLM writes acceptable and unacceptable sentences from verified words."""
    from builder.generate import generate as stage

    ws = _ws(workspace)
    langs = _langs(ws, lang)
    run = _llm_stage(ws, "generate", properties, (offline, dry_run, batch, concurrency),
                     lambda c, p, scope: stage(ws, c, langs, scope=scope, progress=p))
    r = run.result
    _report(run, "generated " + ", ".join(f"{k} {v}" for k, v in r.generated.items())
            + "; flagged " + ", ".join(f"{k} {v}" for k, v in r.flagged.items())
            + "; waiting for verified words " + ", ".join(f"{k} {v}" for k, v in r.blocked.items()))


@llm_app.command("export-recording")
def export_recording(path: Path, workspace: Optional[Path] = WorkspaceOpt) -> None:
    """Write the workspace's cached replies as a recording that can be replayed offline."""
    from builder.llm.recording import export_recording as export

    n = export(path, _ws(workspace))
    out.print(f"wrote {n} replies to {path}")


@llm_app.command("record-demo")
def record_demo_cmd(
    path: Path = typer.Option(None, help="Where to write [default: the sample's demo/recording.jsonl]"),
) -> None:
    """Re-record the bundled demo replies from the sample's answer files (maintainers)."""
    from builder.demo import record_demo
    from builder.paths import sample_dir

    target = path or sample_dir() / "demo" / "recording.jsonl"
    n = record_demo(target, err)
    out.print(f"wrote {n} replies to {target}")


@app.command()
def demo(
    workspace: Path = typer.Option(Path("demo-workspace"), "--workspace", "-w", help="The demo's folder (re-running resumes)"),
    auto_review: bool = typer.Option(False, "--auto-review", help="A scripted curator accepts every draft through Label Studio's API"),
    model: Optional[str] = typer.Option(None, "--model", help="Evaluate this model [default: a toy trained on the spot]"),
) -> None:
    """The main job on the bundled sample: seeds, translation, review, sentences, M2C, release, evaluation, report."""
    from builder.demo import run_demo

    try:
        run_demo(workspace, out, auto_review=auto_review, model=model)
    except Exception as exc:  # noqa: BLE001
        _fail(exc)


def _ws_dir(workspace: Optional[Path]) -> Path:
    return Path(workspace or default_dir())


@review_app.command("serve")
def review_serve(
    host: str = typer.Option("127.0.0.1", help="Bind address"),
    port: Optional[int] = typer.Option(None, help="Port [default: a free one]"),
    allow_remote: bool = typer.Option(False, "--allow-remote", help="Allow binding to a non-loopback address"),
    show_token: bool = typer.Option(False, "--show-token", help="Print the API token"),
    workspace: Optional[Path] = WorkspaceOpt,
) -> None:
    """Start Label Studio for this workspace (installing it into its own environment when missing)."""
    from annotation.server import serve

    ws = _ws(workspace)
    try:
        conn = serve(ws.directory, host=host, port=port, allow_remote=allow_remote, log=err.print)
    except Exception as exc:  # noqa: BLE001
        _fail(exc)
    out.print(f"Label Studio is up at {conn.url} (user admin@builder.local; password and token in "
              f"{ws.directory / 'label-studio'}, mode 0600)")
    if show_token:
        out.print(conn.token)


@review_app.command("stop")
def review_stop(workspace: Optional[Path] = WorkspaceOpt) -> None:
    """Stop this workspace's Label Studio."""
    from annotation.server import stop

    out.print("stopped" if stop(_ws_dir(workspace)) else "no server was running")


@review_app.command("push")
def review_push(
    stage: str = typer.Option("translation", help="translation | adjudication | sentences | inflections"),
    lang: str = LangOpt,
    limit: Optional[int] = typer.Option(None, help="At most this many tasks per language"),
    overlap: int = typer.Option(1, min=1, help="Curators per task for the overlapping share"),
    overlap_share: float = typer.Option(0.0, min=0.0, max=1.0, help="Share of tasks that go to --overlap curators"),
    workspace: Optional[Path] = WorkspaceOpt,
) -> None:
    """Push proposals for review; repeated pushes skip unchanged tasks and update changed ones in place.

    `--stage adjudication` pushes the items whose curators disagree to an adjudication project."""
    from annotation.review import push
    from annotation.server import connect

    ws = _ws(workspace)
    for lg in _langs(ws, lang):
        try:
            s = push(ws, connect(ws.directory), lg.code, stage=stage, limit=limit, overlap=overlap,
                     overlap_share=overlap_share)
        except Exception as exc:  # noqa: BLE001
            _fail(exc)
        out.print(f"{stage} {lg.code}: created {s.created}, updated {s.updated}, unchanged {s.unchanged}")


@review_app.command("pull")
def review_pull(workspace: Optional[Path] = WorkspaceOpt) -> None:
    """Pull every annotation back into the workspace; accepted and corrected words become verified."""
    from annotation.review import pull
    from annotation.server import connect

    ws = _ws(workspace)
    try:
        s = pull(ws, connect(ws.directory))
    except Exception as exc:  # noqa: BLE001
        _fail(exc)
    out.print(f"annotations: {s.new} new, {s.updated} updated, {s.unchanged} unchanged; "
              f"decisions {s.by_decision}; newly verified {s.verified}")
    if s.forms:
        out.print("inflection forms: " + ", ".join(f"{k} {v}" for k, v in sorted(s.forms.items())))


@review_app.command("repropose")
def review_repropose(
    lang: str = LangOpt,
    stage: str = typer.Option("translation", help="translation (words back to translation) | sentences (pairs back to generation)"),
    offline: bool = OfflineOpt,
    workspace: Optional[Path] = WorkspaceOpt,
) -> None:
    """Send rejected and ambiguous items back to the LLM with the curator's comment."""
    from annotation.review import rejected_items
    from annotation.sentences import rejected_pairs
    from builder.generate import regenerate
    from builder.translate import repropose

    if stage not in ("translation", "sentences"):
        _fail(ValueError(f"--stage must be translation or sentences, not {stage!r}"))
    ws = _ws(workspace)
    for lg in _langs(ws, lang):
        rejected = rejected_items(ws, lg.code) if stage == "translation" else rejected_pairs(ws, lg.code)
        if not rejected:
            out.print(f"{lg.code}: nothing rejected")
            continue
        if stage == "translation":
            run = _llm_stage(ws, "repropose", None, (offline, False, False, None),
                             lambda c, p, scope, lg=lg, rejected=rejected: repropose(ws, c, lg, rejected))
            out.print(f"{lg.code}: {run.result} new revision(s); push again to review them")
        else:
            run = _llm_stage(ws, "regenerate", None, (offline, False, False, None),
                             lambda c, p, scope, lg=lg, rejected=rejected: regenerate(ws, c, lg, rejected, progress=p))
            out.print(f"{lg.code}: {run.result.generated[lg.code]} pair(s) written again, "
                      f"{run.result.flagged[lg.code]} flagged; push --stage sentences to review them")


@review_app.command("status")
def review_status_cmd(workspace: Optional[Path] = WorkspaceOpt, as_json: bool = typer.Option(False, "--json")) -> None:
    """Per stage and language: pending, accepted, corrected, rejected, ambiguous, reviewers."""
    from annotation.review import review_status

    rows = review_status(_ws(workspace))
    if as_json:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return
    table = Table()
    for col in ("stage", "lang", "pending", "accept", "corrected", "fix", "reject", "ambiguous", "skipped", "disagree",
                "alpha", "text exact", "chrF", "reviewers"):
        table.add_column(col)

    def num(v, fmt="{:.2f}"):
        return "—" if v is None else fmt.format(v)

    for r in rows:
        agr = r.get("agreement") or {}
        table.add_row(r["stage"], r["lang"], *(str(r.get(k, "—")) for k in ("pending", "accept", "corrected", "fix", "reject",
                                                                           "ambiguous", "skipped")),
                      str(r.get("disagreements", "")), num(agr.get("alpha")), num(agr.get("exact_match")),
                      num(agr.get("chrf"), "{:.1f}"), ", ".join(r["reviewers"]))
    out.print(table)


if __name__ == "__main__":  # pragma: no cover
    app()
