"""`builder publish`: checks, then an atomic, immutable, versioned release (and optionally the Hub).

Order matters: the version and Hub prerequisites are validated and every release check runs before
anything is written; a dry run stops there. The release is then built beside the store and enters
it in one step (see `store`). Nothing here changes the workspace.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from builder.errors import BuilderError
from builder.flags import list_flags
from builder.languages import registry
from builder.releases import hub as hub_mod
from builder.releases import rows as rows_mod
from builder.releases import versions as V
from builder.releases.checks import BLOCKING, AuditFlags, CheckReport, ReleaseCheckError, run_checks
from builder.releases.declarations import released
from builder.releases.diff import diff_tables
from builder.releases.layout import write_release
from builder.releases.reading import LocalSource
from builder.releases.stats import release_stats
from builder.releases.store import ReleaseStore, ReleaseStoreError
from builder.releases.waivers import list_waivers
from builder.workspace.store import Workspace, collector_paused, now

DEFAULT_LICENSE = "cc-by-4.0"
DEFAULT_NAME = "XCOMPS"
DRY_RUN_BUMP: V.Bump = "patch"  # a dry run given no version checks as the next patch would be: the checks need no number


class ReleaseError(BuilderError):
    pass


class PublishRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    target: Path
    version: str | None = None
    bump: V.Bump | None = None
    hub: str | None = None
    dry_run: bool = False
    require_complete: bool = False
    exclude_unverified: bool = False
    langs: list[str] | None = None
    notes: str = ""
    pretty_name: str = DEFAULT_NAME
    license: str = DEFAULT_LICENSE


class PublishResult(BaseModel):
    version: str
    parent: str | None
    dry_run: bool
    report: CheckReport
    counts: dict[str, int]
    changes: dict[str, dict[str, int]]
    path: Path | None = None
    commit: str | None = None
    hub_url: str | None = None
    timings: dict[str, float] = {}


def default_target(ws: Workspace) -> Path:
    """Releases live beside the data they come from: `<workspace>/releases`."""
    return ws.directory / "releases"


def audit_flags(ws: Workspace) -> AuditFlags:
    """The pair audits' open flags, the pair waivers and the languages' scripts, for the release check."""
    reg = registry(ws)
    flags: dict[tuple[str, str], dict[str, str]] = {}
    similarity = {}
    for f in list_flags(ws):
        if f.stage in BLOCKING:
            flags.setdefault((f.item_id, f.lang), {})[f.stage] = f.reason
        elif f.stage == "similarity":
            similarity[f.item_id] = f.reason
    return AuditFlags(languages=reg, open=flags,
                      similarity=similarity,
                      waived={(w["item_id"], w["lang"]): f"{w['reason']}, by {w['waived_by']}"
                              for w in list_waivers(ws) if w["kind"] == "pair"})


def _changelog(source: LocalSource | None, versions: list[str], entry: dict) -> list[dict]:
    """This version's entry, then every earlier version's from its manifest, newest first."""
    earlier = []
    for v in reversed(versions):
        m = source.manifest(v)
        earlier.append({k: m.get(k) for k in ("version", "parent", "created_at", "notes", "changes")})
    return [entry, *earlier]


def publish(ws: Workspace, req: PublishRequest, *, api=None) -> PublishResult:
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        timings[name] = round(time.perf_counter() - clock, 4)
        clock = time.perf_counter()

    store = ReleaseStore(req.target)
    existing = store.versions()
    bump = DRY_RUN_BUMP if req.dry_run and req.version is None and req.bump is None else req.bump
    version = V.next_version(existing, version=req.version, bump_part=bump)
    if req.hub and not req.dry_run:
        token = hub_mod.require_token(req.hub)
        api = api or hub_mod.api_for(token)
    parent = existing[-1] if existing else None
    langs = req.langs or rows_mod.languages_with_data(ws)
    configs = {**rows_mod.pair_rows(ws, langs), **rows_mod.m2c_rows(ws, langs)}
    if not configs:
        raise ReleaseError(f"nothing to release: no sentence pairs or M2C tests in {', '.join(langs) or 'any language'}")
    lap("read workspace")
    source = LocalSource(store.root) if parent else None
    previous = {c: source.read_table(parent, c) for c in source.manifest(parent)["configs"]} if source else {}
    with collector_paused():  # the checks' sets and dicts of a million rows' ids and sentences, none in a cycle
        report, kept = run_checks(configs, previous=previous, parent=parent, require_complete=req.require_complete,
                                  exclude_unverified=req.exclude_unverified, audits=audit_flags(ws), languages=langs)
    lap("checks")
    if not report.ok:
        raise ReleaseCheckError(report)
    languages = released(registry(ws), sorted({r.lang for r in kept.values()}))
    tables = {name: rows.table() for name, rows in kept.items()}
    changes = {d.config: d.counts() for d in diff_tables(previous, tables)} if previous else {}
    counts = {name: t.num_rows for name, t in sorted(tables.items())}
    lap("tables and diff")
    result = PublishResult(version=version, parent=parent, dry_run=req.dry_run, report=report, counts=counts,
                           changes=changes, timings=timings)
    if req.dry_run:
        result.timings = timings
        return result
    if req.hub:
        hub_mod.ensure_new(api, req.hub, version)
    with collector_paused():  # the same for the curators' opinions and the overlap table
        stats = release_stats(ws, kept, rows_mod.models_used(ws, kept))
    created_at = now().isoformat(timespec="seconds")
    entry = {"version": version, "parent": parent, "created_at": created_at, "notes": req.notes, "changes": changes}
    changelog = _changelog(source, existing, entry)
    message = f"Release {version}" + (f"\n\n{req.notes}" if req.notes else "")
    lap("statistics")
    with store.lock():  # and the store repaired, if a publish was killed
        if store.latest() != parent:
            raise ReleaseStoreError(f"{store.root} changed while publishing (latest is now {store.latest()}); run again")
        with store.build_dir() as tmp:
            folder = tmp / "release"
            folder.mkdir()
            manifest = write_release(folder, tables=tables, languages=languages, version=version,
                                     parent=parent, created_at=created_at, stats=stats, changelog=changelog,
                                     changes=changes, notes=req.notes, pretty_name=req.pretty_name, license=req.license)
            lap("write")
            commit = store.commit(folder, version, message, index=tmp / "index")
            store.check_commit(commit, manifest["files"])
            store.tag(commit, version, message)
            lap("commit, verify, tag")
        store.sync_worktree()
        lap("check out")
    result.path, result.commit = store.root, commit
    if req.hub:
        result.hub_url = hub_mod.upload(store, version, req.hub, api)
        lap("hub")
    result.timings = timings
    return result
