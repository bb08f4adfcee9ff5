"""Benchmark: pushing 10,000 review tasks to a real Label Studio, and pulling 10,000 annotated ones.

Our push (tasks listed once, then chunked bulk import with the LLM draft as a prediction) is compared
in the same run, on the same 1,000 tasks of another language, with the naive client: the tasks read
from the workspace, then one import request per task carrying its prediction inline (the one request
a task needs; a task request then a prediction request would be two). Both create their project and
push every one of those tasks: the same work, measured, not projected. Ends with one line:
BENCH review_push key=value ...
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from annotation import server as ls_server
from annotation.configs import config
from annotation.review import client, ensure_project, predictions, pull, push, stage_tasks, task_data
from builder.languages import registry
from builder.records import concept_id
from builder.workspace import schema as t
from builder.workspace.store import init_workspace, now

N = 10_000
COMPARED = 1_000  # tasks pushed by both our client and the naive one
LANG, COMPARED_LANG = "fr", "es"


def synthetic(ws, n: int, compared: int) -> None:
    """n concepts with a French proposal each, the first `compared` also with a Spanish one, written straight
    into the workspace (no LLM needed)."""
    ts = now()
    with ws.transaction() as conn:
        conn.execute(t.llm_calls.insert(), [
            {"id": f"call_{lang}", "request_key": lang, "model": "bench-model", "prompt_hash": "-", "stage": "translate",
             "lang": lang, "source": "api", "tokens_in": 0, "tokens_out": 0, "latency_ms": 0, "cost_usd": 0, "created_at": ts}
            for lang in (LANG, COMPARED_LANG)])
        concepts = [{"id": concept_id(f"thing {i}"), "english": f"thing {i}", "category": "bench", "source": "bench"}
                    for i in range(n)]
        conn.execute(t.concepts.insert(), concepts)
        conn.execute(t.proposals.insert(), [
            {"item_id": c["id"], "kind": "concept", "lang": lang, "revision": 1, "text": f"{word} {i}", "alternatives": [],
             "note": "", "ambiguous": False, "llm_call_id": f"call_{lang}", "created_at": ts}
            for lang, word, count in ((LANG, "chose", n), (COMPARED_LANG, "cosa", compared))
            for i, c in enumerate(concepts[:count])])


def naive_push(ws, conn, lang: str) -> int:
    """The naive client: a project, then one import request per task with its prediction inline."""
    ls = client(conn)
    tasks = stage_tasks(ws, lang, "translation")
    pid = ls.projects.create(title=f"naive push {lang}", label_config=config("translation", registry()[lang])).id
    for task in tasks:
        ls.projects.import_tasks(id=pid, request=[{"data": task_data(task), "predictions": predictions("translation", task)}])
    return len(tasks)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = init_workspace(root / "ws")
        synthetic(ws, N, COMPARED)
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

            # Pull: annotate every task in bulk (pre-annotated import into a fresh project of the same stage and language).
            ls = client(conn)
            ls.projects.delete(id=ensure_project(ws, ls, conn, "translation", LANG))
            pid = ensure_project(ws, ls, conn, "translation", LANG)  # the pushed project is gone: a new one, remembered
            tasks = stage_tasks(ws, LANG, "translation")
            for i in range(0, N, 1000):
                ls.projects.import_tasks(id=pid, request=[
                    {"data": task_data(x), "annotations": [{"result": [
                        {"from_name": "decision", "to_name": "english", "type": "choices", "value": {"choices": ["accept"]}}]}]}
                    for x in tasks[i:i + 1000]])
            start = time.perf_counter()
            pulled = pull(ws, conn)
            pull_s = time.perf_counter() - start
            assert pulled.new == N and pulled.verified == N, pulled
            start = time.perf_counter()
            pull(ws, conn)
            repull_s = time.perf_counter() - start

            # The same tasks, ours and the naive client's.
            start = time.perf_counter()
            assert push(ws, conn, COMPARED_LANG).created == COMPARED
            ours_s = time.perf_counter() - start
            start = time.perf_counter()
            assert naive_push(ws, conn, COMPARED_LANG) == COMPARED
            naive_s = time.perf_counter() - start
        finally:
            ls_server.stop(root / "ws")
    print(f"push {N}: {push_s:.1f} s (re-push {repush_s:.1f} s); the same {COMPARED} tasks: ours {ours_s:.1f} s, "
          f"naive {naive_s:.1f} s ({naive_s / COMPARED * 1000:.0f} ms/task); pull {N}: {pull_s:.1f} s (again {repull_s:.1f} s)",
          file=sys.stderr)
    print(f"BENCH review_push tasks={N} push_s={push_s:.2f} repush_s={repush_s:.2f} compared_tasks={COMPARED} "
          f"compared_ours_s={ours_s:.2f} compared_naive_s={naive_s:.2f} naive_ms_per_task={naive_s / COMPARED * 1000:.1f} "
          f"speedup_vs_naive={naive_s / ours_s:.1f} pull_s={pull_s:.2f} repull_s={repull_s:.2f}")


if __name__ == "__main__":
    main()
