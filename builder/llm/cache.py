"""The LLM cache: every call's record, its reply by request key, each endpoint's structured-output
mode, the batches submitted, and the claims of requests being sent.

It is the only writer of `llm_calls`, `llm_cache`, `llm_endpoints`, `batches` and `llm_claims`. A
construction stage opens it on its workspace's database, so proposals, sentences and forms keep their foreign keys to
the call that produced them; an evaluation opens it by path on a SQLite file of its own and touches
no workspace. A reply and its call record are stored in one transaction, so a killed run never pays
twice. Workers sharing a cache (processes on one PostgreSQL workspace) claim a request before
sending it, so that each request is sent once: the others wait for its reply here. A batch stays
open until its output and error files have been read (`collected_at`).
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.exc import DatabaseError

from builder.errors import BuilderError
from builder.records import LLMCall
from builder.workspace import schema as t
from builder.workspace import store
from builder.workspace.store import (
    Workspace,
    WorkspaceError,
    add_missing_columns,
    as_dicts,
    engine_for,
    now,
    upsert_ignore,
    upsert_replace,
)

TABLES = (t.llm_calls, t.llm_cache, t.llm_endpoints, t.batches, t.llm_claims)


class LLMCacheError(BuilderError):
    """A cache file that cannot be opened as one."""


@dataclass(frozen=True)
class Worker:
    """Who holds a claim: a random token, and the process it runs in."""

    token: str
    host: str
    pid: int

    @classmethod
    def current(cls) -> Worker:
        return cls(uuid.uuid4().hex, socket.gethostname(), os.getpid())

    def gone(self) -> bool:
        """True when the worker was a process on this machine that no longer runs (another machine's: unknown, False)."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # another user's process
            return False
        return False


class LLMCache:
    """Open with `LLMCache.of_workspace(ws)` (a stage) or `LLMCache.open(path)` (an evaluation)."""

    def __init__(self, engine: Engine, *, owns_engine: bool) -> None:
        self.engine = engine
        self._owns_engine = owns_engine

    @classmethod
    def of_workspace(cls, ws: Workspace) -> LLMCache:
        """The cache inside a workspace's database (its tables are part of the workspace schema)."""
        return cls(ws.engine, owns_engine=False)

    @classmethod
    def open(cls, path: Path | str) -> LLMCache:
        """A cache in a SQLite file of its own, created with the cache's tables (and nothing else) if new."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = engine_for(f"sqlite:///{path.resolve()}")
        try:
            with store.exclusive(engine, path.parent, f"LLM cache {path.name}"):  # two evaluations opening it new at once
                t.metadata.create_all(engine, tables=list(TABLES))
                with engine.begin() as conn:
                    add_missing_columns(conn, TABLES)
        except (DatabaseError, WorkspaceError) as exc:  # the engine names a damaged file as a workspace's
            engine.dispose()
            why = exc.orig if isinstance(exc, DatabaseError) else getattr(exc.__cause__, "orig", exc.__cause__)
            raise LLMCacheError(f"{path} is not an LLM cache (an SQLite file): {why}") from exc
        return cls(engine, owns_engine=True)

    def close(self) -> None:
        """Release a cache file; a workspace's cache is closed with its workspace."""
        if self._owns_engine:
            self.engine.dispose()

    # -- replies ------------------------------------------------------------------------------------

    def get(self, key: str) -> tuple[dict[str, Any], str] | None:
        """The stored response for a request key and the id of the call that produced it."""
        with self.engine.connect() as conn:
            row = conn.execute(select(t.llm_cache.c.response, t.llm_cache.c.llm_call_id)
                               .where(t.llm_cache.c.request_key == key)).first()
        return (row.response, row.llm_call_id) if row else None

    def put(self, call: LLMCall, request: dict[str, Any], response: dict[str, Any]) -> None:
        """Store a reply with its call record, both or neither, and end the request's claim.

        A reply already stored for the key (by a worker that took over a claim that ran out) is kept;
        this call's record is still kept, as it was paid for.
        """
        with self.engine.begin() as conn:
            conn.execute(t.llm_calls.insert().values(**call.model_dump()))
            upsert_ignore(conn, t.llm_cache, [dict(request_key=call.request_key, request=request, response=response,
                                                   llm_call_id=call.id, created_at=now())])
            conn.execute(t.llm_claims.delete().where(t.llm_claims.c.request_key == call.request_key))

    def responses(self) -> dict[str, dict[str, Any]]:
        """Every stored response by request key (what a recording is made of)."""
        with self.engine.connect() as conn:
            return {r.request_key: r.response for r in conn.execute(select(t.llm_cache.c.request_key, t.llm_cache.c.response))}

    # -- claims -------------------------------------------------------------------------------------

    def claim(self, key: str, worker: Worker, lease_s: float) -> bool:
        """Take, or renew, the claim to send request `key` for `lease_s` seconds; False while another worker holds it.

        A claim whose worker died is taken over: at once when that worker was a process on this
        machine, else when its lease runs out. `put` ends a claim; `release` ends it without a reply.
        """
        ts = now()
        mine = {"worker": worker.token, "host": worker.host, "pid": worker.pid, "expires_at": ts + timedelta(seconds=lease_s)}
        c = t.llm_claims.c
        with self.engine.begin() as conn:
            if upsert_ignore(conn, t.llm_claims, [{"request_key": key, **mine}]):
                return True
            held = conn.execute(select(c.worker, c.host, c.pid).where(c.request_key == key)).first()
            if held is None:  # ended since we tried: take it next time round
                return False
            if held.worker != worker.token and not Worker(held.worker, held.host, held.pid).gone():
                stale = c.expires_at < ts
            else:
                stale = c.worker == held.worker
            taken = conn.execute(t.llm_claims.update().where(c.request_key == key, c.worker == held.worker, stale).values(**mine))
            return taken.rowcount == 1

    def release(self, key: str, worker: Worker) -> None:
        with self.engine.begin() as conn:
            conn.execute(t.llm_claims.delete().where(t.llm_claims.c.request_key == key, t.llm_claims.c.worker == worker.token))

    def usage(self) -> list[dict[str, Any]]:
        """Calls by stage, model and mode: count, tokens, known cost, and how many have no known price."""
        c = t.llm_calls.c
        stmt = (select(c.stage, c.model, c.mode, func.count().label("calls"), func.sum(c.tokens_in).label("tokens_in"),
                       func.sum(c.tokens_out).label("tokens_out"), func.coalesce(func.sum(c.cost_usd), 0.0).label("cost_usd"),
                       func.count().filter(c.cost_usd.is_(None)).label("unpriced"))
                .group_by(c.stage, c.model, c.mode).order_by(c.stage, c.model, c.mode))
        with self.engine.connect() as conn:
            return as_dicts(conn.execute(stmt))

    # -- structured-output modes --------------------------------------------------------------------

    def mode(self, endpoint: str, model: str) -> str | None:
        """The structured-output mode found for an endpoint (its redacted URL) and model, if it was probed."""
        with self.engine.connect() as conn:
            return conn.execute(select(t.llm_endpoints.c.mode).where(t.llm_endpoints.c.endpoint == endpoint,
                                                                     t.llm_endpoints.c.model == model)).scalar()

    def record_mode(self, endpoint: str, model: str, mode: str, refusals: dict[str, str]) -> None:
        """Remember the mode an endpoint and model accept, and the server's words refusing the stronger ones.

        One upsert: workers that probe a new endpoint at once each record it, the last probe's row stays."""
        with self.engine.begin() as conn:
            upsert_replace(conn, t.llm_endpoints, [dict(endpoint=endpoint, model=model, mode=mode, refusals=refusals,
                                                        probed_at=now())])

    def endpoints(self) -> list[dict[str, Any]]:
        """Every endpoint and model probed, with its mode and refusals."""
        with self.engine.connect() as conn:
            return as_dicts(conn.execute(select(t.llm_endpoints).order_by(t.llm_endpoints.c.endpoint, t.llm_endpoints.c.model)))

    # -- batches ------------------------------------------------------------------------------------

    def add_batch(self, batch_id: str, *, stage: str, status: str, input_file_id: str, requests: dict[str, dict]) -> None:
        """Remember a submitted batch and the logical requests behind its lines (by request key)."""
        with self.engine.begin() as conn:
            conn.execute(t.batches.insert().values(id=batch_id, stage=stage, status=status, input_file_id=input_file_id,
                                                   request_keys=requests, created_at=now()))

    def open_batches(self) -> list[dict[str, Any]]:
        """Batches not yet collected: id, stage, status and `request_keys` (request key -> logical request)."""
        with self.engine.connect() as conn:
            return as_dicts(conn.execute(select(t.batches).where(t.batches.c.collected_at.is_(None))
                                         .order_by(t.batches.c.created_at)))

    def set_batch_status(self, batch_id: str, status: str) -> None:
        """The status the server last gave an open batch."""
        with self.engine.begin() as conn:
            conn.execute(t.batches.update().where(t.batches.c.id == batch_id).values(status=status))

    def close_batch(self, batch_id: str, status: str, failures: dict[str, dict[str, Any]]) -> None:
        """A batch read to its end (its replies are stored): its final status and the lines that failed."""
        with self.engine.begin() as conn:
            conn.execute(t.batches.update().where(t.batches.c.id == batch_id)
                         .values(status=status, failures=failures, collected_at=now()))

    def batch_failures(self) -> dict[str, list[dict[str, Any]]]:
        """Request key -> its failed lines in collected batches, oldest first (`reason`, `final`)."""
        out: dict[str, list[dict[str, Any]]] = {}
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.batches.c.failures).where(t.batches.c.collected_at.is_not(None))
                                .order_by(t.batches.c.collected_at))
            for row in rows:
                for key, failure in (row.failures or {}).items():
                    out.setdefault(key, []).append(failure)
        return out
