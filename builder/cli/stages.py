"""The construction stages (`init`, `status`, `translate`, `accept`, `generate`) and the `demo` that runs them all.

The demo module (every stage, Label Studio's SDK, torch and transformers: seconds to import) is loaded
when `demo` runs, so that the other commands start at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from builder import languages as languages_mod
from builder.cli.common import (
    BatchOpt,
    ConcOpt,
    DryRunOpt,
    JsonOpt,
    LangOpt,
    OfflineOpt,
    PropsOpt,
    WorkspaceOpt,
    codes,
    fail,
    langs,
    llm_settings,
    llm_stage,
    open_ws,
    out,
    report_stage,
)
from builder.generate import generate as generate_stage
from builder.reviews import accept as accept_proposals
from builder.status import flagged_items, status as compute_status
from builder.translate import translate as translate_stage
from builder.workspace.store import default_dir, init_workspace


def init(directory: Optional[Path] = typer.Argument(None, envvar="BUILDER_WORKSPACE", help="Workspace folder")) -> None:
    """Create a workspace (idempotent)."""
    ws = init_workspace(directory or default_dir())
    out.print(f"workspace ready at {ws.directory}")


def status(
    flags: bool = typer.Option(False, "--flags", help="List the items the LLM stages gave up on, with the reasons"),
    stage: Optional[str] = typer.Option(None, "--stage", help="With --flags: only this stage (translate, repropose, generate, fill)"),
    lang: Optional[str] = typer.Option(None, "--lang", "-l", help="With --flags: only these language codes, comma-separated"),
    workspace: Optional[Path] = WorkspaceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Per language and stage: pending, proposed, verified, generated, flagged; `--flags` lists the flagged items."""
    ws = open_ws(workspace)
    if flags:
        return _flags(ws, stage, codes(lang), as_json)
    rows = compute_status(ws, list(languages_mod.registry(ws)))
    if as_json:
        print(json.dumps([r.model_dump() for r in rows], ensure_ascii=False, indent=1))
        return
    table = Table(title=f"workspace {ws.directory}")
    for col in ("lang", "translate: pending", "proposed", "verified", "flagged", "generate: pending", "generated", "flagged",
                "LLM flags (--flags)"):
        table.add_column(col, justify="right" if col != "lang" else "left")
    for r in rows:
        tr, ge = r.translate, r.generate
        table.add_row(r.lang, *map(str, (tr.pending, tr.proposed, tr.verified, tr.flagged, ge.pending, ge.generated, ge.flagged)),
                      ", ".join(f"{k} {v}" for k, v in r.flags.items()))
    out.print(table)


def _flags(ws, stage: Optional[str], lang_codes: Optional[list[str]], as_json: bool) -> None:
    items = flagged_items(ws, stage=stage, langs=lang_codes)
    if as_json:
        print(json.dumps([f.model_dump(mode="json") for f in items], ensure_ascii=False, indent=1))
        return
    table = Table(title=f"{len(items)} flagged item(s) in {ws.directory}")
    for col in ("stage", "lang", "item", "what", "reason"):
        table.add_column(col)
    for f in items:
        table.add_row(f.stage, f.lang, f.item_id, Text(f.what), Text(f.reason))  # as text: reasons quote model output
    out.print(table)


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
    ws = open_ws(workspace)
    targets = langs(ws, lang, exclude=(languages_mod.SOURCE_LANGUAGE, *languages_mod.SEED_LANGUAGES))
    run = llm_stage(ws, "translate", properties, llm_settings(offline, dry_run, batch, concurrency),
                    lambda c, p, scope: translate_stage(ws, c, targets, scope=scope, items_per_request=items_per_request,
                                                        progress=p))
    r = run.result
    report_stage(run, "proposed " + ", ".join(f"{k} {v}" for k, v in r.proposed.items())
                 + ("; flagged " + ", ".join(f"{k} {v}" for k, v in r.flagged.items() if v) if any(r.flagged.values()) else ""))


def accept(
    lang: str = LangOpt,
    item: Optional[list[str]] = typer.Option(None, "--item", help="Only these item ids"),
    reviewer: str = typer.Option(..., "--reviewer", envvar="BUILDER_REVIEWER", help="Who is accepting"),
    include_ambiguous: bool = typer.Option(False, "--include-ambiguous"),
    workspace: Optional[Path] = WorkspaceOpt,
) -> None:
    """Mark proposals verified without Label Studio (recorded as this reviewer's decision)."""
    ws = open_ws(workspace)
    for lg in langs(ws, lang):
        try:
            s = accept_proposals(ws, lg.code, reviewer=reviewer, item_ids=item, include_ambiguous=include_ambiguous)
        except ValueError as exc:
            fail(exc)
        out.print(f"{lg.code}: accepted {s.accepted}, left ambiguous {s.skipped_ambiguous}, already verified {s.already_verified}")


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
    ws = open_ws(workspace)
    targets = langs(ws, lang)
    run = llm_stage(ws, "generate", properties, llm_settings(offline, dry_run, batch, concurrency),
                    lambda c, p, scope: generate_stage(ws, c, targets, scope=scope, progress=p))
    r = run.result
    report_stage(run, "generated " + ", ".join(f"{k} {v}" for k, v in r.generated.items())
                 + "; flagged " + ", ".join(f"{k} {v}" for k, v in r.flagged.items())
                 + "; waiting for verified words " + ", ".join(f"{k} {v}" for k, v in r.blocked.items()))


def demo(
    workspace: Path = typer.Option(Path("demo-workspace"), "--workspace", "-w", help="The demo's folder (re-running resumes)"),
    auto_review: bool = typer.Option(False, "--auto-review", help="A scripted curator accepts every draft through Label Studio's API"),
    model: Optional[str] = typer.Option(None, "--model", help="Evaluate this model (a folder, a GGUF file, a Hub id), or "
                                        "'toy' for a toy trained on the spot [default: SmolLM2-135M-Instruct]"),
) -> None:
    """The main job on the bundled sample: seeds, translation, review, sentences, M2C, release, evaluation, report."""
    from builder.cli.demo import run_demo

    try:
        run_demo(workspace, out, auto_review=auto_review, model=model)
    except Exception as exc:  # noqa: BLE001 - any stage's failure ends as one line
        fail(exc)
