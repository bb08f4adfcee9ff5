"""Waivers: a maintainer releases an item that is not verified, with a recorded reason and name."""

from __future__ import annotations

from typing import Literal

from sqlalchemy import select

from builder.errors import InputError
from builder.inputs import checked
from builder.workspace import schema as t
from builder.workspace.store import Workspace, now, upsert_replace

WaiverKind = Literal["pair", "m2c"]


def waivers(ws: Workspace) -> dict[tuple[str, str, str], str]:
    """(kind, item id, lang) -> reason."""
    return {(r["kind"], r["item_id"], r["lang"]): r["reason"] for r in ws.rows(select(t.release_waivers))}


def waive(ws: Workspace, kind: WaiverKind, item_id: str, lang: str, *, reason: str, by: str) -> None:
    """Record (or replace) a waiver; the item must exist and the reason and name must be given."""
    if not reason.strip():
        raise InputError("a waiver needs a reason (--reason)")
    if not by.strip():
        raise InputError("a waiver needs the name of who waives it (--by)")
    checked(reason, "--reason")  # released in the card and the report: text, not control characters
    checked(by, "--by", name=True)
    if kind == "pair":
        sp = t.sentence_pairs
        found = ws.rows(select(sp.c.pair_id).where(sp.c.pair_id == item_id, sp.c.lang == lang))
    else:
        m = t.m2c_tests
        found = ws.rows(select(m.c.test_id).where(m.c.test_id == item_id, m.c.lang == lang))
    if not found:
        raise InputError(f"no {'sentence pair' if kind == 'pair' else 'M2C test'} {item_id} in {lang}")
    with ws.transaction() as conn:  # one upsert: two maintainers waiving the item at once both succeed, the last stays
        upsert_replace(conn, t.release_waivers, [dict(kind=kind, item_id=item_id, lang=lang, reason=reason.strip(),
                                                      waived_by=by.strip(), created_at=now())])


def list_waivers(ws: Workspace) -> list[dict]:
    w = t.release_waivers
    return ws.rows(select(w).order_by(w.c.lang, w.c.kind, w.c.item_id))
