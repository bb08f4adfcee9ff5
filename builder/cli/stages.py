"""The construction stages (`init`, `status`, `translate`, `accept`, `generate`, `audit`) and the `demo` that runs them all.

The demo module (every stage, Label Studio's SDK, torch and transformers: seconds to import) is loaded
when `demo` runs, so that the other commands start at once.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from builder import languages as languages_mod
from builder.audits import audit as audit_pairs
from builder.cli.common import (
    JsonOpt,
    LangOpt,
    PropsOpt,
    ReaskOpt,
    WorkspaceOpt,
    codes,
    flag_scripts,
    langs,
    llm_options,
    llm_stage,
    open_ws,
    out,
    report_stage,
    show_steps,
)
from builder.generate import generate as generate_stage
from builder.llm.config import LLMSettings
from builder.next_steps import LLM_STAGES, next_steps, stage_steps
from builder.reviews import accept as accept_proposals
from builder.status import flagged_items, llm_usage
from builder.status import status as compute_status
from builder.translate import translate as translate_stage
from builder.workspace.store import default_dir, init_workspace


def init(
    directory: Path | None = typer.Argument(None, envvar="BUILDER_WORKSPACE", help="Workspace folder"),
    database_url: str | None = typer.Option(
        None, "--database-url", help="Keep the workspace's database on this PostgreSQL server "
        "(postgresql://USER@HOST:PORT/DATABASE; the password from PGPASSWORD or ~/.pgpass). The folder records it; "
        "another folder given the same URL shares the workspace [default: the folder's own SQLite file]"),
) -> None:
    """Create a workspace (idempotent)."""
    ws = init_workspace(directory or default_dir(), database_url=database_url)
    out.print(f"workspace ready at {ws.directory} (database {ws.engine.url.render_as_string()})")


def status(
    flags: bool = typer.Option(False, "--flags", help="List the flagged items (LLM stages, pair audits), with the reasons"),
    llm: bool = typer.Option(False, "--llm", help="LLM calls by stage, model and mode: tokens, cost, calls at an unknown price; each endpoint's structured-output mode"),
    stage: str | None = typer.Option(None, "--stage", help="With --flags: only this stage (translate, repropose, generate, "
                                                              "fill, similarity, occurrence, script, judge)"),
    lang: str | None = typer.Option(None, "--lang", "-l", help="With --flags: only these language codes, comma-separated"),
    workspace: Path | None = WorkspaceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Per language and stage: pending, proposed, verified, generated, flagged, and concept–property overlap
    per language and negative type; `--flags` lists the flagged items; `--llm` the LLM calls and their cost."""
    ws = open_ws(workspace)
    if flags:
        return _flags(ws, stage, codes(lang), as_json)
    if llm:
        return _llm(ws, as_json)
    reg = languages_mod.registry(ws)
    rows = compute_status(ws, list(reg))
    if as_json:
        print(json.dumps([r.model_dump() for r in rows], ensure_ascii=False, indent=1))
        return
    table = Table(title=f"workspace {ws.directory}")
    for col in ("lang", "translate: pending", "proposed", "verified", "flagged", "generate: pending", "generated", "flagged",
                "LLM flags (--flags)"):
        table.add_column(col, justify="right" if col != "lang" else "left")
    for r in rows:
        tr, ge = r.translate, r.generate
        table.add_row(languages_mod.label(r.lang, reg), *map(str, (tr.pending, tr.proposed, tr.verified, tr.flagged, ge.pending, ge.generated, ge.flagged)),
                      ", ".join(f"{k} {v}" for k, v in r.flags.items()))
    out.print(table)
    overlap = [o for r in rows for o in r.overlap]
    if overlap:
        out.print(overlap_view(overlap, "concept–property overlap of the generated pairs (pairs whose concept shares a "
                                        "character or word stem with the property)"))
    usage = llm_usage(ws)
    if usage.calls:
        unknown = f", {usage.unpriced} at an unknown price" if usage.unpriced else ""
        out.print(f"LLM: {sum(c.calls for c in usage.calls)} calls, cost ${usage.cost_usd:.4f}{unknown} (builder status --llm)")
    show_steps(ws, next_steps(ws))


