"""The LLM cache: every call's record, its reply by request key, the batches not yet collected, and
the claims of requests being sent.

It is the only writer of `llm_calls`, `llm_cache`, `batches` and `llm_claims`. A construction stage
opens it on its workspace's database, so proposals, sentences and forms keep their foreign keys to
the call that produced them; an evaluation opens it by path on a SQLite file of its own and touches
no workspace. A reply and its call record are stored in one transaction, so a killed run never pays
twice. Workers sharing a cache (processes on one PostgreSQL workspace) claim a request before
sending it, so that each request is sent once: the others wait for its reply here.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import DatabaseError

from builder.records import LLMCall
from builder.workspace import schema as t
from builder.workspace.store import Workspace, engine_for, now, upsert_ignore

TABLES = (t.llm_calls, t.llm_cache, t.batches, t.llm_claims)
FINISHED = ("collected", "failed", "expired", "cancelled")  # batch states that need no more polling


class LLMCacheError(RuntimeError):
    """A cache file that cannot be opened as one."""


@dataclass(frozen=True)
class Worker:
    """Who holds a claim: a random token, and the process it runs in."""

    token: str
    host: str
    pid: int

    @classmethod
    def current(cls) -> "Worker":
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
    def of_workspace(cls, ws: Workspace) -> "LLMCache":
        """The cache inside a workspace's database (its tables are part of the workspace schema)."""
        return cls(ws.engine, owns_engine=False)

    @classmethod
    def open(cls, path: Path | str) -> "LLMCache":
        """A cache in a SQLite file of its own, created with the cache's tables (and nothing else) if new."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = engine_for(f"sqlite:///{path.resolve()}")
        try:
            t.metadata.create_all(engine, tables=list(TABLES))
        except DatabaseError as exc:
            engine.dispose()
            raise LLMCacheError(f"{path} is not an LLM cache (an SQLite file): {exc.orig}") from exc
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

    def claim(self, key: str, worker: "Worker", lease_s: float) -> bool:
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

    def release(self, key: str, worker: "Worker") -> None:
        with self.engine.begin() as conn:
            conn.execute(t.llm_claims.delete().where(t.llm_claims.c.request_key == key, t.llm_claims.c.worker == worker.token))

    # -- batches ------------------------------------------------------------------------------------

    def add_batch(self, batch_id: str, *, stage: str, status: str, input_file_id: str, requests: dict[str, dict]) -> None:
        """Remember a submitted batch and the logical requests behind its lines (by request key)."""
        with self.engine.begin() as conn:
            conn.execute(t.batches.insert().values(id=batch_id, stage=stage, status=status, input_file_id=input_file_id,
                                                   request_keys=requests, created_at=now()))

    def open_batches(self) -> list[dict[str, Any]]:
        """Batches still to poll: id, stage, status and `request_keys` (request key -> logical request)."""
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(select(t.batches).where(t.batches.c.status.not_in(FINISHED)))]

    def set_batch_status(self, batch_id: str, status: str) -> None:
        values: dict[str, Any] = {"status": status}
        if status == "collected":
            values["collected_at"] = now()
        with self.engine.begin() as conn:
            conn.execute(t.batches.update().where(t.batches.c.id == batch_id).values(**values))
