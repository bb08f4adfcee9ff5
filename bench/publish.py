"""Benchmark: `builder publish` of 250,000 minimal pairs in 17 languages, against pyarrow alone.

A workspace is synthesised with bulk inserts (14,706 pairs × 17 languages, every word verified through
a proposal and a review, sentences with spans). In the same run:
- publish: the whole `builder publish` (workspace reads, every release check, parquet, card, croissant,
  manifest, git commit, checksum verification of the commit, tag, checkout);
- baseline: the same tables with the fastest plain code found: each table read once with `sqlite3`
  (sentences per language, the property's offsets taken out of the JSON by SQLite), joined, sorted
  and typed by pyarrow, written with `pyarrow.parquet.write_table`; nothing else (no checks, card,
  manifest or git). Faster than one SQL join per language (whose rows Python must turn into
  columns) and than one join of everything walked row by row; the bench asserts that its tables
  equal the release's, column for column;
- write_only: `write_table` of the already-built tables, for reference.
Publish and baseline alternate, twice each; the best of each is reported.
Ends with one line: BENCH publish key=value ...
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from builder.languages import registry
from builder.records import NEGATIVE_TYPES, concept_id, pair_id, property_id
from builder.releases.features import PAIR_FEATURES
from builder.releases.publish import PublishRequest, publish
from builder.releases.reading import LocalSource
from builder.workspace import schema as t
from builder.workspace.store import init_workspace, now

ROWS = 250_000
N_LANGS = 17
N_CONCEPTS = 1_000
REPEATS = 2


def synthesise(ws, langs: list[str], n_pairs: int) -> None:
    ts0 = now()
    n_props = -(-n_pairs // 4)
    concepts = [{"id": concept_id(f"thing {i}"), "english": f"thing {i}", "category": f"cat {i % 20}", "source": "bench"}
                for i in range(N_CONCEPTS)]
    props = [{"id": property_id(f"has feature {i}"), "english": f"has feature {i}", "phrase": f"has feature {i}.",
              "source": "bench"} for i in range(n_props)]
    pairs = []
    for i in range(n_pairs):
        p, acc, unacc = props[i // 4], concepts[(i // 4) % N_CONCEPTS], concepts[(i // 4 + 1 + i % 4) % N_CONCEPTS]
        pairs.append({"id": pair_id(p["english"], acc["english"], unacc["english"]), "group_id": f"g{i // 4}",
                      "property_id": p["id"], "acceptable_id": acc["id"], "unacceptable_id": unacc["id"],
                      "negative_type": NEGATIVE_TYPES[i % 4], "similarity": (i % 100) / 100, "source": "bench",
                      "prefix_acceptable": f"a {acc['english']}", "prefix_unacceptable": f"a {unacc['english']}"})
    items = [(c["id"], "concept", c["english"]) for c in concepts] + [(p["id"], "property", p["english"]) for p in props]
    with ws.transaction() as conn:
        conn.execute(t.concepts.insert(), concepts)
        conn.execute(t.properties.insert(), props)
        conn.execute(t.pairs.insert(), pairs)
        conn.execute(t.llm_calls.insert(), [{"id": f"call_{lang}", "request_key": lang, "model": "bench-model", "prompt_hash": "-",
                                             "stage": "generate", "lang": lang, "source": "api", "tokens_in": 0, "tokens_out": 0,
                                             "latency_ms": 0, "cost_usd": 0, "created_at": ts0} for lang in langs])
        conn.execute(t.verified_words.insert(), [{"item_id": i, "lang": "en", "kind": k, "text": e, "origin": "source",
                                                  "verified_at": ts0} for i, k, e in items])
        for lang in langs[1:]:
            conn.execute(t.proposals.insert(), [{"item_id": i, "kind": k, "lang": lang, "revision": 1, "text": f"{e} ({lang})",
                                                 "alternatives": [], "note": "", "ambiguous": False, "llm_call_id": f"call_{lang}",
                                                 "created_at": ts0} for i, k, e in items])
        proposal_ids = {(r.item_id, r.lang): r.id for r in conn.execute(t.proposals.select())}
        conn.execute(t.reviews.insert(), [{"proposal_id": pid, "decision": "accept", "final_text": None, "reviewer": "curator",
                                           "comment": "", "channel": "cli", "created_at": ts0} for pid in proposal_ids.values()])
        review_ids = {r.proposal_id: r.id for r in conn.execute(t.reviews.select())}
        texts = {(i, lang): f"{e} ({lang})" for lang in langs[1:] for i, _, e in items}
        conn.execute(t.verified_words.insert(), [
            {"item_id": i, "lang": lang, "kind": k, "text": texts[(i, lang)], "origin": "review", "reviewer": "curator",
             "proposal_id": proposal_ids[(i, lang)], "review_id": review_ids[proposal_ids[(i, lang)]], "verified_at": ts0}
            for lang in langs[1:] for i, k, _ in items])
        ts1 = now()
        for lang in langs:
            rows = []
            for p in pairs:
                a = texts.get((p["acceptable_id"], lang)) or next_en(concepts, p["acceptable_id"])
                u = texts.get((p["unacceptable_id"], lang)) or next_en(concepts, p["unacceptable_id"])
                prop = texts.get((p["property_id"], lang)) or p["property_id"]
                acc, unacc = f"{a} {prop}.", f"{u} {prop}."
                rows.append({"pair_id": p["id"], "lang": lang, "acceptable": acc, "unacceptable": unacc,
                             "spans": {"acceptable_concept": [0, len(a)], "acceptable_property": [len(a) + 1, len(acc) - 1],
                                       "unacceptable_concept": [0, len(u)], "unacceptable_property": [len(u) + 1, len(unacc) - 1]},
                             "acceptable_form": a, "unacceptable_form": u, "status": "generated", "reason": "",
                             "origin": "llm", "llm_call_id": f"call_{lang}", "created_at": ts1})
            conn.execute(t.sentence_pairs.insert(), rows)
            print(f"  synthesised {lang}: {len(rows)} sentence pairs", flush=True)


_EN: dict[str, str] = {}


def next_en(concepts, cid):
    if not _EN:
        _EN.update({c["id"]: c["english"] for c in concepts})
    return _EN[cid]


SPANS = {"acceptable_property": "property_span", "acceptable_concept": "acceptable_concept_span",
         "unacceptable_concept": "unacceptable_concept_span"}  # spans' JSON key -> the release column
NEGATIVE = "CASE p.negative_type " + " ".join(f"WHEN '{n}' THEN {i}" for i, n in enumerate(NEGATIVE_TYPES)) + " ELSE -1 END"


def _fetch(con: sqlite3.Connection, sql: str, names: list[str], params: tuple = ()) -> pa.Table:
    rows = con.execute(sql, params).fetchall()
    return pa.table(dict(zip(names, zip(*rows))) if rows else {n: [] for n in names})


def _span(table: pa.Table, column: str) -> pa.Array:
    """A span column from its two offset columns (`<column>_0`, `<column>_1`), as the release types it."""
    offsets = np.column_stack([table[f"{column}_0"].to_numpy(), table[f"{column}_1"].to_numpy()]).astype(np.int32).ravel()
    return pa.FixedSizeListArray.from_arrays(pa.array(offsets), 2)


def baseline(db: Path, out: Path, langs: list[str]) -> dict[str, pa.Table]:
    """The same tables with sqlite3 and pyarrow alone: each table read once, joined by pyarrow, written per language."""
    con = sqlite3.connect(db)
    pairs = _fetch(con, f"SELECT p.id, p.property_id, p.acceptable_id, p.unacceptable_id, {NEGATIVE}, p.similarity FROM pairs p",
                   ["pair_id", "property_id", "acceptable_id", "unacceptable_id", "negative_type", "similarity"])
    concepts = _fetch(con, "SELECT id, english, category FROM concepts", ["id", "english", "category"])
    pairs = (pairs.join(_fetch(con, "SELECT id, english FROM properties", ["property_id", "property_en"]), "property_id")
             .join(concepts.rename_columns(["acceptable_id", "acceptable_concept_en", "category"]), "acceptable_id")
             .join(concepts.select(["id", "english"]).rename_columns(["unacceptable_id", "unacceptable_concept_en"]),
                   "unacceptable_id"))
    columns = list(PAIR_FEATURES)
    tables = {}
    for lang in langs:
        words = _fetch(con, "SELECT item_id, text FROM verified_words WHERE lang = ?", ["item_id", "text"], (lang,))
        spans = [f"json_extract(spans, '$.{k}[{i}]')" for k in SPANS for i in (0, 1)]
        table = _fetch(con, f"SELECT pair_id, acceptable, unacceptable, {', '.join(spans)} FROM sentence_pairs "
                       "WHERE lang = ? AND status = 'generated'",
                       ["pair_id", "acceptable_sentence", "unacceptable_sentence", *(f"{c}_{i}" for c in SPANS.values() for i in (0, 1))],
                       (lang,)).join(pairs, "pair_id")
        for key, name in (("property_id", "property"), ("acceptable_id", "acceptable_concept"),
                          ("unacceptable_id", "unacceptable_concept")):
            table = table.join(words.rename_columns([key, name]), key)
        table = table.sort_by("pair_id")
        n = table.num_rows
        data = {c: table[c] for c in columns[:14] if c != "lang"} | {c: _span(table, c) for c in SPANS.values()} | {
            "lang": pa.array([lang] * n),
            "review_status": pa.array(["source" if lang == "en" else "verified"] * n),
            "n_reviewers": pa.array(np.full(n, 0 if lang == "en" else 1, np.int32)), "corrected": pa.array(np.zeros(n, bool)),
            "sentence_origin": pa.array(["comps" if lang == "en" else "llm"] * n), "sentence_review": pa.nulls(n, pa.string())}
        tables[lang] = pa.table({c: data[c] for c in columns}, schema=PAIR_FEATURES.arrow_schema)
        (out / lang).mkdir(parents=True)
        pq.write_table(tables[lang], out / lang / "test.parquet")
    con.close()
    return tables


def main() -> None:
    langs = ["en", *sorted(c for c in registry() if c != "en")][:N_LANGS]
    assert len(langs) == N_LANGS, langs
    n_pairs = -(-ROWS // N_LANGS)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = init_workspace(root / "ws")
        print(f"synthesising {n_pairs} pairs × {N_LANGS} languages …", flush=True)
        synthesise(ws, langs, n_pairs)

        publish_runs, baseline_runs = [], []
        for run in range(REPEATS):  # alternate, best of each: the same warm caches for both
            print(f"run {run + 1}/{REPEATS}: publishing …", flush=True)
            start = time.perf_counter()
            res = publish(ws, PublishRequest(target=root / f"releases-{run}", version="1.0.0"))
            publish_runs.append(time.perf_counter() - start)
            rows = sum(res.counts.values())
            print(f"  published {rows} rows in {publish_runs[-1]:.2f} s: {res.timings}", flush=True)
            print(f"run {run + 1}/{REPEATS}: baseline, sqlite3 + pyarrow joins + write_table …", flush=True)
            start = time.perf_counter()
            plain = baseline(root / "ws" / "workspace.sqlite", root / f"baseline-{run}", langs)
            baseline_runs.append(time.perf_counter() - start)
            print(f"  {sum(t.num_rows for t in plain.values())} rows in {baseline_runs[-1]:.2f} s", flush=True)
        publish_s, baseline_s = min(publish_runs), min(baseline_runs)
        tables = {c: LocalSource(root / "releases-0").read_table("1.0.0", c) for c in res.counts}
        different = [c for c in tables if not pq.read_table(root / "baseline-0" / c / "test.parquet").equals(tables[c])]
        assert sorted(plain) == sorted(tables) and not different, f"the baseline's tables differ from the release's: {different}"
        start = time.perf_counter()
        for c, table in tables.items():
            pq.write_table(table, root / f"only-{c}.parquet")
        write_only_s = time.perf_counter() - start
        print(f"  write_table alone: {write_only_s:.2f} s; baseline tables equal the release's", flush=True)
        ws.close()
    print(f"BENCH publish rows={rows} languages={N_LANGS} publish_s={publish_s:.2f} baseline_s={baseline_s:.2f} "
          f"ratio={publish_s / baseline_s:.2f} write_only_s={write_only_s:.2f} ratio_vs_write_only={publish_s / write_only_s:.1f} "
          "same_tables=True")


if __name__ == "__main__":
    main()
