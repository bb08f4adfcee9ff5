"""Benchmark: rendering 100,000 M2C tests from a template with agreement, rules and a function.

Our engine streams: it counts the valid fills per feature combination, draws a uniform sample of
fill indices in increasing order and decodes each, so memory does not grow with the number of tests.
The baseline, in the same run and with the same rendering code, is the naive approach of the public
reference: materialise the full Cartesian product of valid fills first, then sample and render.
Peak memory is measured with tracemalloc in separate passes (it slows allocation), at two numbers of
tests (flatness) and on a template with 10^11 fills that the baseline could not even list.
Ends with one line: BENCH render key=value ...
"""

from __future__ import annotations

import itertools
import random
import time
import tracemalloc

from builder.m2c import Lexeme, Template
from builder.m2c.engine import render_text

N = 100_000
SMALL = 10_000
SEED = 1
GENDERS = ["MASC", "FEM", "NEUT"]
TEXT = ("{ART.DEF.NOM.<obj.NUMBER.GENDER>} {obj} {liegt:obj.SG|liegen:obj.PL} {prep} "
        "{ART.DEF.DAT.SG.<place.GENDER>} {place.SG}, sagt {name}: {$sum(a, b)} Äpfel.")
PREPS = ["auf", "unter", "neben", "hinter", "vor", "an", "in", "über"]


def template(n_obj: int, n_place: int, n_name: int, n_num: int) -> Template:
    obj = [Lexeme({"SG": f"Ding{i}", "PL": f"Dinge{i}"}, features=GENDERS[i % 3]) for i in range(n_obj)]
    place = [Lexeme({"SG": f"Ort{i}"}, features=GENDERS[i % 3]) for i in range(n_place)]
    nums = [str(i) for i in range(1, n_num + 1)]
    return Template(TEXT, "de", obj=obj, place=place, prep=PREPS, name=[f"Name{i}" for i in range(n_name)], a=nums, b=nums)


def stream(t: Template, n: int) -> tuple[int, str]:
    count, last = 0, ""
    for sentence in t.stream(n, seed=SEED):
        count, last = count + 1, sentence
    return count, last


def naive(t: Template, n: int) -> tuple[int, str]:
    """The reference's way: every valid fill listed (per feature combination, the product of the
    candidate lexemes), then a random sample rendered."""
    ct = t.compiled
    every = []
    for c, combo in enumerate(ct.space.combos):
        for choice in itertools.product(*(g.choices for g in combo.groups)):
            every.append((c, choice))
    picked = random.Random(SEED).sample(every, n)
    count, last = 0, ""
    for c, choice in picked:
        combo = ct.space.combos[c]
        values = dict(zip([g.name for g in combo.groups], choice))
        last = ct.lang.postprocess(render_text(ct, "text", combo, values)[0])
        count += 1
    return count, last


def timed(fn, *args) -> tuple[float, tuple]:
    started = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - started, out


def peak_mb(fn, *args) -> float:
    tracemalloc.start()
    fn(*args)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    t = template(30, 30, 5, 3)
    huge = template(200, 200, 100, 50)
    print(f"template: {len(t):,} valid fills ({len(t.compiled.space.combos)} feature combinations); huge: {len(huge):,}", flush=True)
    stream_s, (count, example) = timed(stream, t, N)
    assert count == N
    print(f"stream  {N:,} tests in {stream_s:.2f}s = {N / stream_s:,.0f} tests/s  e.g. {example!r}", flush=True)
    naive_s, (count, _) = timed(naive, t, N)
    assert count == N
    print(f"naive   {N:,} tests in {naive_s:.2f}s = {N / naive_s:,.0f} tests/s (lists all {len(t):,} fills first)", flush=True)
    huge_s, (count, example) = timed(stream, huge, N)
    print(f"huge    {N:,} tests in {huge_s:.2f}s = {N / huge_s:,.0f} tests/s  e.g. {example!r}", flush=True)
    print("peak memory (tracemalloc)...", flush=True)
    mem_small = peak_mb(stream, t, SMALL)
    mem_n = peak_mb(stream, t, N)
    mem_huge = peak_mb(stream, huge, N)
    mem_naive = peak_mb(naive, t, N)
    print(f"stream {SMALL:,}: {mem_small:.2f} MiB; stream {N:,}: {mem_n:.2f} MiB; huge {N:,}: {mem_huge:.2f} MiB; "
          f"naive {N:,}: {mem_naive:.1f} MiB", flush=True)
    print(f"BENCH render tests={N} fills={len(t)} stream_tests_per_s={N / stream_s:.0f} naive_tests_per_s={N / naive_s:.0f} "
          f"speedup={naive_s / stream_s:.2f} stream_peak_mib={mem_n:.2f} naive_peak_mib={mem_naive:.1f} "
          f"memory_ratio={mem_naive / mem_n:.1f} stream_peak_mib_{SMALL}={mem_small:.2f} flat_ratio={mem_n / mem_small:.2f} "
          f"huge_fills={len(huge)} huge_tests_per_s={N / huge_s:.0f} huge_peak_mib={mem_huge:.2f}")


if __name__ == "__main__":
    main()
