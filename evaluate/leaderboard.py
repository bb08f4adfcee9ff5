"""One leaderboard over the results folders of a suite: models x languages per method, gates, changes since before.

`build(entries, previous, rules)` reads each entry's results folder (as `builder eval run` writes one)
and makes typed records; `write(out_dir, board)` writes leaderboard.html, .csv and .parquet, each
atomically. The page shows, per method, the models x languages table of headline scores over all
negative types, coloured as the XCOMPS paper's Figure 2 heatmap (with its colour bar, the metric and
chance marked), every cell with its n and 95% interval; the models x negative types breakdown;
each model's gate verdict with the rules it failed, and the suite's; and, against the previous
release's folders of the same names, each model's change per language on the items both releases
hold, with a paired test, beside the change of the whole headline: where the whole changes and the
shared items do not, the data changed, not the model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from jinja2 import Environment, StrictUndefined
from matplotlib import colormaps, colors

from builder.errors import InputError
from builder.files import atomic_write, write_text
from builder.records import Record
from evaluate.findings import findings
from evaluate.gates import GateError, Rule, check, item_outcomes, verdict
from evaluate.intervals import PairedChange, paired_change, wilson
from evaluate.methods import ALL
from evaluate.methods import registry as method_registry
from evaluate.page import chance, model_label, release_label
from evaluate.results import SUMMARY, Results, read_results

SUITE = "suite.json"
HTML, CSV, PARQUET = "leaderboard.html", "leaderboard.csv", "leaderboard.parquet"
CMAP = "viridis"


class Cell(Record):
    """One model's headline of one method on one language (or over all of them) and negative type."""

    method: str
    variant: str
    metric: str
    model: str
    lang: str
    negative_type: str
    value: float
    n: int
    low: float
    high: float


class Change(Record):
    """A model's headline on a language now and in the previous release, and the paired change on the items both hold."""

    method: str
    model: str
    lang: str
    now: float | None
    before: float | None
    n_now: int
    n_before: int
    shared: PairedChange | None  # right/wrong on the shared items (accuracy); None where the method keeps no items

    @property
    def data_part(self) -> float | None:
        """What the whole headline's change owes to the items that differ (their own change aside)."""
        if self.now is None or self.before is None or self.shared is None:
            return None
        return (self.now - self.before) - self.shared.change


class Gate(Record):
    model: str
    verdict: Literal["pass", "fail"]
    checks: int
    failures: tuple[str, ...]
    note: str = ""


class Entry(Record):
    name: str
    model: str
    release: str
    results: str
    report: str | None  # the model's own report.html, when written
    flags: tuple[str, ...] = ()  # what its report's "What this model knows" flags: constant, at or below chance, control


class Leaderboard(Record):
    release: str
    previous_release: str | None
    entries: tuple[Entry, ...]
    methods: tuple[str, ...]
    cells: tuple[Cell, ...]
    changes: tuple[Change, ...]
    gates: tuple[Gate, ...]

    @property
    def verdict(self) -> Literal["pass", "fail"]:
        return "pass" if self.gates and all(g.verdict == "pass" for g in self.gates) else "fail"


def suite_entries(directory: Path) -> dict[str, Path]:
    """A suite folder's entries: those of DIR/suite.json (`evaluate.suite_run.write_suite_file`: each entry's name and
    results folder, relative to DIR) that finished, else every subfolder holding results, by name; a results folder
    itself is one entry."""
    directory = Path(directory)
    listed = directory / SUITE
    if listed.is_file():
        try:
            entries = json.loads(listed.read_text(encoding="utf-8"))["entries"]
            return {str(e["name"]): directory / e["folder"] for e in entries if e.get("ok", True)}
        except (json.JSONDecodeError, KeyError, AttributeError, TypeError) as exc:
            raise InputError(f"{listed}: expected {{\"entries\": [{{\"name\": …, \"folder\": …}}, …]}} ({exc})") from exc
    if (directory / SUMMARY).is_file():
        return {directory.name: directory}
    found = {p.name: p for p in sorted(directory.iterdir()) if (p / SUMMARY).is_file()} if directory.is_dir() else {}
    if not found:
        raise InputError(f"{directory}: no {SUITE} and no results folder in it (a folder with {SUMMARY})")
    return found


