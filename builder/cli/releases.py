"""`builder publish` and `builder releases …`: cut a release, list, diff, verify and export them, waive items."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from builder.cli.common import WorkspaceOpt, codes, err, fail, open_ws, out, workspace_dir
from builder.releases.diff import diff
from builder.releases.lmeval import export_lm_eval
from builder.releases.publish import DEFAULT_LICENSE, DEFAULT_NAME, DRY_RUN_BUMP, PublishRequest, default_target
from builder.releases.publish import publish as publish_release
from builder.releases.reading import open_source
from builder.releases.verify import verify
from builder.releases.waivers import list_waivers, waive

releases_app = typer.Typer(help="Published releases: list, diff, verify, export; waivers for the release checks.",
                           no_args_is_help=True)
SourceOpt = typer.Option(None, "--from", help="Release store folder or Hub id ORG/NAME [default: <workspace>/releases]")


def _source(source: str | None, workspace: Path | None) -> str | Path:
    """--from as given (a folder or a Hub id), else the workspace's store (always a folder)."""
    return source or workspace_dir(workspace) / "releases"


def publish(
    version: str | None = typer.Option(None, "--version", help="The new version, X.Y.Z"),
    bump: str | None = typer.Option(None, "--bump", help="Or bump the latest version: major | minor | patch"),
    to: Path | None = typer.Option(None, "--to", help="Release store (a git repository) [default: <workspace>/releases]"),
    hub: str | None = typer.Option(None, "--hub", help="Also upload to this Hub dataset ORG/NAME (token from HF_TOKEN)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Run the checks and show what would be released; write nothing "
                                 "(without --version or --bump, as the next patch)"),
    require_complete: bool = typer.Option(False, "--require-complete", help="Fail unless every language has every pair"),
    exclude_unverified: bool = typer.Option(False, "--exclude-unverified", help="Leave unverified, unwaived items out instead of failing"),
    lang: str | None = typer.Option(None, "--lang", "-l", help="Only these languages, comma-separated [default: all with data]"),
    message: str = typer.Option("", "--message", "-m", help="Release notes for the changelog"),
    name: str | None = typer.Option(None, "--name", help="Pretty name in the card [default: XCOMPS]"),
    license: str | None = typer.Option(None, "--license", help="License id for the card [default: cc-by-4.0]"),
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Publish reviewed data as a new immutable version (checks first; nothing is written if they fail)."""
    if bump not in (None, "major", "minor", "patch"):
        fail(f"--bump must be major, minor or patch, not {bump!r}")
    ws = open_ws(workspace)
    req = PublishRequest(target=to or default_target(ws), version=version, bump=bump, hub=hub, dry_run=dry_run,
                         require_complete=require_complete, exclude_unverified=exclude_unverified,
                         langs=codes(lang), notes=message,
                         pretty_name=name or DEFAULT_NAME, license=license or DEFAULT_LICENSE)
    result = publish_release(ws, req)
    out.print(result.report.render(), highlight=False, markup=False)
    rows = ", ".join(f"{c} {n}" for c, n in result.counts.items())
    change = "; ".join(f"{c}: +{d['added']} -{d['removed']} ~{d['changed']}" for c, d in result.changes.items())
    parent = f" (after {result.parent})" if result.parent else " (first release)"
    if result.dry_run:
        assumed = f" (no --version or --bump given: shown as the next {DRY_RUN_BUMP})" if not (version or bump) else ""
        out.print(f"dry run: would publish {result.version}{parent} to {req.target}{assumed}: {rows}", highlight=False)
        out.print(f"changes: {change or 'none' if result.parent else 'all new'}; nothing was written", highlight=False)
        return
    out.print(f"published {result.version}{parent} at {result.path} (tag v{result.version}, commit {result.commit[:12]}): {rows}",
              highlight=False)
    if result.parent:
        out.print(f"changes: {change or 'none'}", highlight=False)
    if result.hub_url:
        out.print(f"uploaded to {result.hub_url}", highlight=False)


@releases_app.command("list")
def list_cmd(source: str | None = SourceOpt, workspace: Path | None = WorkspaceOpt,
             as_json: bool = typer.Option(False, "--json")) -> None:
    """Published versions, newest first, with their time, parent and row counts."""
    src = open_source(_source(source, workspace))
    entries = [src.manifest(v) for v in reversed(src.versions())]
    if as_json:
        print(json.dumps([{k: m[k] for k in ("version", "parent", "created_at", "counts", "code_version")} for m in entries],
                         ensure_ascii=False, indent=1))
        return
    table = Table(title=str(src.name))
    for col in ("version", "parent", "created", "rows", "configs"):
        table.add_column(col)
    for m in entries:
        table.add_row(m["version"], m["parent"] or "—", m["created_at"], str(sum(m["counts"].values())), ", ".join(m["configs"]))
    out.print(table)


@releases_app.command("diff")
def diff_cmd(a: str, b: str, source: str | None = SourceOpt, workspace: Path | None = WorkspaceOpt,
             lang: str | None = typer.Option(None, "--lang", "-l", help="Only these configs, comma-separated"),
             as_json: bool = typer.Option(False, "--json")) -> None:
    """Item by item, per language: what version B added, removed and changed since A (before → after)."""
    d = diff(_source(source, workspace), a, b, configs=codes(lang))
    if as_json:
        print(d.model_dump_json(indent=1))
    else:
        out.print(d.render(), highlight=False, markup=False)


@releases_app.command("verify")
def verify_cmd(version: str | None = typer.Argument(None, help="One version [default: all, and the checked-out folder]"),
               source: Path | None = typer.Option(None, "--from", help="Release store [default: <workspace>/releases]"),
               workspace: Path | None = WorkspaceOpt) -> None:
    """Check every file against the sha256 in its version's release.json."""
    report = verify(source or _source(None, workspace), version)
    if not report.ok:
        for p in report.problems:
            err.print(p, highlight=False, markup=False)
        fail(f"{len(report.problems)} problem(s) in {', '.join(report.versions)}")
    out.print(f"ok: {report.files} file(s) in version(s) {', '.join(report.versions)} match their checksums")


@releases_app.command("export-lm-eval")
def export_lm_eval_cmd(version: str, out_dir: Path | None = typer.Option(None, "--out", help="[default: ./lm-eval-VERSION]"),
                       prefix: str = typer.Option("xcomps", help="Task name prefix"),
                       source: str | None = SourceOpt, workspace: Path | None = WorkspaceOpt) -> None:
    """Write lm-evaluation-harness task files: one multiple-choice task per language, and a group."""
    paths = export_lm_eval(_source(source, workspace), version, out_dir or Path(f"lm-eval-{version}"), prefix=prefix)
    out.print(f"wrote {len(paths)} task file(s) to {paths[0].parent}; run with "
              f"`lm_eval --include_path {paths[0].parent} --tasks {prefix} …`", highlight=False)


@releases_app.command("waive")
def waive_cmd(item: str, lang: str = typer.Option(..., "--lang", "-l"), reason: str = typer.Option(..., "--reason"),
              by: str = typer.Option(..., "--by", envvar="BUILDER_REVIEWER", help="Who waives it"),
              m2c: bool = typer.Option(False, "--m2c", help="ITEM is an M2C test id (default: a pair id)"),
              workspace: Path | None = WorkspaceOpt) -> None:
    """Let an unverified item be released, with the reason recorded (shown as review_status 'waived')."""
    waive(open_ws(workspace), "m2c" if m2c else "pair", item, lang, reason=reason, by=by)
    out.print(f"waived {item} in {lang}")


@releases_app.command("waivers")
def waivers_cmd(workspace: Path | None = WorkspaceOpt) -> None:
    """The recorded waivers."""
    rows = list_waivers(open_ws(workspace))
    table = Table()
    for col in ("lang", "kind", "item", "reason", "by", "when"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["lang"], r["kind"], r["item_id"], r["reason"], r["waived_by"], str(r["created_at"]))
    out.print(table)
