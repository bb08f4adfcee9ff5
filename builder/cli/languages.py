"""`builder language …`: list the declared languages, declare a new one."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from builder import languages as languages_mod
from builder.cli.common import JsonOpt, WorkspaceOpt, open_ws, out, workspace_dir
from builder.workspace.store import WorkspaceError, open_workspace

language_app = typer.Typer(help="Languages: list the declared ones, declare a new one.", no_args_is_help=True)


@language_app.command("list")
def language_list(workspace: Path | None = WorkspaceOpt, as_json: bool = JsonOpt) -> None:
    """The declared languages (the built-in ones without a workspace)."""
    try:
        ws = open_workspace(workspace_dir(workspace))
    except WorkspaceError:
        ws = None
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


# How `language add` names each field of a declaration in an error.
OPTIONS = {"code": "CODE", "name": "--name", "native_name": "--native-name", "typology": "--typology", "family": "--family",
           "script": "--script", "direction": "--rtl/--ltr", "spaced": "--no-spaces/--spaces", "meta_prompt": "--meta-prompt",
           "generation_notes": "--notes"}


@language_app.command("add")
def language_add(
    code: str,
    name: str | None = typer.Option(None, help="English name (required for a new language)"),
    typology: str | None = typer.Option(None, help="analytic | inflectional | agglutinative (required for a new language)"),
    family: str | None = typer.Option(None, help="Language family (required for a new language)"),
    script: str | None = typer.Option(None, help="ISO 15924 code, e.g. Latn, Deva (required for a new language)"),
    rtl: bool | None = typer.Option(None, "--rtl/--ltr", help="Written right to left [default: --ltr]"),
    no_spaces: bool | None = typer.Option(None, "--no-spaces/--spaces", help="Words are not separated by spaces [default: --spaces]"),
    native_name: str | None = typer.Option(None),
    meta_prompt: str | None = typer.Option(None, help="Metalinguistic prompt with {property}, {word1}, {word2}"),
    notes: str | None = typer.Option(None, help="Guidance for sentence generation in this language"),
    update: bool = typer.Option(False, "--update", help="Change a declared language: the fields given, the others kept"),
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Declare a new language (code checked against ISO 639, script against ISO 15924); every stage then accepts
    its code. An existing code is refused unless `--update`, which prints what changes, field by field."""
    ws = open_ws(workspace)
    done = languages_mod.declare(
        ws, update=update, where=lambda f: OPTIONS.get(f, f), code=code, name=name, native_name=native_name,
        typology=typology, family=family, script=script, direction=None if rtl is None else "rtl" if rtl else "ltr",
        spaced=None if no_spaces is None else not no_spaces, meta_prompt=meta_prompt, generation_notes=notes,
    )
    lang = done.language
    if done.new:
        out.print(f"declared {lang.code} ({lang.name}, {lang.typology}, {lang.family}, {lang.script})", markup=False)
        return
    out.print(f"updated {lang.code} ({lang.name}): " + (f"{len(done.changes)} field(s) changed" if done.changes
                                                          else "nothing changed"), markup=False)
    for c in done.changes:
        out.print(f"  {OPTIONS.get(c.field, c.field)}: {c.old!r} -> {c.new!r}", markup=False, highlight=False)
