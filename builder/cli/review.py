"""`builder review …`: Label Studio for curators, and their decisions back into the workspace.

The `annotation` package (and with it Label Studio's SDK, a second or two to import) is loaded by each
command that talks to the server, so that the other commands start at once.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from builder import reviews
from builder.cli.common import (
    JsonOpt,
    LangOpt,
    ReaskOpt,
    WorkspaceOpt,
    err,
    fail,
    flag_scripts,
    langs,
    llm_options,
    llm_stage,
    open_ws,
    out,
    report_stage,
    show_steps,
    workspace_dir,
)
from builder.languages import label, registry
from builder.llm.config import LLMSettings
from builder.next_steps import Step, command, next_steps, stage_steps
from builder.review_stages import review_stage, stage_names

review_app = typer.Typer(help="Expert review in Label Studio: serve, push, pull, re-propose, status.", no_args_is_help=True)


@review_app.command("serve")
def review_serve(
    host: str = typer.Option("127.0.0.1", help="Bind address"),
    port: int | None = typer.Option(None, help="Port [default: a free one]"),
    allow_remote: bool = typer.Option(False, "--allow-remote", help="Allow binding to a non-loopback address"),
    show_token: bool = typer.Option(False, "--show-token", help="Print the API token"),
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Start Label Studio for this workspace (installing it into its own environment when missing)."""
    from annotation.server import serve

    ws = open_ws(workspace)
    conn = serve(ws.directory, host=host, port=port, allow_remote=allow_remote, log=err.print)
    out.print(f"Label Studio is up at {conn.url} (user admin@builder.local; password and token in "
              f"{ws.directory / 'label-studio'}, mode 0600)")
    if show_token:
        out.print(conn.token)


@review_app.command("stop")
def review_stop(workspace: Path | None = WorkspaceOpt) -> None:
    """Stop this workspace's Label Studio (never one that another workspace started)."""
    from annotation.server import stop

    out.print("stopped" if stop(workspace_dir(workspace), log=err.print) else "this workspace runs no server")