def overlap_view(rows, title: str) -> Table:
    """The overlap rows `builder.audits.overlap_table` counts, as a table to print."""
    table = Table(title=title)
    for col in ("lang", "negative type", "pairs", "positive shares", "negative shares", "shortcut (positive only)"):
        table.add_column(col, justify="left" if col in ("lang", "negative type") else "right")
    for o in rows:
        table.add_row(o.lang, o.negative_type, str(o.pairs), str(o.positive), str(o.negative),
                      f"{o.shortcut} ({100 * o.shortcut_share:.0f}%)")
    return table


def _llm(ws, as_json: bool) -> None:
    usage = llm_usage(ws)
    if as_json:
        print(json.dumps(usage.model_dump(mode="json"), ensure_ascii=False, indent=1))
        return
    table = Table(title=f"LLM calls in {ws.directory}")
    for col in ("stage", "model", "mode", "calls", "tokens in", "tokens out", "cost (USD)", "unknown price"):
        table.add_column(col, justify="right" if col in ("calls", "tokens in", "tokens out", "cost (USD)", "unknown price") else "left")
    for c in usage.calls:
        table.add_row(c.stage, Text(c.model), c.mode or "-", str(c.calls), str(c.tokens_in), str(c.tokens_out),
                      f"{c.cost_usd:.4f}", str(c.unpriced) if c.unpriced else "")
    out.print(table)
    for e in usage.endpoints:
        refused = "".join(f"; refused {mode}: {why}" for mode, why in e.refusals.items())
        out.print(f"{e.endpoint} {e.model}: structured outputs {e.mode}{refused}", markup=False, highlight=False)


def _flags(ws, stage: str | None, lang_codes: list[str] | None, as_json: bool) -> None:
    items = flagged_items(ws, stage=stage, langs=lang_codes)
    if as_json:
        print(json.dumps([f.model_dump(mode="json") for f in items], ensure_ascii=False, indent=1))
        return
    table = Table(title=f"{len(items)} flagged item(s) in {ws.directory}")
    for col in ("stage", "lang", "item", "what", "reason"):
        table.add_column(col)
    reg = languages_mod.registry(ws)
    for f in items:
        table.add_row(f.stage, languages_mod.label(f.lang, reg), f.item_id, Text(f.what), Text(f.reason))  # as text: reasons quote model output
    out.print(table)
    show_steps(ws, [step for stage, lang in sorted({(f.stage, f.lang) for f in items}) if stage in LLM_STAGES
                for step in stage_steps(ws, stage, [lang])])


@llm_options
def translate(
    lang: str = LangOpt,
    properties: str | None = PropsOpt,
    reask_flagged: bool = ReaskOpt,
    workspace: Path | None = WorkspaceOpt,
    *,
    llm: LLMSettings,
) -> None:
    """Stage 2: the LLM translates concepts and properties not yet verified; flagged ones again, with the reason."""
    ws = open_ws(workspace)
    targets = langs(ws, lang, exclude=(languages_mod.SOURCE_LANGUAGE, *languages_mod.SEED_LANGUAGES))
    run = llm_stage(ws, "translate", properties, llm, lambda c, p, scope: translate_stage(
        ws, c, targets, scope=scope, progress=p, reask_flagged=reask_flagged))
    r = run.result
    report_stage(run, "proposed " + ", ".join(f"{k} {v}" for k, v in r.proposed.items())
                 + ("; flagged " + ", ".join(f"{k} {v}" for k, v in r.flagged.items() if v) if any(r.flagged.values()) else ""))
    if not llm.dry_run:  # a dry run proposed nothing to check
        flag_scripts(ws, targets, properties)
    show_steps(ws, stage_steps(ws, "translate", [lg.code for lg in targets], ("--properties", properties) if properties else ()))


