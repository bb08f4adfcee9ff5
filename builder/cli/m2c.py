"""`builder lexicon …` and `builder templates …`: M2C inflection tables and templates."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from builder.cli.common import (
    ReaskOpt,
    TemplatesOpt,
    WorkspaceOpt,
    err,
    fail,
    llm_options,
    open_ws,
    out,
    report_stage,
    show_steps,
)
from builder.languages import registry
from builder.llm.config import LLMSettings
from builder.m2c.fills import needs, propose_forms, stand_in_resolver
from builder.m2c.language import available
from builder.m2c.lexicon import import_unimorph, list_forms, verify_fills
from builder.m2c.render import render_tests
from builder.m2c.template_files import load_file, template_files
from builder.next_steps import review_steps, stage_steps
from builder.runner import run_stage

lexicon_app = typer.Typer(help="M2C inflection tables: import UniMorph, verify proposed forms, show.", no_args_is_help=True)
templates_app = typer.Typer(help="M2C templates: check, fill missing forms with the LLM, render tests.", no_args_is_help=True)


def _m2c_langs(spec: str) -> list[str]:
    have = available()
    codes = have if spec == "all" else [c.strip() for c in spec.split(",") if c.strip()]
    unknown = [c for c in codes if c not in have]
    if unknown:
        fail(f"no M2C language data for {', '.join(unknown)} (have: {', '.join(have)})")
    return codes


@lexicon_app.command("import-unimorph")
def import_unimorph_cmd(
    path: Path = typer.Argument(..., exists=True, dir_okay=False, help="UniMorph TSV: lemma<TAB>form<TAB>features"),
    lang: str = typer.Option(..., "--lang", "-l", help="A declared language's code (no M2C language file needed)"),
    needs_review: bool = typer.Option(False, "--needs-review", help="Import as proposed forms for curators to verify"),
    strict: bool = typer.Option(False, "--strict", help="Refuse a label that is no feature of the language's dimensions "
                                "(by default it is kept as the file's own feature)"),
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Import a UniMorph inflection table; a bad line fails the whole file (file:line:field), nothing written."""
    ws = open_ws(workspace)
    s = import_unimorph(ws, path, lang, verified=not needs_review, strict=strict)
    out.print(f"{path}: {s.lines} line(s), {s.new} new form(s), {s.existing} already there, "
              f"{s.variants} variant(s) of a bundle already given (kept the first)", markup=False)
    for what, counts in (("mapped", s.mapped), ("kept as the file's own features", s.kept), ("ignored", s.ignored)):
        if counts:
            out.print(f"  {what}: " + ", ".join(f"{label} ({n} line(s))" for label, n in counts.most_common()), markup=False)