def _cells(name: str, results: Results) -> list[Cell]:
    known = method_registry()
    out = []
    for s in results.scores:
        if s.method in known and (s.variant, s.metric) == known[s.method].headline:
            low, high = wilson(s.value, s.n)
            out.append(Cell(method=s.method, variant=s.variant, metric=s.metric, model=name, lang=s.lang,
                            negative_type=s.negative_type, value=s.value, n=s.n, low=low, high=high))
    return out


def _changes(name: str, now: Results, before: Results) -> list[Change]:
    head_now = {(c.method, c.lang): c for c in _cells(name, now) if c.negative_type == ALL}
    head_before = {(c.method, c.lang): c for c in _cells(name, before) if c.negative_type == ALL}
    out = []
    for method, lang in sorted(set(head_now) | set(head_before)):
        a, b = head_now.get((method, lang)), head_before.get((method, lang))
        shared = None
        if a is not None and b is not None:
            x, y = (item_outcomes(r, method, a.variant) for r in (before, now))
            both = x[x["lang"] == lang].merge(y[y["lang"] == lang], on="item", suffixes=("_before", "_now"))
            shared = paired_change(both["correct_before"], both["correct_now"]) if not both.empty else None
        out.append(Change(method=method, model=name, lang=lang, now=a.value if a else None, before=b.value if b else None,
                          n_now=a.n if a else 0, n_before=b.n if b else 0, shared=shared))
    return out


def _gate(name: str, results: Results, rules: list[Rule], previous: Results | None) -> Gate:
    note = ""
    try:
        checks = check(results, rules, previous)
    except GateError as exc:  # another model's previous results: thresholds only
        checks, note = check(results, rules), str(exc)
    failures = tuple(f"{c.method}/{c.variant} {c.metric} {c.lang} {c.negative_type} = {c.value:.3f}: {'; '.join(c.failures)}"
                     for c in checks if not c.passed)
    return Gate(model=name, verdict=verdict(checks), checks=len(checks), failures=failures,
                note=note or ("" if checks else "no gate rule selects any of its scores"))


def build(entries: dict[str, Path], previous: dict[str, Path] | None = None, rules: list[Rule] | None = None,
          links_from: Path | None = None) -> Leaderboard:
    """The leaderboard of `entries` (name -> results folder); `previous` pairs each name with its results on the previous
    release; `rules` are the release gates (none: no verdicts); report links are relative to `links_from`."""
    if not entries:
        raise InputError("a leaderboard needs at least one results folder")
    loaded = {name: read_results(path) for name, path in entries.items()}
    before = {name: read_results(path) for name, path in (previous or {}).items() if name in entries}
    releases = sorted({release_label(r.config) for r in loaded.values()})
    before_releases = sorted({release_label(r.config) for r in before.values()})
    methods = list(dict.fromkeys(m for r in loaded.values() for m in r.config.methods))
    rows = []
    for name, path in entries.items():
        report = Path(path) / "report.html"
        link = os.path.relpath(report, links_from) if links_from is not None else str(report)
        flags = tuple(f"{f.method} {f.flag}: {', '.join(f.where)}" for f in findings(loaded[name]) if f.flag != "above chance")
        rows.append(Entry(name=name, model=model_label(loaded[name].config), release=release_label(loaded[name].config),
                          results=str(path), report=link if report.is_file() else None, flags=flags))
    return Leaderboard(
        release=", ".join(releases), previous_release=", ".join(before_releases) or None, entries=tuple(rows),
        methods=tuple(m for m in method_registry() if m in methods),
        cells=tuple(c for name, r in loaded.items() for c in _cells(name, r)),
        changes=tuple(c for name, r in loaded.items() if name in before for c in _changes(name, r, before[name])),
        gates=tuple(_gate(name, r, rules, before.get(name)) for name, r in loaded.items()) if rules is not None else ())


