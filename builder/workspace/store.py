"""Opening, versioning and querying the workspace database.

Every write goes through `Workspace.transaction()`, so a stage either records a whole unit of work
(an LLM reply together with the proposals it yields) or nothing at all.

A workspace is a folder. Its database is the folder's own SQLite file, or a PostgreSQL database
that `init_workspace(DIR, database_url=…)` recorded in the folder (`workspace.json`), so that it
belongs to that workspace alone: nothing else on the machine reads it from the environment. The
recorded URL never holds a password: libpq takes it from `PGPASSWORD` or `~/.pgpass`. Several
folders (one per machine or worker) may record the same URL: they are one shared workspace.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import Any

from filelock import FileLock
from sqlalchemy import Connection, Engine, Result, Table, create_engine, event, func, inspect, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError

from builder.errors import BuilderError
from builder.files import write_text
from builder.workspace import schema as t

SCHEMA_LOCK = "workspace schema"  # held while the schema is made or migrated (`exclusive`)
DB_FILE = "workspace.sqlite"
SERVER_FILE = "workspace.json"  # {"database_url": …}: the folder's database is on a PostgreSQL server
DRIVER = "postgresql+psycopg"
IDENTITY = "workspace_id"  # the meta key of the workspace's identity (`Workspace.identity`)


class WorkspaceError(BuilderError):
    """The workspace is missing, of an unknown schema version, or otherwise unusable."""


def now() -> datetime:
    return datetime.now(timezone.utc)


def default_dir() -> Path:
    return Path(os.environ.get("BUILDER_WORKSPACE", "workspace"))


def server_url(url: str) -> str:
    """A PostgreSQL URL as a workspace records it (with our driver), refused if it carries a password."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise WorkspaceError(f"not a database URL: {url!r} (expected postgresql://USER@HOST:PORT/DATABASE)") from exc
    shown = parsed.difference_update_query(["password"]).render_as_string(hide_password=True)
    if parsed.get_backend_name() not in ("postgresql", "postgres"):
        raise WorkspaceError(f"{shown}: a workspace database server must be PostgreSQL "
                             "(postgresql://USER@HOST:PORT/DATABASE); without --database-url it is the folder's SQLite file")
    if parsed.password is not None or "password" in parsed.query:
        raise WorkspaceError(f"{shown}: leave the password out of the URL, which the workspace folder records; "
                             "set PGPASSWORD (or a ~/.pgpass entry) where builder runs")
    return parsed.set(drivername=DRIVER).render_as_string(hide_password=False)


def workspace_url(directory: Path) -> str:
    """The URL of a workspace folder's database: the server it records, else its SQLite file."""
    recorded = directory / SERVER_FILE
    if recorded.is_file():
        try:
            return server_url(json.loads(recorded.read_text(encoding="utf-8"))["database_url"])
        except (ValueError, KeyError, TypeError) as exc:
            raise WorkspaceError(f"{recorded}: expected {{\"database_url\": \"postgresql://…\"}} ({exc})") from exc
    return f"sqlite:///{(directory / DB_FILE).resolve()}"


def _record_server(directory: Path, url: str) -> None:
    recorded = directory / SERVER_FILE
    if recorded.is_file():
        if workspace_url(directory) != url:
            raise WorkspaceError(f"{directory} already uses the database {workspace_url(directory)}; "
                                 f"a workspace keeps its database (make another folder for another one)")
        return
    if (directory / DB_FILE).exists():
        raise WorkspaceError(f"{directory} holds a SQLite workspace ({DB_FILE}); a database server needs a folder of its own")
    write_text(recorded, json.dumps({"database_url": url}, indent=1) + "\n")


DAMAGED = ("file is not a database", "database disk image is malformed")  # SQLite's words for a damaged file
CORRUPTED = ("XX001", "XX002")  # PostgreSQL's data_corrupted, index_corrupted


def engine_for(url: str) -> Engine:
    """An engine for a database URL; SQLite gets WAL, foreign keys and a busy time-out. A damaged database
    (and, on a server, a lost connection) fails with one `WorkspaceError` naming it and saying what to do."""
    try:
        engine = create_engine(url, future=True)
    except ModuleNotFoundError as exc:
        raise WorkspaceError(f"{make_url(url).render_as_string()} needs the {exc.name} driver: "
                             "pip install 'xbench-builder[postgresql]'") from exc

    @event.listens_for(engine, "handle_error")
    def _named(ctx) -> None:
        orig, shown = ctx.original_exception, engine.url.render_as_string()
        if engine.dialect.name == "sqlite" and any(words in str(orig) for words in DAMAGED):
            path = engine.url.database
            raise WorkspaceError(f"the workspace database {path} is damaged ({orig}): restore it from a backup, or "
                                 f"recover what is readable with `sqlite3 {path} .recover | sqlite3 recovered.sqlite` "
                                 f"and put that file in its place") from ctx.sqlalchemy_exception
        if getattr(orig, "sqlstate", None) in CORRUPTED:
            raise WorkspaceError(f"the workspace database {shown} reports damaged data ({str(orig).strip()}): ask its "
                                 "administrator to restore it from a backup (or REINDEX a damaged index)") from ctx.sqlalchemy_exception
        if ctx.is_disconnect and ctx.connection is not None:
            raise WorkspaceError(f"lost the connection to the workspace database {shown} ({str(orig).strip()}): check "
                                 "that the server is up, then run the command again (it resumes)") from ctx.sqlalchemy_exception
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


@contextmanager
def exclusive(engine: Engine, directory: Path, name: str) -> Iterator[None]:
    """Held by one process at a time among all that use the database, for an operation that must not run twice at once
    (making or migrating the schema, a push to one Label Studio project). On PostgreSQL a session advisory lock on a
    connection of its own, which covers workers on other machines; on SQLite, whose processes share one machine, a file
    lock in `directory` (the database's folder). Either ends with its holder: a killed process leaves no lock behind."""
    digest = hashlib.sha256(name.encode()).digest()
    if engine.dialect.name != "postgresql":
        with FileLock(directory / f".lock-{digest.hex()[:16]}"):
            yield
        return
    key = int.from_bytes(digest[:8], "big", signed=True)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})


