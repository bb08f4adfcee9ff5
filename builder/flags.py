"""Items an LLM stage gave up on, and why: the one owner of the `flags` table.

A stage records a flag in the transaction that ends its work on an item without a valid answer, and
clears it in the transaction that stores the item's valid answer, so a flag is there exactly while
the item waits for a re-run or a curator. The stage is the request's (`translate`, `repropose`,
`generate`, `fill`); the reason is the loop's (`builder.llm.items.ItemProblem.reason`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime

from pydantic import BaseModel
from sqlalchemy import Connection, select

from builder.workspace import schema as t
from builder.workspace.store import Workspace, now, upsert_replace


class Flag(BaseModel):
    stage: str
    lang: str
    item_id: str
    reason: str
    created_at: datetime


def record_flags(conn: Connection, stage: str, lang: str, reasons: Mapping[str, str]) -> None:
    """Flag these items (item id -> reason), replacing an earlier flag of the same item."""
    ts = now()
    upsert_replace(conn, t.flags, [{"stage": stage, "lang": lang, "item_id": item_id, "reason": reason, "created_at": ts}
                                   for item_id, reason in reasons.items()])


def clear_flags(conn: Connection, stage: str, lang: str, item_ids: Iterable[str]) -> None:
    """The items now have a valid answer."""
    ids = list(item_ids)
    if ids:
        conn.execute(t.flags.delete().where(t.flags.c.stage == stage, t.flags.c.lang == lang, t.flags.c.item_id.in_(ids)))


def list_flags(ws: Workspace, *, stage: str | None = None, langs: Collection[str] | None = None) -> list[Flag]:
    stmt = select(t.flags).order_by(t.flags.c.stage, t.flags.c.lang, t.flags.c.item_id)
    if stage:
        stmt = stmt.where(t.flags.c.stage == stage)
    if langs is not None:
        stmt = stmt.where(t.flags.c.lang.in_(list(langs)))
    return [Flag.model_validate(r) for r in ws.rows(stmt)]


def flag_counts(ws: Workspace) -> Counter[tuple[str, str]]:
    """How many items are flagged, by (stage, lang)."""
    return Counter((r["stage"], r["lang"]) for r in ws.rows(select(t.flags.c.stage, t.flags.c.lang)))