def frame(board: Leaderboard) -> pd.DataFrame:
    """The leaderboard as one table: `table` is `headline` (a cell), `change` (against the previous release), `flags` (what
    a model's answers show, in `notes`) or `gate` (value 1 passed, 0 failed; the failed rules in `notes`)."""
    rows = [{"table": "headline", **c.model_dump()} for c in board.cells]
    for c in board.changes:
        s = c.shared
        rows.append({"table": "change", "method": c.method, "model": c.model, "lang": c.lang, "negative_type": ALL,
                     "value": c.now, "n": c.n_now, "previous": c.before, "n_previous": c.n_before,
                     "n_shared": s.n if s else None, "shared_before": s.before if s else None,
                     "shared_now": s.after if s else None, "shared_change": s.change if s else None,
                     "shared_low": s.low if s else None, "shared_high": s.high if s else None,
                     "p_value": s.p_value if s else None, "data_part": c.data_part})
    for e in board.entries:
        rows.append({"table": "flags", "model": e.name, "n": len(e.flags), "notes": "\n".join(e.flags)})
    for g in board.gates:
        rows.append({"table": "gate", "model": g.model, "value": float(g.verdict == "pass"), "n": g.checks,
                     "notes": "\n".join(g.failures)})
    return pd.DataFrame(rows)


def _colour(value: float) -> str:
    return colors.to_hex(colormaps[CMAP](float(np.clip(value, 0, 1))))


def _fmt(v: float | None, digits: int = 3) -> str:
    return "—" if v is None or v != v else f"{v:.{digits}f}"


def _heatmap(board: Leaderboard, method: str) -> dict:
    cells = [c for c in board.cells if c.method == method]
    variant, metric = method_registry()[method].headline
    langs = sorted({c.lang for c in cells if c.negative_type == ALL})
    types = [t for t in dict.fromkeys(c.negative_type for c in cells) if t != ALL]
    by = {(c.model, c.lang, c.negative_type): c for c in cells}
    models = [e.name for e in board.entries]

    def cell(c: Cell | None) -> dict | None:
        if c is None:
            return None
        return {"value": _fmt(c.value), "n": c.n, "interval": f"{_fmt(c.low, 2)}–{_fmt(c.high, 2)}", "colour": _colour(c.value),
                "ink": "#fff" if c.value < 0.6 else "#000"}

    breakdown = []
    for model in models:
        row = []
        for t in types:
            part = [c for c in cells if c.model == model and c.negative_type == t]
            n = sum(c.n for c in part)
            value = sum(c.value * c.n for c in part) / n if n else float("nan")
            low, high = wilson(value, n)
            row.append(cell(Cell(method=method, variant=variant, metric=metric, model=model, lang=ALL, negative_type=t,
                                 value=value, n=n, low=low, high=high)) if n else None)
        breakdown.append({"model": model, "cells": row})
    level = chance(method, metric)
    return {"method": method, "variant": variant, "metric": metric, "langs": langs, "types": types,
            "chance": level, "chance_at": None if level is None else f"{100 * level:.0f}%",
            "rows": [{"model": m, "cells": [cell(by.get((m, lang, ALL))) for lang in langs]} for m in models],
            "breakdown": breakdown}


def _change_rows(board: Leaderboard) -> list[dict]:
    rows = []
    for c in board.changes:
        s = c.shared
        whole = None if c.now is None or c.before is None else c.now - c.before
        rows.append({"model": c.model, "method": c.method, "lang": c.lang, "before": _fmt(c.before), "now": _fmt(c.now),
                     "whole": _fmt(whole), "n": f"{c.n_before} → {c.n_now}", "n_shared": s.n if s else "—",
                     "shared": _fmt(s.change) if s else "—",
                     "interval": f"{_fmt(s.low)} to {_fmt(s.high)}" if s else "—",
                     "p": _fmt(s.p_value) if s else "—", "data": _fmt(c.data_part),
                     "reading": _reading(c)})
    return rows