@review_app.command("push")
def review_push(
    stage: str = typer.Option("translation", help=" | ".join(stage_names())),
    lang: str = LangOpt,
    limit: int | None = typer.Option(None, help="At most this many tasks per language"),
    overlap: int = typer.Option(1, min=1, help="Curators per task for the overlapping share"),
    overlap_share: float = typer.Option(0.0, min=0.0, max=1.0, help="Share of tasks that go to --overlap curators"),
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Push proposals for review; repeated pushes skip unchanged tasks and update changed ones in place.

    An adjudication stage (`adjudication` for translations, `adjudicate-pairs`, `adjudicate-forms`,
    `adjudicate-judge`) pushes the items whose curators disagree to its own project."""
    from annotation.review import push
    from annotation.server import connect

    ws = open_ws(workspace)
    for lg in langs(ws, lang):
        s = push(ws, connect(ws.directory, log=err.print), lg.code, stage=stage, limit=limit, overlap=overlap,
                 overlap_share=overlap_share)
        removed = f", duplicates removed {s.duplicates_removed}" if s.duplicates_removed else ""
        out.print(f"{stage} {lg.code}: created {s.created}" + (f" ({s.revised} for items asked again; their old tasks are "
                                                                "closed, with their annotations)" if s.revised else "")
                  + f", updated {s.updated}, unchanged {s.unchanged}{removed}")


@review_app.command("pull")
def review_pull(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also list each new, updated and deleted annotation"),
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Pull every annotation back into the workspace; accepted and corrected words become verified.

    Says per stage and language how many annotations are new, updated and deleted and what they decide."""
    from annotation.review import pull
    from annotation.server import connect

    ws = open_ws(workspace)
    s = pull(ws, connect(ws.directory, log=err.print))
    reg = registry(ws)
    out.print(f"annotations: {s.new} new, {s.updated} updated, {s.unchanged} unchanged, {s.deleted} deleted in Label Studio "
              f"(no longer counted); newly verified {s.verified}")
    for (stage, lang), p in s.by_stage().items():
        said = ", ".join(f"{decision} {n}" for decision, n in sorted(p.said.items()))
        out.print(f"  {stage} {label(lang, reg)}: {p.new} new, {p.updated} updated, {p.deleted} deleted"
                  + (f"; {said}" if said else ""), markup=False, highlight=False)
        if verbose:
            for c in (c for c in s.changes if (c.stage, c.lang) == (stage, lang)):
                out.print(f"    {c.item_id}: {c.said} by {c.reviewer} ({c.change})", markup=False, highlight=False)
    for (stage, lang), n in sorted(s.ignored.items()):
        err.print(f"{stage} {lang}: ignored {n} task{'s' if n != 1 else ''} this workspace did not push (another "
                  "workspace's, or made by hand in Label Studio); nothing of them was recorded", markup=False, highlight=False)
    if s.withdrawn:
        out.print(f"{s.withdrawn} verified word{'s' if s.withdrawn != 1 else ''} withdrawn: the decision that verified "
                  f"{'them' if s.withdrawn != 1 else 'it'} no longer holds")
    for note in s.removed:
        err.print(note, markup=False, highlight=False)
    if s.forms:
        out.print("inflection forms: " + ", ".join(f"{k} {v}" for k, v in sorted(s.forms.items())))
    for (stage, lang), n in sorted(s.disagreements.items()):
        push_them = command(ws, "review", "push", "--stage", review_stage(stage).adjudication, "--lang", lang)
        out.print(f"{n} new disagreement{'s' if n != 1 else ''} in {stage} {lang}, held until adjudicated: "
                  f"`{push_them}` pushes {'them' if n != 1 else 'it'} to the adjudicators", markup=False, highlight=False)
    flag_scripts(ws)
    show_steps(ws, next_steps(ws))


@review_app.command("repropose")
@llm_options
def review_repropose(
    lang: str = LangOpt,
    stage: str = typer.Option("translation", help="translation (words back to translation) | sentences (pairs back to generation)"),
    reask_flagged: bool = ReaskOpt,
    workspace: Path | None = WorkspaceOpt,
    *,
    llm: LLMSettings,
) -> None:
    """Send rejected and ambiguous items back to the LLM with the curator's comment; an item the LLM fails stays
    rejected, and later runs ask it again with the reason."""
    from builder.generate import regenerate
    from builder.translate import repropose

    if stage not in ("translation", "sentences"):
        fail(f"--stage must be translation or sentences, not {stage!r}")
    ws = open_ws(workspace)
    for lg in langs(ws, lang):
        rejected = reviews.rejected_items(ws, lg.code) if stage == "translation" else reviews.rejected_pairs(ws, lg.code)
        if not rejected:
            out.print(f"{lg.code}: nothing rejected")
            continue
        if stage == "translation":
            run = llm_stage(ws, "repropose", None, llm, lambda c, p, scope, lg=lg, rejected=rejected: repropose(
                ws, c, lg, rejected, reask_flagged=reask_flagged))
            written, flags = run.result, "repropose"
            report_stage(run, f"{lg.code}: {written} new revision(s)")
        else:
            run = llm_stage(ws, "regenerate", None, llm, lambda c, p, scope, lg=lg, rejected=rejected: regenerate(
                ws, c, lg, rejected, progress=p, reask_flagged=reask_flagged))
            written, flags = run.result.generated[lg.code], "regenerate"
            report_stage(run, f"{lg.code}: {written} pair(s) written again, {run.result.flagged[lg.code]} flagged (still rejected)")
        review = ("review", "push", "--lang", lg.code) + (("--stage", "sentences") if stage == "sentences" else ())
        show_steps(ws, ([Step(lang=lg.code, stage=stage, what=f"{written} rewritten for curators to review", command=command(ws, *review))]
                    if written else []) + stage_steps(ws, flags, [lg.code]))


@review_app.command("status")
def review_status_cmd(workspace: Path | None = WorkspaceOpt, as_json: bool = JsonOpt) -> None:
    """Per stage and language: pending, decisions, skipped, open disagreements, adjudicated, agreement, reviewers."""
    ws = open_ws(workspace)
    rows = reviews.review_status(ws)
    reg = registry(ws)
    if as_json:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return
    table = Table()
    for col in ("stage", "lang", "pending", "accept", "corrected", "fix", "reject", "ambiguous", "false negative", "keep",
                "skipped", "disagree", "adjudicated", "alpha", "text exact", "chrF", "reviewers"):
        table.add_column(col)

    def num(v, fmt="{:.2f}"):
        return "—" if v is None else fmt.format(v)

    for r in rows:
        agr = r.get("agreement") or {}
        table.add_row(r["stage"], label(r["lang"], reg), *(str(r.get(k, "—")) for k in ("pending", "accept", "corrected", "fix", "reject",
                                                                           "ambiguous", "false negative", "keep", "skipped")),
                      str(r.get("disagreements", "")), str(r.get("adjudicated", "")), num(agr.get("alpha")),
                      num(agr.get("exact_match")), num(agr.get("chrf"), "{:.1f}"), ", ".join(r["reviewers"]))
    out.print(table)
    show_steps(ws, next_steps(ws))
