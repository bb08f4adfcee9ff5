"""Rendering a language's M2C templates into the workspace table `m2c_tests`.

Lexicon placeholders take verified forms only, so an unverified fill never reaches a test that can
be released; `include_unverified` renders drafts for preview, marked `verified=False`. A render
replaces the rows of the templates it rendered in one transaction: tests whose fills disappeared
(a form rejected after all) go, re-rendering the same seed changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select

from builder.m2c.lexicon import NoLexemes, Resolution, resolver
from builder.m2c.template_files import load_file, template_files
from builder.workspace import schema as t
from builder.workspace.store import Workspace, now


@dataclass
class RenderSummary:
    templates: int = 0
    tests: int = 0
    new: int = 0
    removed: int = 0
    unverified: int = 0
    waiting_files: dict[str, str] = field(default_factory=dict)  # file -> why it rendered nothing
    waiting_lemmas: dict[str, list[str]] = field(default_factory=dict)


def render_tests(ws: Workspace, lang: str, *, root: Path | None = None, seed: int = 0, n: int | None = None,
                 include_unverified: bool = False) -> RenderSummary:
    summary = RenderSummary()
    report = Resolution()
    resolve = resolver(ws, include_unverified=include_unverified, report=report)
    rows: dict[str, dict] = {}
    rendered_templates: set[str] = set()
    for path in template_files(lang, root):
        try:
            templates = load_file(path, resolve=resolve, lang=lang)
        except NoLexemes as exc:
            summary.waiting_files[str(path)] = exc.message
            continue
        for tt in templates:
            summary.templates += 1
            rendered_templates.add(tt.template_id)
            for test in tt.tests(n, seed):
                rows[test.test_id] = test.model_dump()
    summary.waiting_lemmas = report.waiting
    summary.tests = len(rows)
    summary.unverified = sum(not r["verified"] for r in rows.values())
    ts = now()
    with ws.transaction() as conn:
        old = {r.test_id: r for r in conn.execute(select(t.m2c_tests).where(t.m2c_tests.c.lang == lang))}
        stale = [tid for tid, r in old.items() if r.template_id in rendered_templates and tid not in rows]
        if stale:
            conn.execute(t.m2c_tests.delete().where(t.m2c_tests.c.test_id.in_(stale)))
        summary.removed = len(stale)
        fresh = [{**r, "created_at": ts} for tid, r in rows.items() if tid not in old]
        if fresh:
            conn.execute(t.m2c_tests.insert(), fresh)
        summary.new = len(fresh)
        for tid, r in rows.items():
            if tid in old:
                prev = old[tid]
                changed = {k: r[k] for k in ("verified", "fills", "alternatives", "answer_forms") if getattr(prev, k) != r[k]}
                if changed:
                    conn.execute(t.m2c_tests.update().where(t.m2c_tests.c.test_id == tid).values(**changed))
    return summary
