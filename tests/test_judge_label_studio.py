"""The LLM judge's verdicts reviewed in a real Label Studio, as their own decision."""

import asyncio

from conftest import settings_for

from annotation.review import client, pull, push
from builder.audits import audit
from builder.flags import list_flags
from builder.generate import generate
from builder.languages import registry
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient
from builder.records import pair_id
from builder.reviews import judge_decisions, review_status
from builder.selection import Scope

BOOKS = "is used for storing books"


def run(ws, server, fn):
    c = LLMClient(LLMCache.of_workspace(ws), settings_for(server))

    async def go():
        try:
            return await fn(ws, c, [registry(ws)["en"]], scope=Scope.parse(ws, BOOKS))
        finally:
            await c.aclose()

    return asyncio.run(go())


def decide(conn, task_id, decision, comment=""):
    result = [{"from_name": "decision", "to_name": "unacceptable", "type": "choices", "value": {"choices": [decision]}}]
    if comment:
        result.append({"from_name": "comment", "to_name": "unacceptable", "type": "textarea", "value": {"text": [comment]}})
    client(conn).annotations.create(id=task_id, result=result)


def test_curators_confirm_or_keep_the_judges_verdicts(sample_ws, server, label_studio):
    ws = sample_ws
    conn = label_studio
    server.lexicon.judgements[("en", "A wardrobe is used for storing books.")] = "Many people keep books in a wardrobe."
    server.lexicon.judgements[("en", "A chair is used for storing books.")] = "Books are often piled on chairs."
    run(ws, server, generate)
    run(ws, server, audit)
    wardrobe, chair = pair_id(BOOKS, "bookcase", "wardrobe"), pair_id(BOOKS, "bookcase", "chair")
    assert {f.item_id for f in list_flags(ws, stage="judge")} == {wardrobe, chair}

    assert push(ws, conn, "en", stage="judge").created == 2
    assert push(ws, conn, "en", stage="judge").unchanged == 2  # idempotent
    project = next(p for p in client(conn).projects.list() if p.title.startswith("[judge:en]"))
    tasks = {tk.data["item_id"]: tk for tk in client(conn).tasks.list(project=project.id, fields="all")}
    assert tasks[wardrobe].data["reason"].endswith("Many people keep books in a wardrobe.")
    assert "⟦A wardrobe⟧" in tasks[wardrobe].data["unacceptable"]
    decide(conn, tasks[wardrobe].id, "keep", "a wardrobe is for clothes")
    decide(conn, tasks[chair].id, "false negative", "a chair is not for storing, but fair")
    pull(ws, conn)

    decided = judge_decisions(ws, "en")
    assert {pid: d.decision for pid, d in decided.items()} == {wardrobe: "keep", chair: "false negative"}
    flagged = {f.item_id: f.reason for f in list_flags(ws, stage="judge")}
    assert list(flagged) == [chair] and flagged[chair].startswith("a curator (") \
        and "confirmed the negative has the property (a chair is not for storing, but fair)" in flagged[chair]
    # The audit leaves decided verdicts to the curators' decisions, and nothing decided goes to Label Studio again.
    run(ws, server, audit)
    assert {f.item_id: f.reason for f in list_flags(ws, stage="judge")} == flagged
    assert push(ws, conn, "en", stage="judge").created == 0
    row = next(r for r in review_status(ws) if r["stage"] == "judge")
    assert (row["pending"], row["false negative"], row["keep"]) == (0, 1, 1)
