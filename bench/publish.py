"""Benchmark: `builder publish` of 250,000 minimal pairs in 17 languages, against pyarrow alone.

A workspace is synthesised with bulk inserts (14,706 pairs × 17 languages, every word verified through
a proposal and a review, sentences with spans). In the same run:
- publish: the whole `builder publish` (workspace reads, every release check, parquet, card, croissant,
  manifest, git commit, checksum verification of the commit, tag, checkout);
- baseline: the same tables fetched with one plain SQL join per run and written with
  `pyarrow.parquet.write_table`, nothing else (no checks, card, manifest or git);
- write_only: `write_table` of the already-built tables, for reference.
Publish and baseline alternate, twice each; the best of each is reported.
Ends with one line: BENCH publish key=value ...
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from pathlib import Path

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


BASELINE_SQL = """
SELECT sp.pair_id, sp.lang, p.property_id, wp.text, pr.english, wa.text, wu.text, ca.english, cu.english, ca.category,
       p.negative_type, p.similarity, sp.acceptable, sp.unacceptable,
       json_extract(sp.spans, '$.acceptable_property[0]'), json_extract(sp.spans, '$.acceptable_property[1]'),
       json_extract(sp.spans, '$.acceptable_concept[0]'), json_extract(sp.spans, '$.acceptable_concept[1]'),
       json_extract(sp.spans, '$.unacceptable_concept[0]'), json_extract(sp.spans, '$.unacceptable_concept[1]')
FROM sentence_pairs sp JOIN pairs p ON p.id = sp.pair_id JOIN properties pr ON pr.id = p.property_id
JOIN concepts ca ON ca.id = p.acceptable_id JOIN concepts cu ON cu.id = p.unacceptable_id
JOIN verified_words wp ON wp.item_id = p.property_id AND wp.lang = sp.lang
JOIN verified_words wa ON wa.item_id = p.acceptable_id AND wa.lang = sp.lang
JOIN verified_words wu ON wu.item_id = p.unacceptable_id AND wu.lang = sp.lang
WHERE sp.status = 'generated' ORDER BY sp.lang, sp.pair_id
"""


def baseline(db: Path, out: Path) -> int:
    """The same tables with pyarrow alone: one SQL join, columns, write_table per language."""
    neg = {n: i for i, n in enumerate(NEGATIVE_TYPES)}
    con = sqlite3.connect(db)
    by_lang: dict[str, list] = {}
    for r in con.execute(BASELINE_SQL):
        by_lang.setdefault(r[1], []).append(r)
    con.close()
    n = 0
    for lang, rows in by_lang.items():
        cols = list(zip(*rows))
        spans = [[[a, b] for a, b in zip(cols[k], cols[k + 1])] for k in (14, 16, 18)]
        status = "source" if lang == "en" else "verified"
        data = dict(zip(list(PAIR_FEATURES)[:10], cols[:10]))
        data |= {"negative_type": [neg[x] for x in cols[10]], "similarity": cols[11], "acceptable_sentence": cols[12],
                 "unacceptable_sentence": cols[13], "property_span": spans[0],
                 "acceptable_concept_span": spans[1], "unacceptable_concept_span": spans[2], "review_status": [status] * len(rows),
                 "n_reviewers": [0 if lang == "en" else 1] * len(rows), "corrected": [False] * len(rows)}
        (out / lang).mkdir(parents=True)
        pq.write_table(pa.Table.from_pydict(data, schema=PAIR_FEATURES.arrow_schema), out / lang / "test.parquet")
        n += len(rows)
    return n


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
            print(f"run {run + 1}/{REPEATS}: baseline, one SQL join + pyarrow write_table …", flush=True)
            start = time.perf_counter()
            n = baseline(root / "ws" / "workspace.sqlite", root / f"baseline-{run}")
            baseline_runs.append(time.perf_counter() - start)
            assert n == rows, (n, rows)
            print(f"  {n} rows in {baseline_runs[-1]:.2f} s", flush=True)
        publish_s, baseline_s = min(publish_runs), min(baseline_runs)
        tables = {c: LocalSource(root / "releases-0").read_table("1.0.0", c) for c in res.counts}
        start = time.perf_counter()
        for c, table in tables.items():
            pq.write_table(table, root / f"only-{c}.parquet")
        write_only_s = time.perf_counter() - start
        same = all(pq.read_table(root / "baseline-0" / c / "test.parquet").equals(tables[c]) for c in tables)
        print(f"  write_table alone: {write_only_s:.2f} s; baseline tables identical to the release's: {same}", flush=True)
        ws.close()
    print(f"BENCH publish rows={rows} languages={N_LANGS} publish_s={publish_s:.2f} baseline_s={baseline_s:.2f} "
          f"ratio={publish_s / baseline_s:.2f} write_only_s={write_only_s:.2f} ratio_vs_write_only={publish_s / write_only_s:.1f} "
          f"same_tables={same}")


if __name__ == "__main__":
    main()