@lexicon_app.command("verify")
def verify_cmd(
    lang: str = typer.Option(..., "--lang", "-l"),
    lemma: str = typer.Option(..., "--lemma"),
    reviewer: str = typer.Option(..., "--reviewer", envvar="BUILDER_REVIEWER"),
    form: list[str] | None = typer.Option(None, "--form", help="A correction BUNDLE=FORM (repeatable)"),
    reject: bool = typer.Option(False, "--reject", help="Reject the lemma's proposed forms"),
    comment: str = typer.Option("", "--comment"),
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Verify (or correct, or reject) a lemma's proposed forms outside Label Studio."""
    ws = open_ws(workspace)
    fixes = {}
    for f in form or []:
        bundle, eq, value = f.partition("=")
        if not eq:
            fail(f"--form {f!r}: write BUNDLE=FORM")
        fixes[bundle] = value
    decision = "reject" if reject else "fix" if fixes else "accept"
    s = verify_fills(ws, _m2c_langs(lang)[0], lemma, reviewer=reviewer, decision=decision, forms=fixes, comment=comment)
    out.print(f"{lemma}: verified {s.verified}, corrected {s.corrected}, rejected {s.rejected}, already verified {s.already}")


@lexicon_app.command("show")
def show_cmd(
    lang: str = typer.Option(..., "--lang", "-l"),
    lemma: str | None = typer.Option(None, "--lemma"),
    status: str | None = typer.Option(None, "--status", help="proposed | verified | rejected"),
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """The lexicon's forms."""
    table = Table()
    for col in ("lemma", "pos", "features", "form", "status", "source", "reviewer"):
        table.add_column(col)
    for r in list_forms(open_ws(workspace), lang, lemma=lemma, status=status):
        table.add_row(r["lemma"], r["pos"], r["features"], r["form"], r["status"], r["source"], r["reviewer"] or "")
    out.print(table)


@templates_app.command("check")
def check_cmd(lang: str = typer.Option("all", "--lang", "-l"), templates: Path | None = TemplatesOpt) -> None:
    """Compile every template and print how many fills each has (lexicon placeholders are counted as
    if every lemma had its forms)."""
    for code in _m2c_langs(lang):
        for path in template_files(code, templates):
            for tt in load_file(path, resolve=stand_in_resolver, lang=code):
                out.print(f"{tt.template_id}: {len(tt.template)} fills, renders {min(tt.n, len(tt.template))}")


@templates_app.command("fill")
@llm_options
def fill_cmd(
    lang: str = typer.Option(..., "--lang", "-l"),
    templates: Path | None = TemplatesOpt,
    reask_flagged: bool = ReaskOpt,
    workspace: Path | None = WorkspaceOpt,
    *,
    llm: LLMSettings,
) -> None:
    """The LLM proposes the forms the templates need and the lexicon lacks (again for flagged lemmas, with the
    reason); curators then verify them."""
    ws = open_ws(workspace)
    for code in _m2c_langs(lang):
        todo = needs(ws, code, templates)
        if not todo:
            out.print(f"{code}: every lexicon form the templates need is in the lexicon")
            continue
        record = registry(ws)[code]
        order = needs(ws, code, templates, proposals_missing=True)
        run = run_stage(ws, llm, "fill", lambda c, p, todo=todo, record=record, order=order: propose_forms(
            ws, c, record, todo, order=order, reask_flagged=reask_flagged, progress=p), err)
        report_stage(run, f"{code}: proposed {run.result.proposed} form(s) for {run.result.lemmas} lemma(s)"
                     + (f"; flagged {', '.join(run.result.flagged)}" if run.result.flagged else ""))
        show_steps(ws, stage_steps(ws, "fill", [code], ("--templates", str(templates)) if templates else ())
                   + review_steps(ws, "inflections", [code]))


@templates_app.command("render")
def render_cmd(
    lang: str = typer.Option(..., "--lang", "-l"),
    templates: Path | None = TemplatesOpt,
    seed: int = typer.Option(0, "--seed"),
    n: int | None = typer.Option(None, "--n", help="Tests per template [default: each template's n; -1: all]"),
    include_unverified: bool = typer.Option(False, "--include-unverified", help="Preview with proposed forms (verified=False)"),
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Render the templates into the workspace's m2c_tests (verified lexicon forms only, by default)."""
    ws = open_ws(workspace)
    for code in _m2c_langs(lang):
        s = render_tests(ws, code, root=templates, seed=seed, n=n, include_unverified=include_unverified)
        out.print(f"{code}: {s.templates} template(s), {s.tests} test(s) ({s.new} new, {s.removed} removed, "
                  f"{s.unverified} unverified)")
        for path, why in s.waiting_files.items():
            err.print(f"[yellow]{path}: waiting for verified forms: {why}[/yellow]")
        if s.waiting_lemmas:
            err.print(f"[yellow]{code}: lemmas left out for want of verified forms: "
                      + "; ".join(f"{k} ({', '.join(v)})" for k, v in sorted(s.waiting_lemmas.items())) + "[/yellow]")