def _connected(engine: Engine, directory: Path) -> Engine:
    """The engine, once a connection works; an unreachable server is one clear error naming it."""
    try:
        with engine.connect():
            return engine
    except OperationalError as exc:
        engine.dispose()
        raise WorkspaceError(f"cannot reach the database of workspace {directory} "
                             f"({engine.url.render_as_string()}): {str(exc.orig).strip()}") from exc


def init_workspace(directory: Path | str | None = None, *, database_url: str | None = None) -> Workspace:
    """Create (or re-open, migrating an older schema) a workspace; idempotent. `database_url`: its database on a PostgreSQL server."""
    directory = Path(directory) if directory else default_dir()
    directory.mkdir(parents=True, exist_ok=True)
    if database_url:
        _record_server(directory, server_url(database_url))
    engine = _connected(engine_for(workspace_url(directory)), directory)
    with exclusive(engine, directory, SCHEMA_LOCK):
        t.metadata.create_all(engine)
        with engine.begin() as conn:
            version = conn.execute(select(t.meta.c.value).where(t.meta.c.key == "schema_version")).scalar()
            if version is None:
                conn.execute(t.meta.insert().values(key="schema_version", value=str(t.SCHEMA_VERSION)))
                conn.execute(t.meta.insert().values(key="created_at", value=now().isoformat()))
                conn.execute(t.meta.insert().values(key=IDENTITY, value=uuid.uuid4().hex))
        if version is not None:
            _bring_up_to_date(engine, int(version), directory)
    return Workspace(directory, engine)


def open_workspace(directory: Path | str | None = None) -> Workspace:
    directory = Path(directory) if directory else default_dir()
    if not (directory / SERVER_FILE).is_file() and not (directory / DB_FILE).is_file():
        raise WorkspaceError(f"no workspace at {directory} (run `builder init {directory}` first)")
    engine = _connected(engine_for(workspace_url(directory)), directory)
    with engine.connect() as conn:
        try:
            version = conn.execute(select(t.meta.c.value).where(t.meta.c.key == "schema_version")).scalar()
        except WorkspaceError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure here means "not a workspace"
            raise WorkspaceError(f"{directory} is not a builder workspace: {exc}") from exc
    if version is None:
        raise WorkspaceError(f"{directory} is not a builder workspace: it records no schema version")
    if int(version) != t.SCHEMA_VERSION:
        with exclusive(engine, directory, SCHEMA_LOCK):  # another process may be migrating it: then it finds it done
            with engine.connect() as conn:
                version = conn.execute(select(t.meta.c.value).where(t.meta.c.key == "schema_version")).scalar()
            _bring_up_to_date(engine, int(version), directory)
    return Workspace(directory, engine)


def _bring_up_to_date(engine: Engine, version: int, directory: Path) -> None:
    if version > t.SCHEMA_VERSION:
        raise WorkspaceError(
            f"workspace schema version {version} is newer than this builder ({t.SCHEMA_VERSION}); upgrade builder"
        )
    if version < t.OLDEST_MIGRATED:
        raise WorkspaceError(
            f"workspace {directory} has schema version {version}, which keyed review rows by Label Studio's URL; this "
            f"builder migrates versions {t.OLDEST_MIGRATED} to {t.SCHEMA_VERSION}: start a new workspace (`builder init`)")
    if version < t.SCHEMA_VERSION:
        _migrate(engine)


