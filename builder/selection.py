"""Which concepts, properties and pairs a stage works on (all, or the pairs of chosen properties)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import func, select

from builder.inputs import InputError, checked
from builder.records import english_key
from builder.workspace import schema as t
from builder.workspace.store import Workspace


@dataclass(frozen=True)
class Scope:
    property_ids: frozenset[str] | None = None  # None: everything in the workspace

    @classmethod
    def parse(cls, ws: Workspace, spec: str | None) -> Scope:
        """`spec` is a file with one English property per line, or a comma-separated list."""
        if not spec:
            return cls()
        path = Path(spec)
        try:
            listed = path.is_file()
        except (OSError, ValueError):  # a name too long for a file, or holding a NUL: a list, to be checked as such
            listed = False
        if listed:
            try:
                lines = enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
            except UnicodeDecodeError as exc:
                raise InputError(f"{path}: not valid UTF-8 (byte {exc.start}): {exc.reason}") from exc
            names = [checked(ln.strip(), f"{path}:{n}", name=True) for n, ln in lines if ln.strip()]
        else:
            names = [checked(s.strip(), "--properties", name=True) for s in spec.split(",") if s.strip()]
        known = {english_key(r["english"]): r["id"] for r in ws.rows(select(t.properties.c.id, t.properties.c.english))}
        missing = [n for n in names if english_key(n) not in known]
        if missing:
            raise InputError(f"unknown propert{'y' if len(missing) == 1 else 'ies'}: {', '.join(map(repr, missing))}")
        return cls(frozenset(known[english_key(n)] for n in names))

    def pairs(self, ws: Workspace) -> list[dict]:
        stmt = select(t.pairs).order_by(t.pairs.c.id)
        if self.property_ids is not None:
            stmt = stmt.where(t.pairs.c.property_id.in_(sorted(self.property_ids)))
        return ws.rows(stmt)

    def items(self, ws: Workspace) -> list[dict]:
        """Concepts and properties the pairs in scope use, with English text and category."""
        pairs = self.pairs(ws)
        cids = {p["acceptable_id"] for p in pairs} | {p["unacceptable_id"] for p in pairs}
        pids = {p["property_id"] for p in pairs}
        if self.property_ids is None:
            cids |= {r["id"] for r in ws.rows(select(t.concepts.c.id))}
            pids |= {r["id"] for r in ws.rows(select(t.properties.c.id))}
        concepts = ws.rows(select(t.concepts).where(t.concepts.c.id.in_(sorted(cids))))
        props = ws.rows(select(t.properties).where(t.properties.c.id.in_(sorted(pids))))
        out = [{"id": c["id"], "kind": "concept", "english": c["english"], "category": c["category"]} for c in concepts]
        out += [{"id": p["id"], "kind": "property", "english": p["english"], "category": None} for p in props]
        return sorted(out, key=lambda i: (i["kind"], i["id"]))


def verified(ws: Workspace, lang: str) -> dict[str, dict]:
    return {r["item_id"]: r for r in ws.rows(select(t.verified_words).where(t.verified_words.c.lang == lang))}


def seeds(ws: Workspace, langs: tuple[str, ...]) -> dict[tuple[str, str], str]:
    """(item id, lang) -> seed text, first translator's."""
    out: dict[tuple[str, str], str] = {}
    stmt = select(t.seed_translations).where(t.seed_translations.c.lang.in_(langs)).order_by(t.seed_translations.c.id)
    for r in ws.rows(stmt):
        out.setdefault((r["item_id"], r["lang"]), r["text"])
    return out


def stale_pairs(ws: Workspace, langs: list[str], pairs: Mapping[str, tuple] | None = None,
                ) -> dict[tuple[str, str, str], datetime]:
    """(pair id, lang, item) -> when the item's verified word changed, where that was after the pair's sentences were written:
    what a release holds back and `generate` writes again. `pairs`: pair id -> (property, acceptable,
    unacceptable, …) [default: every pair's].

    Only words verified after a language's first sentence can be stale, so the per-sentence comparison
    runs for those few words' pairs instead of joining every sentence with its three words."""
    sp, vw = t.sentence_pairs, t.verified_words
    first = (select(sp.c.lang, func.min(sp.c.created_at).label("first")).where(sp.c.lang.in_(langs))
             .group_by(sp.c.lang).subquery())
    late = ws.rows(select(vw.c.item_id, vw.c.lang, vw.c.verified_at).join(first, first.c.lang == vw.c.lang)
                   .where(vw.c.verified_at > first.c.first))
    if not late:
        return {}
    if pairs is None:
        pairs = {r["id"]: (r["property_id"], r["acceptable_id"], r["unacceptable_id"]) for r in ws.rows(
            select(t.pairs.c.id, t.pairs.c.property_id, t.pairs.c.acceptable_id, t.pairs.c.unacceptable_id))}
    uses: dict[str, list[str]] = defaultdict(list)
    for pid, (prop, acc, unacc, *_) in pairs.items():
        for item in {prop, acc, unacc}:
            uses[item].append(pid)
    out = {}
    for w in late:
        ids = uses.get(w["item_id"], [])
        for chunk in (ids[i:i + 500] for i in range(0, len(ids), 500)):
            for r in ws.rows(select(sp.c.pair_id).where(sp.c.lang == w["lang"], sp.c.pair_id.in_(chunk),
                                                        sp.c.created_at < w["verified_at"])):
                out[(r["pair_id"], w["lang"], w["item_id"])] = utc(w["verified_at"])
    return out


def utc(value: datetime) -> datetime:
    """A stored time as UTC (SQLite gives it back naive)."""
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
