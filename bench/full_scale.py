"""Benchmark: every stage on a COMPS-size workspace, and how each grows from a tenth of that size.

The workspace (size 1: COMPS's 521 concepts, 3,600 properties, 12,335 concept-property groups with one
negative of each of the four types: 49,340 pairs, in the 17 XCOMPS languages and English; a property's groups
use disjoint concepts, so each sentence is in one group and the unique sentences, 5 a group, grow as the pairs do)
is built as a team builds it, through the library wherever that is fast enough:
- seeds: `import_seeds` of COMPS-format files (pairs, categories, German and Chinese expert seeds);
- proposals: `translate` of the 15 other languages against the OpenAI-compatible stand-in (real HTTP,
  the real client and cache); reviews and verified words: `builder.reviews.accept`;
- English sentences: `generate` (they come from the COMPS fields);
- bulk inserts, because the library would be too slow to build them: the other languages' sentence
  pairs (generating them through the stand-in takes 210,000 requests), the rows `generate` stores for
  the stand-in's replies, with one LLM call per group (the cache's request texts are left out: no stage
  below reads them); and the sentence reviews of every language but the one pushed to Label Studio
  (recording them through pulls needs a Label Studio holding 800,000 annotated tasks), the rows
  `builder.reviews.record_pull` stores for a curator's accept, in projects remembered on a team server.
Then each stage runs in a process of its own, so that what one stage allocated cannot hide what the next
one needs:
- status: `builder status`'s counts for every language (`builder.status.status`);
- push: one language's 49,340 sentence review tasks (`annotation.review.push`) to a real Label Studio,
  started as the tests start it;
- pull: the same tasks, each annotated, pulled back (`annotation.review.pull`); Label Studio creates
  annotations one request at a time, so the tasks are imported with an accept into a fresh project of
  the same stage and language first, outside the timing;
- review_status: `builder review status` (`builder.reviews.review_status`) over all 17 languages' reviews;
- publish: the first release (`builder publish`: reads, checks, parquet, card, manifest, git, tag);
- republish: a second release after 1% of every language's sentences changed and 0.5% were removed,
  checked against the first (stable ids, the changes);
- load: every config of the first release, all held (`builder.releases.load`);
- diff: the two releases (`builder releases diff`, `builder.releases.diff.diff`);
- direct: the toy model's direct scoring (`evaluate.direct.Direct`, one thread) of every pair of the first
  release; its growth is also given per decoder position, since the toy's tokenizer splits the larger
  vocabulary of made-up words into more tokens.
Each stage gives its wall time and its peak memory: the highest resident memory of its process above what
the process held when the stage began (Label Studio's own memory is its server's). The stages that change
nothing (status, review_status, load, diff) run 3 times and give their best time and highest peak: at a tenth
of the size they take about a second, and one run's noise moved their growth by 0.2. The whole run is made
at a tenth of the size and at the full size; growth is the full size's figure over the tenth's, divided
by their ratio of pairs: 1.00 is linear, and a stage above 1.3 is flagged. It takes about 12 minutes on two
idle cores (`--sizes 0.1,0.2` gives a quick look).
Ends with one line: BENCH full_scale key=value ...
"""

from __future__ import annotations

import asyncio
import csv
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

CONCEPTS, PROPERTIES, GROUPS = 521, 3_600, 12_335  # 4 negatives a group: 49,340 pairs at size 1
PUSHED = "fr"  # the language whose sentence reviews go through Label Studio
TEAM_SERVER = "org:1@2026-01-05T09:00:00"  # the identity of the team's server where the other languages were reviewed
SYLLABLES = ("ka", "lo", "mi", "ru", "te", "za", "po", "ne", "vi", "su", "da", "fe", "go", "hu", "ji", "ba")
PROPERTY_SYLLABLES = ("bo", "ci", "de", "fa", "gu", "hi", "jo", "ku", "la", "me", "ni", "pu", "ra", "so", "ti", "vu")
STAGES = ("status", "push", "pull", "review_status", "publish", "republish", "load", "diff", "direct")
FLAG = 1.3
READ_ONLY, REPEATS = ("status", "review_status", "load", "diff"), 3  # these change nothing: timed as the best of 3
WINDOW = 13  # the concepts a group's sentences use: its acceptable one and its negatives, 1 to 12 concepts on


