"""`builder seeds import`: COMPS pairs, concept categories and expert seed translations."""

from __future__ import annotations

from pathlib import Path

import typer

from builder.cli.common import WorkspaceOpt, open_ws, out
from builder.seeds import import_seeds

seeds_app = typer.Typer(help="Seed data: COMPS pairs, concept categories, expert seed translations.", no_args_is_help=True)


@seeds_app.command("import")
def seeds_import(paths: list[Path], workspace: Path | None = WorkspaceOpt) -> None:
    """Import COMPS JSONL, concept categories and expert seed translations (files or folders)."""
    ws = open_ws(workspace)
    s = import_seeds(ws, *paths)
    out.print(f"imported {s.files} file(s): {s.concepts} new concepts, {s.properties} new properties, "
              f"{s.pairs} new pairs, {s.seed_translations} new seed translations")
