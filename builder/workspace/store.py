"""Opening, versioning and querying the workspace database.

Every write goes through `Workspace.transaction()`, so a stage either records a whole unit of work
(an LLM reply together with the proposals it yields) or nothing at all.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, func, inspect, select, text
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from builder.workspace import schema as t

DB_FILE = "workspace.sqlite"


class WorkspaceError(RuntimeError):
    """The workspace is missing, of an unknown schema version, or otherwise unusable."""


def now() -> datetime:
    return datetime.now(timezone.utc)


def default_dir() -> Path:
    return Path(os.environ.get("BUILDER_WORKSPACE", "workspace"))


def _url(directory: Path) -> str:
    return os.environ.get("BUILDER_DATABASE_URL") or f"sqlite:///{(directory / DB_FILE).resolve()}"


def engine_for(url: str) -> Engine:
    """An engine for a database URL; SQLite gets WAL, foreign keys and a busy time-out."""
    engine = create_engine(url, future=True)
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record) -> None:  # pragma: no cover - exercised implicitly
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

    return engine


def init_workspace(directory: Path | str | None = None) -> "Workspace":
    """Create (or re-open) a workspace; idempotent."""
    directory = Path(directory) if directory else default_dir()
    directory.mkdir(parents=True, exist_ok=True)
    engine = engine_for(_url(directory))
    t.metadata.create_all(engine)
    with engine.begin() as conn:
        version = conn.execute(select(t.meta.c.value).where(t.meta.c.key == "schema_version")).scalar()
        if version is None:
            conn.execute(t.meta.insert().values(key="schema_version", value=str(t.SCHEMA_VERSION)))
            conn.execute(t.meta.insert().values(key="created_at", value=now().isoformat()))
    return Workspace(directory, engine)


def open_workspace(directory: Path | str | None = None) -> "Workspace":
    directory = Path(directory) if directory else default_dir()
    if not os.environ.get("BUILDER_DATABASE_URL") and not (directory / DB_FILE).is_file():
        raise WorkspaceError(f"no workspace at {directory} (run `builder init {directory}` first)")
    engine = engine_for(_url(directory))
    with engine.connect() as conn:
        try:
            version = conn.execute(select(t.meta.c.value).where(t.meta.c.key == "schema_version")).scalar()
        except Exception as exc:  # noqa: BLE001 - any failure here means "not a workspace"
            raise WorkspaceError(f"{directory} is not a builder workspace: {exc}") from exc
    if version is None or int(version) > t.SCHEMA_VERSION:
        raise WorkspaceError(
            f"workspace schema version {version} is newer than this builder ({t.SCHEMA_VERSION}); upgrade builder"
        )
    if int(version) < t.SCHEMA_VERSION:
        _migrate(engine)
    return Workspace(directory, engine)


def _migrate(engine: Engine) -> None:
    """Schema changes so far only add tables and nullable columns; then record the new version."""
    t.metadata.create_all(engine)
    add_missing_columns(engine, t.metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(t.meta.update().where(t.meta.c.key == "schema_version").values(value=str(t.SCHEMA_VERSION)))


def add_missing_columns(engine: Engine, tables) -> None:
    """Add the (nullable) columns a newer schema gave these existing tables; rows keep NULL in them."""
    existing = inspect(engine)
    with engine.begin() as conn:
        for table in tables:
            have = {c["name"] for c in existing.get_columns(table.name)}
            for column in table.columns:
                if column.name not in have:
                    kind = column.type.compile(dialect=engine.dialect)
                    conn.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}"))


class Workspace:
    def __init__(self, directory: Path, engine: Engine) -> None:
        self.directory = directory
        self.engine = engine

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    def close(self) -> None:
        self.engine.dispose()

    # -- generic helpers -------------------------------------------------------------------------

    def upsert_ignore(self, conn: Connection, table, rows: list[dict[str, Any]]) -> int:
        """Insert rows whose primary key is new; existing rows are left untouched (idempotent import)."""
        if not rows:
            return 0
        if conn.dialect.name == "sqlite":
            stmt = sqlite_insert(table).on_conflict_do_nothing()
        else:
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            stmt = pg_insert(table).on_conflict_do_nothing()
        return conn.execute(stmt, rows).rowcount or 0

    def count(self, table) -> int:
        with self.engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(table)).scalar_one()

    def rows(self, stmt) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(stmt)]

    # -- languages ------------------------------------------------------------------------------

    def added_languages(self) -> list[dict[str, Any]]:
        return [r["data"] for r in self.rows(select(t.languages.c.data).order_by(t.languages.c.code))]

    def add_language(self, data: dict[str, Any]) -> None:
        with self.transaction() as conn:
            conn.execute(t.languages.delete().where(t.languages.c.code == data["code"]))
            conn.execute(t.languages.insert().values(code=data["code"], data=data, added_at=now()))