def word(i: int, syllables: tuple[str, ...] = SYLLABLES, width: int = 3) -> str:
    """A made-up word for each number: its digits in base 16 written as syllables, `width` of them. Concepts take
    `SYLLABLES`, three each, and property words `PROPERTY_SYLLABLES`, four each: all of one kind are as long, and no
    word is part of another, so the pair audits' occurrence check finds nothing to flag in any script."""
    out = []
    for _ in range(width):
        i, r = divmod(i, len(syllables))
        out.append(syllables[r])
    return "".join(reversed(out))


def shape(size: float) -> tuple[int, int, int]:
    n_c, n_p, n_g = round(CONCEPTS * size), round(PROPERTIES * size), round(GROUPS * size)
    if n_c < WINDOW * -(-n_g // n_p):
        raise SystemExit(f"size {size} gives {n_c} concepts; each property's {-(-n_g // n_p)} groups take {WINDOW} concepts "
                         f"each, apart, so the size must be at least {WINDOW * -(-GROUPS // PROPERTIES) / CONCEPTS:.3f}")
    return n_c, n_p, n_g


# -- the workspace ------------------------------------------------------------------------------------------


def words(size: float) -> tuple[list[str], list[str]]:
    """The concepts and the properties at `size`."""
    n_c, n_p, _ = shape(size)
    return ([word(i) for i in range(n_c)],
            [f"can {word(2 * i, PROPERTY_SYLLABLES, 4)} the {word(2 * i + 1, PROPERTY_SYLLABLES, 4)}" for i in range(n_p)])


def comps_rows(size: float) -> Iterator[dict]:
    """The COMPS-format pairs at `size`: each group's four negatives, a property's groups with windows apart, so
    every sentence is in one group only."""
    concepts, props = words(size)
    n_c, n_p, n_g = shape(size)
    for g in range(n_g):
        p, k = g % n_p, g // n_p
        a = (7 * p + WINDOW * k) % n_c
        for j, neg in enumerate(("taxonomic", "overlap", "co-occurrence", "random")):
            u = (a + 1 + j + 4 * (p % 3)) % n_c  # within the window
            yield {"property": props[p], "acceptable_concept": concepts[a], "unacceptable_concept": concepts[u],
                   "negative_sample_type": neg, "prefix_acceptable": f"a {concepts[a]}",
                   "prefix_unacceptable": f"a {concepts[u]}", "property_phrase": f"{props[p]}.",
                   "similarity": round((g * 37 + j) % 100 / 100, 2)}


def seed_files(folder: Path, size: float) -> None:
    """COMPS-format pairs, concept categories, and German and Chinese expert seeds for every word."""
    concepts, props = words(size)
    folder.mkdir(parents=True)
    with (folder / "comps.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in comps_rows(size))
    with (folder / "concepts.csv").open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["concept", "category"])
        w.writerows([c, f"category {i % 40}"] for i, c in enumerate(concepts))
    for lang in ("de", "zh"):
        with (folder / f"{lang}.csv").open("w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(["kind", "english", "language", "text", "translator"])
            w.writerows([kind, e, lang, f"{e} ({lang})", f"expert-{lang}"]
                         for kind, items in (("concept", concepts), ("property", props)) for e in items)


def synthesise(directory: Path, size: float) -> dict:
    """The workspace at `size` (see the module docstring); returns counts and the time each part took."""
    from sqlalchemy import select

    from builder.generate import generate
    from builder.languages import SEED_LANGUAGES, SOURCE_LANGUAGE, registry
    from builder.llm.cache import LLMCache
    from builder.llm.client import LLMClient
    from builder.llm.config import LLMSettings
    from builder.prompts import load as load_prompt
    from builder.records import SentencePair
    from builder.reviews import ReviewProject, accept, current_pairs, remember_project
    from builder.seeds import import_seeds
    from builder.testing.standin import StandinServer
    from builder.translate import translate
    from builder.workspace import schema as t
    from builder.workspace.store import init_workspace, now

    marks = [("", time.perf_counter())]  # (part, when it ended)

    def lap(name: str) -> None:
        marks.append((name, time.perf_counter()))

    ws = init_workspace(directory)
    reg = registry(ws)
    langs = [c for c in reg if c != SOURCE_LANGUAGE]
    llm_langs = [c for c in langs if c not in SEED_LANGUAGES]
    seed_files(directory.parent / "seeds", size)
    summary = import_seeds(ws, directory.parent / "seeds")
    lap("seeds")
    with StandinServer() as server:
        client = LLMClient(LLMCache.of_workspace(ws), LLMSettings(base_url=server.base_url, api_key="bench", timeout_s=120,
                                                                  model="standin-translator", concurrency=16))

        async def stages() -> None:
            try:
                await translate(ws, client, [reg[c] for c in llm_langs])
                await generate(ws, client, [reg[SOURCE_LANGUAGE]])
            finally:
                await client.aclose()

        asyncio.run(stages())
    requests = client.stats.sent
    lap("translate (stand-in) and English sentences")
    for lang in llm_langs:
        accept(ws, lang, reviewer=f"curator-{lang}@example.org")
    lap("accept")

    pairs = ws.rows(select(t.pairs.c.id, t.pairs.c.group_id, t.pairs.c.property_id, t.pairs.c.acceptable_id,
                           t.pairs.c.unacceptable_id).order_by(t.pairs.c.id))
    prompt_hash, ts = load_prompt("generate").hash, now()
    for lang in langs:
        words = {r["item_id"]: r["text"] for r in ws.rows(select(t.verified_words.c.item_id, t.verified_words.c.text)
                                                          .where(t.verified_words.c.lang == lang))}
        calls, rows = {}, []
        for p in pairs:
            call = calls.setdefault(p["group_id"], {
                "id": f"gen-{lang}-{p['group_id']}", "request_key": f"{lang}{p['group_id']}", "model": "standin-translator",
                "prompt_hash": prompt_hash, "stage": "generate", "lang": lang, "source": "api", "tokens_in": 400,
                "tokens_out": 120, "latency_ms": 0.0, "cost_usd": None, "created_at": ts})
            prop, acc, unacc = (words[p[k]] for k in ("property_id", "acceptable_id", "unacceptable_id"))
            rows.append({**SentencePair(
                pair_id=p["id"], lang=lang, acceptable=f"{acc} {prop}.", unacceptable=f"{unacc} {prop}.",
                spans={"acceptable_concept": (0, len(acc)), "acceptable_property": (len(acc) + 1, len(acc) + 1 + len(prop)),
                       "unacceptable_concept": (0, len(unacc)),
                       "unacceptable_property": (len(unacc) + 1, len(unacc) + 1 + len(prop))},
                acceptable_form=acc, unacceptable_form=unacc, status="generated", origin="llm", llm_call_id=call["id"],
            ).model_dump(mode="json"), "created_at": ts})
        with ws.transaction() as conn:
            conn.execute(t.llm_calls.insert(), list(calls.values()))
            conn.execute(t.sentence_pairs.insert(), rows)
    lap("sentence pairs (bulk)")

    annotation_id = 0
    for number, lang in enumerate(langs):
        if lang == PUSHED:
            continue
        remember_project(ws, ReviewProject(stage="sentences", lang=lang, project_id=number + 1, server=TEAM_SERVER,
                                           title=f"[sentences:{lang}] {reg[lang].name} review"))
        reviews, sentences = [], []
        for pair_id, sp in current_pairs(ws, lang).items():
            annotation_id += 1
            key = {"annotation_id": annotation_id, "server": TEAM_SERVER}
            reviews.append({**key, "stage": "sentences", "lang": lang, "item_id": pair_id, "proposal_id": None,
                            "task_id": annotation_id, "decision": "accept", "comment": "", "reviewer": f"curator-{lang}@example.org",
                            "final_text": f"{sp['acceptable']}\n{sp['unacceptable']}", "cancelled": False, "lead_time_s": 9.5,
                            "edit_distance": 0, "created_at": ts, "updated_at": ts})
            sentences.append({**key, "pair_id": pair_id, "lang": lang, "version": sp["version"],
                              "acceptable": sp["acceptable"], "unacceptable": sp["unacceptable"]})
        with ws.transaction() as conn:
            conn.execute(t.review_annotations.insert(), reviews)
            conn.execute(t.sentence_reviews.insert(), sentences)
    lap("sentence reviews (bulk)")
    ws.close()
    return {"pairs": summary.pairs, "items": summary.concepts + summary.properties, "languages": len(langs) + 1,
            "translate_requests": requests, "annotations": annotation_id,
            "laps": {name: round(end - start, 1) for (_, start), (name, end) in pairwise(marks)}}


def change(directory: Path) -> dict:
    """Between the two releases: 1% of every language's sentence pairs rewritten, 0.5% removed (bulk, as a
    regeneration would leave them)."""
    from sqlalchemy import select

    from builder.workspace import schema as t
    from builder.workspace.store import open_workspace

    ws = open_workspace(directory)
    sp = t.sentence_pairs
    ids = [r["pair_id"] for r in ws.rows(select(sp.c.pair_id).where(sp.c.lang == "en").order_by(sp.c.pair_id))]
    edited, removed = ids[::100], ids[50::200]
    with ws.transaction() as conn:
        for lang in sorted({r["lang"] for r in ws.rows(select(sp.c.lang).distinct())} - {"en"}):
            rows = conn.execute(select(sp.c.pair_id, sp.c.acceptable, sp.c.unacceptable)
                                .where(sp.c.lang == lang, sp.c.pair_id.in_(edited))).all()
            for pid, acc, unacc in rows:
                conn.execute(sp.update().where(sp.c.pair_id == pid, sp.c.lang == lang).values(
                    acceptable=acc[:-1] + ", indeed.", unacceptable=unacc[:-1] + ", indeed."))
            conn.execute(sp.delete().where(sp.c.lang == lang, sp.c.pair_id.in_(removed)))
    ws.close()
    return {"edited": len(edited), "removed": len(removed)}


# -- the stages, each in a process of its own ----------------------------------------------------------------


def _kib(field: str) -> int:
    return int(re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE).group(1))


def stage(name: str, root: Path) -> dict:
    """Set the stage up, then run it with the clock and the peak of resident memory reset; returns both and what it did."""
    from annotation import server as ls_server
    from builder.workspace.store import open_workspace

    ws = open_workspace(root / "ws")
    run = SETUPS[name](ws, root, ls_server)
    times = []
    for _ in range(REPEATS if name in READ_ONLY else 1):
        Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) restarts from what is resident now
        before = _kib("VmRSS")
        start, cpu = time.perf_counter(), time.process_time()
        did = run()
        times.append((time.perf_counter() - start, time.process_time() - cpu, _kib("VmHWM") - before))
    ws.close()
    seconds, cpu = min(times)[:2]
    peak = max(kib for *_, kib in times)
    return {"seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3), "peak_mib": round(peak / 1024, 1), "did": did}


def _status(ws, root, ls_server):
    from builder.languages import registry
    from builder.status import status

    codes = list(registry(ws))
    return lambda: sum(r.generate.generated for r in status(ws, codes))


def _review_status(ws, root, ls_server):
    from builder.reviews import review_status

    return lambda: len(review_status(ws))


def _push(ws, root, ls_server):
    from annotation.review import push

    conn = ls_server.connect(root / "ws")
    return lambda: push(ws, conn, PUSHED, stage="sentences").created


def _pull(ws, root, ls_server):
    """Annotate every pushed task: Label Studio creates annotations one request at a time (49,340 of them would
    take hours), so the same tasks are imported with an accept into a fresh project of the same stage and language."""
    from annotation.review import client, ensure_project, predictions, pull, stage_tasks, task_data
    from builder.review_stages import review_stage
    from builder.reviews import review_project

    conn = ls_server.connect(root / "ws")
    ls = client(conn)
    ls.projects.delete(id=review_project(ws, "sentences", PUSHED, conn.server).project_id)
    pid = ensure_project(ws, ls, conn, "sentences", PUSHED)  # the pushed project is gone: a new one, remembered
    decision = {"from_name": "decision", "to_name": review_stage("sentences").screen.to, "type": "choices",
                "value": {"choices": ["accept"]}}
    tasks = stage_tasks(ws, PUSHED, "sentences")
    for i in range(0, len(tasks), 1000):
        ls.projects.import_tasks(id=pid, request=[
            {"data": task_data(x), "annotations": [{"result": [decision, *predictions("sentences", x)[0]["result"]]}]}
            for x in tasks[i:i + 1000]])
    return lambda: pull(ws, conn).new


def _publish(version: str):
    def setup(ws, root, ls_server):
        from builder.releases.publish import PublishRequest, publish

        return lambda: sum(publish(ws, PublishRequest(target=root / "releases", version=version)).counts.values())
    return setup


def _load(ws, root, ls_server):
    from builder import releases

    configs = releases.configs(root / "releases", "1.0.0")

    def run() -> int:
        loaded = [releases.load(root / "releases", "1.0.0", c) for c in configs]  # all held at once, as a user holds them
        return sum(ds.num_rows for ds in loaded)
    return run


def _diff(ws, root, ls_server):
    from builder.releases.diff import diff

    def run() -> dict[str, int]:
        counts = diff(root / "releases", "1.0.0", "1.1.0").summary().values()
        return {k: sum(c[k] for c in counts) for k in ("added", "removed", "changed")}
    return run


def _direct(ws, root, ls_server):
    """The toy model (hidden 64, 2 layers; 20 training steps: the weights do not change the time) on one thread."""
    import torch

    from builder.languages import registry
    from evaluate.data import load_release_pairs
    from evaluate.direct import Direct
    from evaluate.methods import Context, EvalOptions
    from evaluate.models import load_model
    from evaluate.scoring import Scorer
    from evaluate.toy import train_toy

    torch.set_num_threads(1)
    pairs, _ = load_release_pairs(root / "releases", "1.0.0")
    sample = pairs["acceptable_sentence"].iloc[:: max(1, len(pairs) // 2000)].tolist()
    loaded = load_model(train_toy(sample, root / "toy", steps=20), device="cpu", dtype="float32")
    ctx = Context(registry(), EvalOptions(), root / "direct", scorer=Scorer(loaded))
    return lambda: {"items": len(Direct().run(ctx, pairs).items), "positions": ctx.scorer.work.positions}


SETUPS = {"status": _status, "review_status": _review_status, "push": _push, "pull": _pull, "publish": _publish("1.0.0"),
          "republish": _publish("1.1.0"), "load": _load, "diff": _diff, "direct": _direct}


def child(*args: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    # a failure ends the bench with the child's own error, not a traceback of ours
    if proc.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(size: float, root: Path) -> dict:
    from annotation import server as ls_server

    print(f"size {size}: synthesising …", flush=True)
    built = child("--synthesise", str(size), str(root))
    print(f"  {built['pairs']} pairs, {built['items']} concepts and properties, {built['languages']} languages, "
          f"{built['translate_requests']} translation requests, {built['annotations']} sentence reviews; {built['laps']}", flush=True)
    ls_server.serve(root / "ws", log=lambda *a: print(" ", *a, flush=True))
    try:
        results = {}
        for name in STAGES:
            if name == "republish":
                print(f"  changed: {child('--change', str(root))}", flush=True)
            results[name] = child("--stage", name, str(root))
            r = results[name]
            print(f"  {name:>13}: {r['seconds']:8.2f} s (CPU {r['cpu_seconds']:7.2f} s) {r['peak_mib']:8.1f} MiB  {r['did']}",
                  flush=True)
    finally:
        ls_server.stop(root / "ws")
    return {"built": built, "stages": results}


def main(sizes: tuple[float, float] = (0.1, 1.0)) -> None:
    runs = {}
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="full-scale-") as tmp:
            runs[size] = measure(size, Path(tmp))
    small, full = runs[sizes[0]], runs[sizes[1]]
    scale = full["built"]["pairs"] / small["built"]["pairs"]
    fields, flagged = [], []
    print(f"growth from {small['built']['pairs']} to {full['built']['pairs']} pairs ({scale:.2f}x), over linear (1.00 = linear):")
    for name in STAGES:
        a, b = small["stages"][name], full["stages"][name]
        t_growth = b["seconds"] / max(a["seconds"], 1e-3) / scale
        c_growth = b["cpu_seconds"] / max(a["cpu_seconds"], 1e-3) / scale  # what others' load on the machine skews least
        m_growth = max(b["peak_mib"], 1.0) / max(a["peak_mib"], 1.0) / scale  # below 1 MiB is noise
        flags = [what for what, g in (("time", t_growth), ("memory", m_growth)) if g > FLAG]
        flagged += [f"{name}:{what}" for what in flags]
        print(f"  {name:>13}: {b['seconds']:8.2f} s (x{t_growth:.2f}; CPU x{c_growth:.2f}), {b['peak_mib']:8.1f} MiB "
              f"(x{m_growth:.2f})" + (f"  FLAGGED: {', '.join(flags)} grows faster than linear" if flags else ""), flush=True)
        fields.append(f"{name}_s={b['seconds']:.2f} {name}_mib={b['peak_mib']:.1f} {name}_time_growth={t_growth:.2f} "
                      f"{name}_cpu_growth={c_growth:.2f} {name}_memory_growth={m_growth:.2f}")
    # the toy's tokenizer (512 tokens, trained on a 2,000-sentence sample) splits a larger vocabulary of made-up
    # words into more tokens: per decoder position is what the scorer's own growth is
    a, b = (r["stages"]["direct"] for r in (small, full))
    position_growth = b["seconds"] / b["did"]["positions"] / (a["seconds"] / a["did"]["positions"])
    print(f"  direct per decoder position: x{position_growth:.2f} ({a['did']['positions']} to {b['did']['positions']} positions)")
    fields.append(f"direct_position_growth={position_growth:.2f}")
    print(f"BENCH full_scale pairs={full['built']['pairs']} languages={full['built']['languages']} "
          f"pushed_tasks={full['stages']['push']['did']} small_pairs={small['built']['pairs']} {' '.join(fields)} "
          f"flag_above={FLAG} flagged={','.join(flagged) or 'none'}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--synthesise"]:
        print(json.dumps(synthesise(Path(sys.argv[3]) / "ws", float(sys.argv[2]))))
    elif sys.argv[1:2] == ["--change"]:
        print(json.dumps(change(Path(sys.argv[2]) / "ws")))
    elif sys.argv[1:2] == ["--stage"]:
        print(json.dumps(stage(sys.argv[2], Path(sys.argv[3]))))
    elif sys.argv[1:2] == ["--sizes"]:  # a quick look at smaller sizes: --sizes 0.1,0.2
        main(tuple(map(float, sys.argv[2].split(","))))
    else:
        main()
