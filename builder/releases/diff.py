"""Item-by-item differences between two versions, per config: added, removed, changed (before → after)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pydantic import BaseModel

from builder.records import NEGATIVE_TYPES
from builder.releases.features import id_column, is_m2c
from builder.releases.reading import open_source

SHOWN_TEXT = ("acceptable_sentence", "unacceptable_sentence")


class Change(BaseModel):
    id: str
    fields: dict[str, tuple[Any, Any]]  # column -> (before, after)


class ConfigDiff(BaseModel):
    config: str
    added: list[dict] = []
    removed: list[dict] = []
    changed: list[Change] = []

    def counts(self) -> dict[str, int]:
        return {"added": len(self.added), "removed": len(self.removed), "changed": len(self.changed)}


class ReleaseDiff(BaseModel):
    before: str | None
    after: str
    configs: list[ConfigDiff]

    def summary(self) -> dict[str, dict[str, int]]:
        return {c.config: c.counts() for c in self.configs}

    def render(self) -> str:
        lines = [f"{self.before} → {self.after}"]
        if not self.configs:
            lines.append("  no differences")
        for c in self.configs:
            n = c.counts()
            lines.append(f"{c.config}: {n['added']} added, {n['removed']} removed, {n['changed']} changed")
            key = id_column(c.config)
            for sign, rows in (("+", c.added), ("-", c.removed)):
                for r in rows:
                    text = (r["context"] + " | " + r["question"] + " → " + r["answer"]) if is_m2c(c.config) \
                        else " | ".join(r[k] for k in SHOWN_TEXT)
                    lines.append(f"  {sign} {r[key]}: {text}")
            for ch in c.changed:
                for col, (old, new) in ch.fields.items():
                    lines.append(f"  ~ {ch.id} {col}: {old!r} → {new!r}")
        return "\n".join(lines)


def _rows(table: pa.Table | None, config: str) -> dict[str, dict]:
    if table is None:
        return {}
    key = id_column(config)
    out = {}
    for r in table.to_pylist():
        if "negative_type" in r and isinstance(r["negative_type"], int):
            r["negative_type"] = NEGATIVE_TYPES[r["negative_type"]]
        out[r[key]] = r
    return out


def diff_tables(before: dict[str, pa.Table], after: dict[str, pa.Table]) -> list[ConfigDiff]:
    out = []
    for config in sorted(set(before) | set(after)):
        old, new = _rows(before.get(config), config), _rows(after.get(config), config)
        d = ConfigDiff(
            config=config,
            added=[new[k] for k in sorted(new.keys() - old.keys())],
            removed=[old[k] for k in sorted(old.keys() - new.keys())],
            # Columns both versions have: a column a later version added (sentence_origin) changes no item.
            changed=[Change(id=k, fields=fields) for k in sorted(old.keys() & new.keys())
                     if (fields := {c: (old[k][c], new[k][c]) for c in new[k] if c in old[k] and old[k][c] != new[k][c]})],
        )
        if d.added or d.removed or d.changed:
            out.append(d)
    return out


def diff(source, a: str, b: str, *, configs: list[str] | None = None) -> ReleaseDiff:
    src = open_source(source)
    va, vb = src.resolve(a), src.resolve(b)
    ca, cb = src.manifest(va)["configs"], src.manifest(vb)["configs"]
    wanted = sorted(set(ca) | set(cb)) if configs is None else configs
    before = {c: src.read_table(va, c) for c in wanted if c in ca}
    after = {c: src.read_table(vb, c) for c in wanted if c in cb}
    return ReleaseDiff(before=va, after=vb, configs=diff_tables(before, after))
