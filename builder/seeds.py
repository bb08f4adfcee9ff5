"""Seed importers: COMPS-format pairs, concept categories and expert seed translations.

Files are parsed and validated completely before anything is written; every problem is reported
with file, line and field, and a file with any problem writes nothing. Every field's text is checked
(`builder.inputs`: control characters, length; invisible characters in names), and an English name
that looks like another (`inputs.look`: ﬁ and fi, a zero-width space) but would be another id is reported. A COMPS `similarity` is checked
but not kept: `pairs.similarity` holds the embedding model's value, which the pair audits compute
(`builder.audits.similarity`) and record here, in the one module that writes `pairs`.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from builder import languages as langs_mod
from builder.errors import BuilderError
from builder.inputs import look, text_problem
from builder.records import (
    NEGATIVE_TYPES,
    Concept,
    Pair,
    Property,
    SeedTranslation,
    VerifiedWord,
    concept_id,
    english_key,
    group_id,
    pair_id,
    property_id,
)
from builder.reviews import record_seed_words
from builder.workspace import schema as t
from builder.workspace.store import Workspace

COMPS_FIELDS = (
    "property",
    "acceptable_concept",
    "unacceptable_concept",
    "negative_sample_type",
    "prefix_acceptable",
    "prefix_unacceptable",
    "property_phrase",
)


class SeedImportError(BuilderError, ValueError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        shown = "\n".join(f"  {p}" for p in problems[:50])
        more = f"\n  … and {len(problems) - 50} more" if len(problems) > 50 else ""
        super().__init__(f"{len(problems)} problem(s) in seed input; nothing was written:\n{shown}{more}")


@dataclass
class Row:
    path: Path
    line: int
    data: dict[str, Any]

    def where(self, fld: str | None = None) -> str:
        return f"{self.path}:{self.line}" + (f": field '{fld}'" if fld else "")


@dataclass
class ImportPlan:
    concepts: dict[str, dict] = field(default_factory=dict)
    properties: dict[str, dict] = field(default_factory=dict)
    pairs: dict[str, dict] = field(default_factory=dict)
    categories: dict[str, tuple[str, str]] = field(default_factory=dict)  # concept id -> (category, where)
    seeds: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    names: list[tuple[str, str, str, str]] = field(default_factory=list)  # (kind, English, id, where) of every name given


@dataclass
class ImportSummary:
    files: int
    concepts: int
    properties: int
    pairs: int
    seed_translations: int


# -- reading ---------------------------------------------------------------------------------------


def _read_rows(path: Path, problems: list[str]) -> list[Row]:
    raw = path.read_bytes()
    rows: list[Row] = []
    lines = raw.split(b"\n")
    texts: list[str] = []
    for n, line in enumerate(lines, start=1):
        try:
            texts.append(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            problems.append(f"{path}:{n}: not valid UTF-8 (byte {exc.start}): {exc.reason}")
            texts.append("")
    if any(p.startswith(f"{path}:") for p in problems):
        return []
    text = "\n".join(texts).lstrip("\ufeff")
    if path.suffix.lower() == ".jsonl":
        for n, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(f"{path}:{n}: invalid JSON: {exc.msg} (column {exc.colno})")
                continue
            except (ValueError, RecursionError) as exc:  # a number of more than 4,300 digits, nesting too deep
                problems.append(f"{path}:{n}: unreadable JSON ({type(exc).__name__}: {str(exc)[:100]})")
                continue
            if not isinstance(obj, dict):
                problems.append(f"{path}:{n}: expected a JSON object")
                continue
            rows.append(Row(path, n, obj))
    elif path.suffix.lower() in (".csv", ".tsv"):
        reader = csv.DictReader(io.StringIO(text), delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
        try:
            records = [(rec, reader.line_num) for rec in reader]
        except csv.Error as exc:  # a field beyond csv's limit of 131,072 characters
            problems.append(f"{path}:{reader.line_num + 1}: unreadable {path.suffix[1:].upper()} ({exc})")
            return []
        for rec, line_num in records:
            if rec is None or not any((v or "").strip() for v in rec.values() if isinstance(v, str)):
                continue
            if None in rec:
                problems.append(f"{path}:{line_num}: more values than header fields")
                continue
            rows.append(Row(path, line_num, {k.strip(): (v.strip() if v else v) for k, v in rec.items()}))
    else:
        problems.append(f"{path}: unsupported file type (expected .jsonl, .csv or .tsv)")
    return rows


def _kind_of(rows: list[Row]) -> str | None:
    if not rows:
        return None
    keys = set().union(*(r.data for r in rows[:50]))
    if keys & {"property", "acceptable_concept", "unacceptable_concept", "negative_sample_type"}:
        return "comps"
    if {"language", "text"} <= keys:
        return "seed"
    if {"concept", "category"} <= keys:
        return "concepts"
    return None


def _text(row: Row, fld: str, problems: list[str], required: bool = True, *, name: bool = False) -> str | None:
    """The field's text, spaces folded; None (and a problem) when missing, not text, or refused (`inputs.text_problem`).
    A `name` is a word or a few (a concept, a property, a code, a translator), the others sentences."""
    val = row.data.get(fld)
    if val is None or (isinstance(val, str) and not val.strip()):
        if required:
            problems.append(f"{row.where(fld)}: missing")
        return None
    if not isinstance(val, str):
        problems.append(f"{row.where(fld)}: expected text, got {type(val).__name__}")
        return None
    problem = text_problem(val, name=name)
    if problem:
        problems.append(f"{row.where(fld)}: {problem}")
        return None
    return " ".join(val.split())


# -- planning ----------------------------------------------------------------------------------------


COMPS_NAMES = ("property", "acceptable_concept", "unacceptable_concept", "negative_sample_type")


def _plan_comps(rows: list[Row], plan: ImportPlan, source: str) -> None:
    for row in rows:
        vals = {f: _text(row, f, plan.problems, name=f in COMPS_NAMES) for f in COMPS_FIELDS}
        neg = vals["negative_sample_type"]
        if neg is not None and neg not in NEGATIVE_TYPES:
            plan.problems.append(
                f"{row.where('negative_sample_type')}: unknown negative type '{neg}' "
                f"(expected one of {', '.join(NEGATIVE_TYPES)})"
            )
            continue
        sim = row.data.get("similarity")
        if sim is not None and (isinstance(sim, bool) or not isinstance(sim, (int, float))):
            plan.problems.append(f"{row.where('similarity')}: expected a number or null")
            continue
        if any(v is None for v in vals.values()):
            continue
        prop, acc, unacc = vals["property"], vals["acceptable_concept"], vals["unacceptable_concept"]
        if english_key(acc) == english_key(unacc):
            plan.problems.append(f"{row.where('unacceptable_concept')}: same concept as acceptable_concept")
            continue
        pid = pair_id(prop, acc, unacc)
        if pid in plan.pairs:
            first = plan.pairs[pid]["_where"]
            plan.problems.append(
                f"{row.where()}: duplicate pair id {pid} ({prop!r}, {acc!r} vs {unacc!r}) first seen at {first}"
            )
            continue
        plan.names += [("concept", acc, concept_id(acc), row.where("acceptable_concept")),
                       ("concept", unacc, concept_id(unacc), row.where("unacceptable_concept")),
                       ("property", prop, property_id(prop), row.where("property"))]
        for name in (acc, unacc):
            plan.concepts.setdefault(concept_id(name), {**Concept(id=concept_id(name), english=name).model_dump(), "source": source})
        plan.properties.setdefault(
            property_id(prop),
            {**Property(id=property_id(prop), english=prop, phrase=vals["property_phrase"]).model_dump(), "source": source},
        )
        pair = Pair(
            id=pid, group_id=group_id(prop, acc), property_id=property_id(prop), acceptable_id=concept_id(acc),
            unacceptable_id=concept_id(unacc), negative_type=neg,
            prefix_acceptable=vals["prefix_acceptable"], prefix_unacceptable=vals["prefix_unacceptable"],
        )
        plan.pairs[pid] = {**pair.model_dump(), "source": f"{row.path.name}:{row.line}", "_where": row.where()}


def _plan_concepts(rows: list[Row], plan: ImportPlan) -> None:
    for row in rows:
        name = _text(row, "concept", plan.problems, name=True)
        cat = _text(row, "category", plan.problems, name=True)
        if name is None or cat is None:
            continue
        cid = concept_id(name)
        plan.names.append(("concept", name, cid, row.where("concept")))
        if cid in plan.categories and plan.categories[cid][0] != cat:
            plan.problems.append(
                f"{row.where('category')}: concept {name!r} already has category "
                f"{plan.categories[cid][0]!r} ({plan.categories[cid][1]})"
            )
            continue
        plan.categories[cid] = (cat, row.where())
        plan.concepts.setdefault(cid, {**Concept(id=cid, english=name).model_dump(), "source": f"{row.path.name}:{row.line}"})


def _plan_seeds(rows: list[Row], plan: ImportPlan, known_langs: dict, existing: dict[str, dict[str, str]]) -> None:
    """existing: kind -> {normalised english -> id} from the workspace, merged with this import."""
    ids = {"concept": dict(existing.get("concept", {})), "property": dict(existing.get("property", {}))}
    for c in plan.concepts.values():
        ids["concept"][english_key(c["english"])] = c["id"]
    for p in plan.properties.values():
        ids["property"][english_key(p["english"])] = p["id"]
    by_id = {i: k for k, m in ids.items() for i in m.values()}
    seen: dict[tuple[str, str, str], str] = {}
    for row in rows:
        known_problems = len(plan.problems)
        lang = _text(row, "language", plan.problems, name=True)
        text = _text(row, "text", plan.problems)
        translator = _text(row, "translator", plan.problems, name=True)
        kind = _text(row, "kind", plan.problems, required=False, name=True)
        item = _text(row, "item_id", plan.problems, required=False, name=True)
        english = _text(row, "english", plan.problems, required=False, name=True)
        if len(plan.problems) > known_problems:
            continue
        if lang is not None and lang not in known_langs:
            plan.problems.append(
                f"{row.where('language')}: unknown language code '{lang}'; known: {', '.join(sorted(known_langs))}"
            )
            continue
        if kind is not None and kind not in ("concept", "property"):
            plan.problems.append(f"{row.where('kind')}: expected 'concept' or 'property', got '{kind}'")
            continue
        if None in (lang, text, translator):
            continue
        if item is None and english is None:
            plan.problems.append(f"{row.where('item_id')}: give item_id or english")
            continue
        if item is not None:
            if item not in by_id:
                plan.problems.append(f"{row.where('item_id')}: unknown item id '{item}'")
                continue
            kind = by_id[item]
        else:
            key = english_key(english)
            kinds = [k for k in ((kind,) if kind else ("concept", "property")) if key in ids[k]]
            if not kinds:
                plan.problems.append(f"{row.where('english')}: no concept or property with English text {english!r}")
                continue
            if len(kinds) > 1:
                plan.problems.append(f"{row.where('english')}: {english!r} is both a concept and a property; add 'kind'")
                continue
            kind = kinds[0]
            item = ids[kind][key]
        dup = (item, lang, translator)
        if dup in seen:
            plan.problems.append(f"{row.where()}: duplicate seed translation for {item} in {lang} (first at {seen[dup]})")
            continue
        seen[dup] = row.where()
        plan.seeds.append(SeedTranslation(item_id=item, kind=kind, lang=lang, text=text, translator=translator,
                                          source=f"{row.path.name}:{row.line}").model_dump())


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.suffix.lower() in (".jsonl", ".csv", ".tsv") and p.is_file())
    if not path.exists():
        raise SeedImportError([f"{path}: no such file or folder"])
    return [path]


def import_seeds(ws: Workspace, *paths: Path | str) -> ImportSummary:
    """Import a file or a folder of seed files; validated whole, then written in one transaction."""
    plan = ImportPlan()
    files = [f for p in paths for f in _files(Path(p))]
    parsed: dict[str, list[tuple[Path, list[Row]]]] = {"comps": [], "concepts": [], "seed": []}
    for f in files:
        rows = _read_rows(f, plan.problems)
        kind = _kind_of(rows)
        if kind is None:
            if rows:
                plan.problems.append(
                    f"{f}:{rows[0].line}: cannot tell the file's kind from its fields {sorted(rows[0].data)}; expected "
                    "COMPS (property, acceptable_concept, …), concepts (concept, category) or seed translations "
                    "(language, text, translator, english|item_id)"
                )
            continue
        parsed[kind].append((f, rows))
    for f, rows in parsed["comps"]:
        _plan_comps(rows, plan, f.name)
    for _, rows in parsed["concepts"]:
        _plan_concepts(rows, plan)
    existing = {
        "concept": {english_key(r["english"]): r["id"] for r in ws.rows(select(t.concepts.c.id, t.concepts.c.english))},
        "property": {
            english_key(r["english"]): r["id"] for r in ws.rows(select(t.properties.c.id, t.properties.c.english))
        },
    }
    known = langs_mod.registry(ws)
    for _, rows in parsed["seed"]:
        _plan_seeds(rows, plan, known, existing)
    _check_lookalikes(ws, plan)
    _check_conflicts(ws, plan)
    if plan.problems:
        raise SeedImportError(plan.problems)
    return _write(ws, plan, len(files))


def record_similarities(ws: Workspace, values: dict[str, float]) -> None:
    """The embedding model's similarity of each pair's two concepts (pair id -> cosine), in one transaction."""
    with ws.transaction() as conn:
        for pid, value in values.items():
            conn.execute(t.pairs.update().where(t.pairs.c.id == pid).values(similarity=value))


def _check_lookalikes(ws: Workspace, plan: ImportPlan) -> None:
    """An English name that looks like another one (here or in the workspace) but would be another id is reported:
    the curator decides whether they are one concept (write them alike) or two (tell them apart)."""
    seen: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}  # (kind, look) -> id -> (English, where) first given
    for table, kind in ((t.concepts, "concept"), (t.properties, "property")):
        for r in ws.rows(select(table.c.id, table.c.english)):
            seen.setdefault((kind, look(r["english"])), {})[r["id"]] = (r["english"], "in the workspace")
    for kind, english, item, where in plan.names:
        seen.setdefault((kind, look(english)), {}).setdefault(item, (english, where))
    reported = set()
    for kind, english, item, where in plan.names:
        first, (other, other_where) = next(iter(seen[(kind, look(english))].items()))
        if item != first and item not in reported:
            reported.add(item)
            plan.problems.append(f"{where}: {english!r} looks the same as {other!r} ({other_where}) but would be another "
                                 f"{kind}: write them alike if they are one {kind}, or tell them apart")


def _check_conflicts(ws: Workspace, plan: ImportPlan) -> None:
    """A re-import is fine; a pair id that already exists with different content is not."""
    if not plan.pairs:
        return
    cols = ("negative_type", "prefix_acceptable", "prefix_unacceptable")
    existing = {r["id"]: r for r in ws.rows(select(t.pairs))}
    for pid, new in plan.pairs.items():
        old = existing.get(pid)
        if old and any(old[c] != new[c] for c in cols):
            plan.problems.append(f"{new['_where']}: pair {pid} already in the workspace with different content")


def _write(ws: Workspace, plan: ImportPlan, n_files: int) -> ImportSummary:
    with ws.transaction() as conn:
        n_c = ws.upsert_ignore(conn, t.concepts, list(plan.concepts.values()))
        for cid, (cat, _) in plan.categories.items():
            conn.execute(t.concepts.update().where(t.concepts.c.id == cid).values(category=cat))
        n_p = ws.upsert_ignore(conn, t.properties, list(plan.properties.values()))
        n_x = ws.upsert_ignore(conn, t.pairs, [{k: v for k, v in p.items() if k != "_where"} for p in plan.pairs.values()])
        # English is its own verified source language; expert seed translations are verified words in
        # their language (stage 1 of XCOMPS). The review owner records both.
        words = [VerifiedWord(item_id=c["id"], lang=langs_mod.SOURCE_LANGUAGE, kind="concept", text=c["english"],
                              origin="source") for c in plan.concepts.values()]
        words += [VerifiedWord(item_id=p["id"], lang=langs_mod.SOURCE_LANGUAGE, kind="property", text=p["english"],
                               origin="source") for p in plan.properties.values()]
        n_s = 0
        for seed in plan.seeds:
            n_s += ws.upsert_ignore(conn, t.seed_translations, [seed])
            sid = conn.execute(
                select(t.seed_translations.c.id).where(
                    t.seed_translations.c.item_id == seed["item_id"],
                    t.seed_translations.c.lang == seed["lang"],
                    t.seed_translations.c.translator == seed["translator"],
                )
            ).scalar_one()
            words.append(VerifiedWord(item_id=seed["item_id"], lang=seed["lang"], kind=seed["kind"], text=seed["text"],
                                      origin="seed", reviewer=seed["translator"], seed_id=sid))
        record_seed_words(ws, conn, words)
    return ImportSummary(n_files, n_c, n_p, n_x, n_s)