def accept(
    lang: str = LangOpt,
    item: list[str] | None = typer.Option(None, "--item", help="Only these item ids"),
    reviewer: str = typer.Option(..., "--reviewer", envvar="BUILDER_REVIEWER", help="Who is accepting"),
    include_ambiguous: bool = typer.Option(False, "--include-ambiguous"),
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Mark proposals verified without Label Studio (recorded as this reviewer's decision)."""
    ws = open_ws(workspace)
    for lg in langs(ws, lang):
        s = accept_proposals(ws, lg.code, reviewer=reviewer, item_ids=item, include_ambiguous=include_ambiguous)
        out.print(f"{lg.code}: accepted {s.accepted}, left ambiguous {s.skipped_ambiguous}, already verified {s.already_verified}")


@llm_options
def generate(
    lang: str = LangOpt,
    properties: str | None = PropsOpt,
    reask_flagged: bool = ReaskOpt,
    workspace: Path | None = WorkspaceOpt,
    *,
    llm: LLMSettings,
) -> None:
    """Stage 4: the LLM writes acceptable and unacceptable sentences from verified words (again for pairs a word of
    theirs was verified again after, and for flagged pairs, with the reason); then the pair audits run."""
    ws = open_ws(workspace)
    targets = langs(ws, lang)
    run = llm_stage(ws, "generate", properties, llm, lambda c, p, scope: generate_stage(
        ws, c, targets, scope=scope, progress=p, reask_flagged=reask_flagged))
    r = run.result
    report_stage(run, "generated " + ", ".join(f"{k} {v}" for k, v in r.generated.items())
                 + "; flagged " + ", ".join(f"{k} {v}" for k, v in r.flagged.items())
                 + "; waiting for verified words " + ", ".join(f"{k} {v}" for k, v in r.blocked.items()))
    if not llm.dry_run:  # a dry run generated nothing to audit
        _audit(ws, targets, properties, llm)
    show_steps(ws, stage_steps(ws, "generate", [lg.code for lg in targets], ("--properties", properties) if properties else ()))


@llm_options
def audit(
    lang: str = LangOpt,
    properties: str | None = PropsOpt,
    workspace: Path | None = WorkspaceOpt,
    *,
    llm: LLMSettings,
) -> None:
    """Pair audits of the generated pairs: similarity and negative types, concept occurrences, the LLM judge.

    Findings are flagged for curators (`status --flags`); the judge's go to Label Studio with
    `review push --stage judge`."""
    ws = open_ws(workspace)
    _audit(ws, langs(ws, lang), properties, llm)


def _audit(ws, targets, properties: str | None, settings) -> None:
    run = llm_stage(ws, "audit", properties, settings,
                    lambda c, p, scope: audit_pairs(ws, c, targets, scope=scope, progress=p))
    report_stage(run, run.result.describe())


def demo(
    workspace: Path = typer.Option(Path("demo-workspace"), "--workspace", "-w", help="The demo's folder (re-running resumes)"),
    auto_review: bool = typer.Option(False, "--auto-review", help="A scripted curator accepts every draft through Label Studio's API"),
    model: str | None = typer.Option(None, "--model", help="Evaluate this model (a folder, a GGUF file, a Hub id), or "
                                        "'toy' for a toy trained on the spot [default: SmolLM2-135M-Instruct]"),
    evaluate: bool = typer.Option(True, "--eval/--no-eval", help="--no-eval stops after the release; the same command "
                                  "without it goes on from there"),
) -> None:
    """The main job on the bundled sample: seeds, translation, review, sentences, M2C, release, evaluation, report."""
    from builder.demo import DEMO_VERSION, run_demo

    result = run_demo(workspace, out, auto_review=auto_review, model=model, evaluate=evaluate)
    if not result.finished:
        return
    where = result.workspace
    out.rule("[bold]done")
    out.print(f"workspace:    {where / 'workspace.sqlite'}")
    out.print(f"label studio: {result.label_studio} (builder review stop -w {where} stops it)")
    out.print(f"release:      {result.release} (version {DEMO_VERSION})")
    if result.report:
        out.print(f"results:      {result.results}")
        out.print(f"report:       {result.report}")
    if result.llm_report:
        out.print(f"LLM results:  {result.llm_results}")
        out.print(f"LLM report:   {result.llm_report}")
    if result.report:
        out.print(f"gates:        {'passed' if result.gates_passed else 'FAILED'}")