def _migrate(engine: Engine) -> None:
    """Bring an older workspace to this schema in one transaction, then record the new version.

    New tables are created, new nullable columns and indexes added, and a workspace made before it had an identity
    gets one.
    """
    with engine.begin() as conn:
        t.metadata.create_all(conn)
        add_missing_columns(conn, t.metadata.sorted_tables)
        for index in (index for table in t.metadata.sorted_tables for index in table.indexes):
            index.create(conn, checkfirst=True)  # create_all makes a table's indexes only with the table
        upsert_ignore(conn, t.meta, [{"key": IDENTITY, "value": uuid.uuid4().hex}])
        conn.execute(t.meta.update().where(t.meta.c.key == "schema_version").values(value=str(t.SCHEMA_VERSION)))


def _insert(conn: Connection, table: Table):
    return (sqlite_insert if conn.dialect.name == "sqlite" else pg_insert)(table)


def upsert_ignore(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> int:
    """Insert the rows whose keys are new (any unique key); existing rows are left untouched. Returns how many went in.

    Safe against a concurrent writer of the same rows (PostgreSQL waits for it, then skips them).
    """
    if not rows:
        return 0
    # Counted from RETURNING: a driver's rowcount for many rows is not reliable (psycopg gives -1 for each batch).
    stmt = _insert(conn, table).on_conflict_do_nothing().returning(*table.primary_key.columns)
    return len(conn.execute(stmt, rows).all())


def upsert_replace(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Insert the rows, replacing the columns of a row whose primary key exists (a newer version of it)."""
    if not rows:
        return
    stmt = _insert(conn, table)
    keys = [c.name for c in table.primary_key.columns]
    columns = {name: stmt.excluded[name] for name in rows[0] if name not in keys}
    conn.execute(stmt.on_conflict_do_update(index_elements=keys, set_=columns), rows)


def add_missing_columns(conn: Connection, tables) -> None:
    """Add the (nullable) columns a newer schema gave these existing tables; rows keep NULL in them."""
    existing = inspect(conn)
    for table in tables:
        have = {c["name"] for c in existing.get_columns(table.name)}
        for column in table.columns:
            if column.name not in have:
                kind = column.type.compile(dialect=conn.dialect)
                conn.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}"))


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused meanwhile, for work that builds many acyclic records (rows as dicts,
    lists of them): each of its passes walks every live object, so on a COMPS-size workspace they made reading and
    settling 800,000 reviews grow faster than linearly (40% of review status's time at full size). Reference
    counting still frees everything; cycles made meanwhile wait for the next pass."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def as_dicts(result: Result) -> list[dict[str, Any]]:
    """A query's rows as dicts, with the column names looked up once."""
    keys = list(result.keys())
    with collector_paused():
        return [dict(zip(keys, row)) for row in result]


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

    @cached_property
    def identity(self) -> str:
        """The workspace's own random id, made once with it (or by its migration to schema 11): what tells its Label
        Studio projects from another workspace's on the same server. The folders of a shared workspace (one
        PostgreSQL database) have the same; a copied folder (a SQLite file) keeps its original's."""
        found = self.column(select(t.meta.c.value).where(t.meta.c.key == IDENTITY))
        if not found:
            raise WorkspaceError(f"the workspace {self.directory} records no identity ({IDENTITY} in its meta table)")
        return found[0]

    def exclusive(self, name: str) -> AbstractContextManager[None]:
        """Held by one process at a time among all that open this workspace (`exclusive`)."""
        return exclusive(self.engine, self.directory, name)

    # -- generic helpers -------------------------------------------------------------------------

    def upsert_ignore(self, conn: Connection, table: Table, rows: list[dict[str, Any]]) -> int:
        """Insert rows whose keys are new; existing rows are left untouched (idempotent import)."""
        return upsert_ignore(conn, table, rows)

    def count(self, table) -> int:
        return self.scalar(select(func.count()).select_from(table))

    def scalar(self, stmt) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(stmt).scalar_one()

    def column(self, stmt) -> list[Any]:
        """The first column of a query's rows: a million ids without a dict each."""
        with self.engine.connect() as conn:
            return list(conn.execute(stmt).scalars())

    def rows(self, stmt) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return as_dicts(conn.execute(stmt))

    # -- languages ------------------------------------------------------------------------------

    def added_languages(self) -> list[dict[str, Any]]:
        return [r["data"] for r in self.rows(select(t.languages.c.data).order_by(t.languages.c.code))]

    def add_language(self, data: dict[str, Any]) -> None:
        """Declare a language, or replace its declaration (one upsert: safe when two processes declare it at once)."""
        with self.transaction() as conn:
            upsert_replace(conn, t.languages, [dict(code=data["code"], data=data, added_at=now())])
