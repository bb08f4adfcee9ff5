"""Benchmark: pushing 10,000 review tasks to a real Label Studio, and pulling 10,000 annotated ones.

Our push (tasks listed once, then chunked bulk import with the LLM draft as a prediction) is compared
in the same run with the naive client: one task request plus one prediction request per task, timed
on a sample of tasks and projected to 10,000. Ends with one line: BENCH review_push key=value ...
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from annotation import server as ls_server
from annotation.review import client, ensure_project, pull, push, translation_tasks
from builder.records import concept_id
from builder.workspace import schema as t
from builder.workspace.store import init_workspace, now

N = 10_000
NAIVE_SAMPLE = 300
LANG = "fr"


def synthetic(ws, n: int) -> None:
    """n concepts with a French proposal each, written straight into the workspace (no LLM needed)."""
    ts = now()
    with ws.transaction() as conn:
        conn.execute(t.llm_calls.insert().values(id="call_bench", request_key="bench", model="bench-model", prompt_hash="-",
                                                 stage="translate", lang=LANG, source="api", tokens_in=0, tokens_out=0,
                                                 latency_ms=0, cost_usd=0, created_at=ts))
        concepts = [{"id": concept_id(f"thing {i}"), "english": f"thing {i}", "category": "bench", "source": "bench"}
                    for i in range(n)]
        conn.execute(t.concepts.insert(), concepts)
        conn.execute(t.proposals.insert(), [
            {"item_id": c["id"], "kind": "concept", "lang": LANG, "revision": 1, "text": f"chose {i}", "alternatives": [],
             "note": "", "ambiguous": False, "llm_call_id": "call_bench", "created_at": ts}
            for i, c in enumerate(concepts)])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = init_workspace(root / "ws")
        synthetic(ws, N)
        conn = ls_server.serve(root / "ws", log=lambda *a: print(*a, file=sys.stderr))
        try:
            start = time.perf_counter()
            summary = push(ws, conn, LANG)
            push_s = time.perf_counter() - start
            assert summary.created == N, summary
            start = time.perf_counter()
            again = push(ws, conn, LANG)
            repush_s = time.perf_counter() - start
            assert again.unchanged == N and again.created == 0

            # The naive client: one request for the task, one for its prediction.
            ls = client(conn)
            naive_pid = ls.projects.create(title="naive push", label_config=ls.projects.get(
                id=ensure_project(ws, ls, conn, "translation", LANG)).label_config).id
            sample = translation_tasks(ws, LANG)[:NAIVE_SAMPLE]
            start = time.perf_counter()
            for task in sample:
                created = ls.tasks.create(project=naive_pid, data=task["data"])
                ls.predictions.create(task=created.id, result=task["prediction"], model_version=task["model"])
            naive_per_task = (time.perf_counter() - start) / len(sample)

            # Pull: annotate every task in bulk (pre-annotated import into the same project layout).
            pid = ensure_project(ws, ls, conn, "translation", LANG)
            ls.projects.delete(id=pid)
            with ws.transaction() as c:
                c.execute(t.review_projects.delete())
            pid = ensure_project(ws, ls, conn, "translation", LANG)
            tasks = translation_tasks(ws, LANG)
            for i in range(0, N, 1000):
                ls.projects.import_tasks(id=pid, request=[
                    {"data": x["data"], "annotations": [{"result": [
                        {"from_name": "decision", "to_name": "english", "type": "choices", "value": {"choices": ["accept"]}}]}]}
                    for x in tasks[i:i + 1000]])
            start = time.perf_counter()
            pulled = pull(ws, conn)
            pull_s = time.perf_counter() - start
            assert pulled.new == N and pulled.verified == N, pulled
            start = time.perf_counter()
            pull(ws, conn)
            repull_s = time.perf_counter() - start
        finally:
            ls_server.stop(root / "ws")
    naive_projected = naive_per_task * N
    print(f"push {N}: {push_s:.1f} s (re-push {repush_s:.1f} s); naive {naive_per_task * 1000:.0f} ms/task "
          f"-> {naive_projected:.0f} s projected; pull {N}: {pull_s:.1f} s (again {repull_s:.1f} s)", file=sys.stderr)
    print(f"BENCH review_push tasks={N} push_s={push_s:.2f} repush_s={repush_s:.2f} "
          f"naive_ms_per_task={naive_per_task * 1000:.1f} naive_projected_s={naive_projected:.1f} "
          f"speedup_vs_naive={naive_projected / push_s:.1f} pull_s={pull_s:.2f} repull_s={repull_s:.2f}")


if __name__ == "__main__":
    main()
