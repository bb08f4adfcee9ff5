"""`builder language …`: list the declared languages, declare a new one."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from builder import languages as languages_mod
from builder.cli.common import JsonOpt, WorkspaceOpt, fail, open_ws, out, workspace_dir
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


@language_app.command("add")
def language_add(
    code: str,
    name: str = typer.Option(...),
    typology: str = typer.Option(..., help="analytic | inflectional | agglutinative"),
    family: str = typer.Option(...),
    script: str = typer.Option(..., help="ISO 15924 code, e.g. Latn"),
    rtl: bool = typer.Option(False, "--rtl", help="Written right to left"),
    no_spaces: bool = typer.Option(False, "--no-spaces", help="Words are not separated by spaces"),
    native_name: str | None = typer.Option(None),
    meta_prompt: str | None = typer.Option(None, help="Metalinguistic prompt with {property}, {word1}, {word2}"),
    notes: str = typer.Option("", help="Guidance for sentence generation in this language"),
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Declare a new language; every stage then accepts its code."""
    ws = open_ws(workspace)
    try:
        lang = languages_mod.declare(
            ws, code=code, name=name, native_name=native_name, typology=typology, family=family, script=script,
            direction="rtl" if rtl else "ltr", spaced=not no_spaces, meta_prompt=meta_prompt, generation_notes=notes,
        )
    except Exception as exc:  # noqa: BLE001 - pydantic and duplicate errors alike
        fail(exc)
    out.print(f"declared {lang.code} ({lang.name}, {lang.typology}, {lang.family}, {lang.script})")
