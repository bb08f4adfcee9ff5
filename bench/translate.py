"""Benchmark: translate the bundled sample into 17 languages against the stand-in server.

Each reply takes 200 ms. The concurrent client (16 in flight) is compared with the concurrency
bound (requests x latency / concurrency) and with a sequential client translating the same 17
languages in the same run (every request sent and timed, none projected).
Ends with one line: BENCH translate key=value ...
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from builder.languages import registry
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient
from builder.llm.config import LLMSettings
from builder.paths import sample_dir
from builder.seeds import import_seeds
from builder.translate import translate
from builder.workspace.store import init_workspace

LATENCY_S = 0.2
CONCURRENCY = 16


def timed_run(tmp: Path, name: str, langs: list[str], concurrency: int, base_url: str) -> tuple[float, int]:
    ws = init_workspace(tmp / name)
    seeds = sample_dir() / "seeds"
    import_seeds(ws, seeds / "comps.jsonl", seeds / "concepts.csv")  # no seeds: de and zh are translated too
    settings = LLMSettings(base_url=base_url, api_key="bench", model="standin-translator",
                           concurrency=concurrency, timeout_s=30)
    client = LLMClient(LLMCache.of_workspace(ws), settings)

    async def go():
        try:
            await translate(ws, client, [registry()[c] for c in langs])
        finally:
            await client.aclose()

    start = time.perf_counter()
    asyncio.run(go())
    wall = time.perf_counter() - start
    sent = client.stats.sent
    ws.close()
    return wall, sent


def main() -> None:
    langs = [c for c in registry() if c != "en"]
    assert len(langs) == 17, langs
    # The server runs in its own process, as a real endpoint would, so it does not share our GIL.
    server = subprocess.Popen([sys.executable, "-m", "builder.testing.standin", "--latency", str(LATENCY_S)],
                              stdout=subprocess.PIPE, text=True)
    try:
        base_url = server.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            wall, requests = timed_run(Path(tmp), "concurrent", langs, CONCURRENCY, base_url)
            seq_wall, seq_requests = timed_run(Path(tmp), "sequential", langs, 1, base_url)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert seq_requests == requests, (seq_requests, requests)
    bound = requests * LATENCY_S / CONCURRENCY
    print(f"{len(langs)} languages, {requests} requests of 10 items, {LATENCY_S * 1000:.0f} ms per reply", file=sys.stderr)
    print(f"concurrent ({CONCURRENCY}): {wall:.2f} s; bound {bound:.2f} s; sequential: {seq_wall:.1f} s "
          f"({seq_wall / seq_requests * 1000:.0f} ms/request)", file=sys.stderr)
    print(f"BENCH translate languages={len(langs)} requests={requests} latency_ms={LATENCY_S * 1000:.0f} "
          f"concurrency={CONCURRENCY} wall_s={wall:.2f} bound_s={bound:.2f} of_bound={bound / wall:.3f} "
          f"sequential_s_per_request={seq_wall / seq_requests:.3f} sequential_s={seq_wall:.1f} "
          f"speedup_vs_sequential={seq_wall / wall:.1f}")


if __name__ == "__main__":
    main()
