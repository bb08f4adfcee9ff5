"""Items an LLM stage gave up on, and why: the one owner of the `flags` table.

A stage records a flag in the transaction that ends its work on an item without a valid answer, and
clears it in the transaction that stores the item's valid answer, so a flag is there exactly while
the item waits for a re-run or a curator. The stage is the request's (`translate`, `repropose`,
`generate`, `regenerate`, `fill`); the reason is the loop's (`builder.llm.items.ItemProblem.reason`).

Every LLM stage takes its flagged items up again the same way (`Retries`): a later run asks a flagged
item again, with the reason shown to the LLM, until RUNS runs have given up on it (`record_given_up`
counts them); then the item waits for a person, who writes it by hand or has it asked again anyway
(`builder.next_steps` says how, for each stage). Audits and the judge's verdicts flag pairs too
(`record_flags`), for curators only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel, field_validator
from sqlalchemy import Connection, select

from builder.workspace import schema as t
from builder.workspace.store import Workspace, now, upsert_replace

RUNS = 3  # runs of a stage that may give up on an item before it waits for a person


class Flag(BaseModel):
    stage: str
    lang: str
    item_id: str
    reason: str
    created_at: datetime
    attempts: int = 1  # runs of the stage that gave up on the item

    @field_validator("attempts", mode="before")
    @classmethod
    def _once(cls, v: int | None) -> int:
        return 1 if v is None else v  # a flag that records no count (audits' flags; a migrated workspace's) ran once

    @property
    def exhausted(self) -> bool:
        """RUNS runs gave up on it: it waits for a person."""
        return self.attempts >= RUNS


def record_flags(conn: Connection, stage: str, lang: str, reasons: Mapping[str, str]) -> None:
    """Flag these items (item id -> reason), replacing an earlier flag of the same item."""
    ts = now()
    upsert_replace(conn, t.flags, [{"stage": stage, "lang": lang, "item_id": item_id, "reason": reason, "created_at": ts}
                                   for item_id, reason in reasons.items()])


def record_given_up(conn: Connection, stage: str, lang: str, reasons: Mapping[str, str]) -> None:
    """An LLM stage's run gave up on these items: flag them with the reason, counting the runs that did."""
    ids = list(reasons)
    if not ids:
        return
    f = t.flags.c
    before = dict(conn.execute(select(f.item_id, f.attempts).where(f.stage == stage, f.lang == lang, f.item_id.in_(ids))).all())
    ts = now()
    upsert_replace(conn, t.flags, [{"stage": stage, "lang": lang, "item_id": item_id, "reason": reason, "created_at": ts,
                                    "attempts": (before[item_id] or 1) + 1 if item_id in before else 1}
                                   for item_id, reason in reasons.items()])


def clear_flags(conn: Connection, stage: str | Iterable[str], lang: str, item_ids: Iterable[str]) -> None:
    """The items now have a valid answer (of this stage, or of any of these stages)."""
    ids = list(item_ids)
    stages = [stage] if isinstance(stage, str) else list(stage)
    if ids:
        conn.execute(t.flags.delete().where(t.flags.c.stage.in_(stages), t.flags.c.lang == lang, t.flags.c.item_id.in_(ids)))


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


@dataclass(frozen=True)
class Retries:
    """A stage's flagged items in one language, as a run of the stage takes them up again.

    A flagged item is asked again, its reason shown to the LLM (`earlier`, for `LLMClient.ask_items`),
    until it is `exhausted`; with `everything` (`--reask-flagged`) exhausted items are asked too.
    """

    flags: Mapping[str, Flag] = field(default_factory=dict)
    everything: bool = False

    def asks(self, item_id: str) -> bool:
        """Whether this run asks the item: not flagged, flagged fewer than RUNS times, or asked anyway."""
        flag = self.flags.get(item_id)
        return flag is None or self.everything or not flag.exhausted

    def earlier(self, item_ids: Iterable[str]) -> dict[str, str]:
        """item id -> why earlier runs gave up on it, and how often, for those of `item_ids` that are flagged.

        The count makes each run's request a new one, so a re-ask is sent rather than answered from the cache."""
        return {i: f"{self.flags[i].reason} (given up {self.flags[i].attempts} time(s))" for i in item_ids if i in self.flags}


def retries(ws: Workspace, stage: str, lang: str, *, everything: bool = False) -> Retries:
    return Retries({f.item_id: f for f in list_flags(ws, stage=stage, langs=[lang])}, everything)