def _reading(c: Change) -> str:
    s = c.shared
    if c.now is None:
        return "not evaluated now"
    if c.before is None:
        return "new"
    if s is None:
        return "no item-level outcomes in both runs"
    model = "the model answers the shared items differently" if s.significant else "the shared items: no significant change"
    data = c.data_part
    return model + (f"; the changed items move the score by {data:+.3f}" if data is not None and abs(data) >= 0.005 else "")


_PAGE = Environment(autoescape=True, undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True).from_string(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Leaderboard: {{ board.release }}</title>
<style>
body{font-family:sans-serif;max-width:80em;margin:2em auto}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right;vertical-align:top}th{background:#f4f4f4}td.name,th.name{text-align:left}
td.heat small{display:block;font-size:70%}figure{margin:1em 0}figcaption{color:#444;max-width:60em}
.bar{position:relative;width:20em;height:1em;background:linear-gradient(to right,{{ gradient }})}
.chance{position:absolute;top:-.3em;height:1.6em;border-left:2px solid #d00}.pass{color:#070}.fail{color:#b00}
</style></head><body>
<h1>Leaderboard: {{ board.release }}</h1>
<p>{{ board.entries|length }} model(s){% if board.previous_release %}, compared with {{ board.previous_release }}{% endif %}.</p>
<table id="models"><tr><th class="name">entry</th><th class="name">model</th><th class="name">release</th><th class="name">report</th><th class="name">flags (what it knows)</th>
{% if board.gates %}<th class="name">gate</th>{% endif %}</tr>
{% for e in board.entries %}
<tr><td class="name">{{ e.name }}</td><td class="name">{{ e.model }}</td><td class="name">{{ e.release }}</td>
<td class="name">{% if e.report %}<a href="{{ e.report }}">report</a>{% else %}no report written{% endif %}</td>
<td class="name">{% for f in e.flags %}{{ f }}<br>{% else %}none{% endfor %}</td>
{% if board.gates %}<td class="name {{ gates[e.name].verdict }}">{{ gates[e.name].verdict }}</td>{% endif %}</tr>
{% endfor %}
</table>
{% for h in heatmaps %}
<section id="method-{{ h.method }}">
<h2>{{ h.method }}: {{ h.metric }} ({{ h.variant }})</h2>
<figure>
<table class="heatmap" data-method="{{ h.method }}"><tr><th class="name">model</th>{% for lang in h.langs %}<th>{{ lang }}</th>{% endfor %}</tr>
{% for row in h.rows %}
<tr><td class="name">{{ row.model }}</td>{% for c in row.cells %}{% if c %}<td class="heat" style="background:{{ c.colour }};color:{{ c.ink }}" data-n="{{ c.n }}">{{ c.value }}<small>n {{ c.n }}, {{ c.interval }}</small></td>{% else %}<td>—</td>{% endif %}{% endfor %}</tr>
{% endfor %}
</table>
<div class="colourbar"><div class="bar">{% if h.chance is not none %}<span class="chance" style="left:{{ h.chance_at }}"></span>{% endif %}</div>
<span>{{ h.metric }}: 0 (left) to 1 (right){% if h.chance is not none %}; chance {{ h.chance }} (red mark){% else %}; no chance level (open answers){% endif %}</span></div>
<figcaption>{{ h.method }}'s headline, {{ h.metric }} of variant {{ h.variant }} over all negative types: one row per model, one
column per language, coloured from 0 (dark) to 1 (yellow). Under each value, the number of items n and the 95% interval
(Wilson); a cell whose interval holds {% if h.chance is not none %}{{ h.chance }}{% else %}a value{% endif %} cannot be told apart from {% if h.chance is not none %}chance{% else %}it{% endif %}.</figcaption>
</figure>
{% if h.types %}
<figure>
<table class="breakdown" data-method="{{ h.method }}"><tr><th class="name">model</th>{% for t in h.types %}<th>{{ t }}</th>{% endfor %}</tr>
{% for row in h.breakdown %}
<tr><td class="name">{{ row.model }}</td>{% for c in row.cells %}{% if c %}<td class="heat" style="background:{{ c.colour }};color:{{ c.ink }}" data-n="{{ c.n }}">{{ c.value }}<small>n {{ c.n }}, {{ c.interval }}</small></td>{% else %}<td>—</td>{% endif %}{% endfor %}</tr>
{% endfor %}
</table>
<figcaption>By negative type: each model's {{ h.metric }} pooled over its languages (weighted by n), same colours. Harder
negatives (taxonomic, overlap) below easy ones (random) is the usual pattern.</figcaption>
</figure>
{% endif %}
</section>
{% endfor %}
{% if board.gates %}
<section id="gates"><h2>Release gates: suite {{ board.verdict }}</h2>
<p class="{{ board.verdict }}">The suite {{ "passes" if board.verdict == "pass" else "fails" }}: {{ passed }} of {{ board.gates|length }} model(s) pass.</p>
<table id="gate-table"><tr><th class="name">model</th><th>verdict</th><th>checks</th><th class="name">failed rules</th></tr>
{% for g in board.gates %}
<tr><td class="name">{{ g.model }}</td><td class="{{ g.verdict }}">{{ g.verdict }}</td><td>{{ g.checks }}</td>
<td class="name">{% for f in g.failures %}{{ f }}<br>{% endfor %}{{ g.note }}</td></tr>
{% endfor %}
</table></section>
{% endif %}
{% if changes %}
<section id="changes"><h2>Changes since {{ board.previous_release }}</h2>
<table id="change-table"><tr><th class="name">model</th><th class="name">method</th><th class="name">lang</th><th>before</th><th>now</th>
<th>whole change</th><th>n before → now</th><th>n shared</th><th>change on shared items</th><th>95% interval</th><th>McNemar p</th>
<th>from changed items</th><th class="name">reading</th></tr>
{% for c in changes %}
<tr><td class="name">{{ c.model }}</td><td class="name">{{ c.method }}</td><td class="name">{{ c.lang }}</td><td>{{ c.before }}</td><td>{{ c.now }}</td>
<td>{{ c.whole }}</td><td>{{ c.n }}</td><td>{{ c.n_shared }}</td><td>{{ c.shared }}</td><td>{{ c.interval }}</td><td>{{ c.p }}</td>
<td>{{ c.data }}</td><td class="name">{{ c.reading }}</td></tr>
{% endfor %}
</table>
<p>The whole change is the headline now minus before, each on its release's items. The change on shared items compares the
headline variant's right and wrong on the items (pair ids; M2C test ids) both releases hold, item by item: its interval is a
paired bootstrap (2,000 resamples) and McNemar's exact test counts the items only one run got right. An interval away from 0 is a
change of the model's answers; what remains of the whole change (“from changed items”) comes from items added, removed or
different.</p></section>
{% endif %}
</body></html>
""")


def render(board: Leaderboard) -> str:
    gradient = ",".join(_colour(x) for x in np.linspace(0, 1, 11))
    return _PAGE.render(board=board, heatmaps=[_heatmap(board, m) for m in board.methods], gradient=gradient,
                        gates={g.model: g for g in board.gates}, passed=sum(g.verdict == "pass" for g in board.gates),
                        changes=_change_rows(board))


def write(out_dir: Path, board: Leaderboard) -> dict[str, Path]:
    """leaderboard.html, .csv and .parquet in `out_dir`, each replaced whole."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = frame(board)
    paths = {"html": out_dir / HTML, "csv": out_dir / CSV, "parquet": out_dir / PARQUET}
    write_text(paths["html"], render(board))
    atomic_write(paths["csv"], lambda tmp: data.to_csv(tmp, index=False))
    atomic_write(paths["parquet"], lambda tmp: data.to_parquet(tmp, index=False))
    return paths
