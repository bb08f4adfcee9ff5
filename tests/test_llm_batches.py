"""The Batch API's failure modes, as the stand-in plays them after the hosted API's documentation.

Each test runs `--batch` rounds (collect, run the stage, submit) until nothing is left to submit, and
ends with every item answered exactly once or flagged with the server's reason, and no batch line
paid twice.
"""

import asyncio
from collections import Counter

from conftest import settings_for
from sqlalchemy import func, select

from builder.generate import generate
from builder.languages import registry
from builder.llm.cache import LLMCache
from builder.llm.client import BATCH_ATTEMPTS, LLMClient
from builder.selection import Scope
from builder.testing.standin import BatchScript
from builder.translate import translate
from builder.workspace import schema as t

PROPS = "can fly"
IPR = 2  # items per request: several lines per batch


def round_(ws, server, work=None, stage="translate"):
    """One `builder translate --batch` run: collect open batches, run the stage, submit what it deferred."""
    scope = Scope.parse(ws, PROPS)
    ipr = IPR if work is None else 10  # generation's groups whole: a part after the first waits for its acceptable
    work = work or (lambda c: translate(ws, c, [registry()["fr"]], scope=scope))

    async def go():
        client = LLMClient(LLMCache.of_workspace(ws), settings_for(server, batch=True, items_per_request=ipr))
        try:
            collected = await client.collect_batches()
            result = await work(client)
            return collected, result, await client.submit_batch(stage)
        finally:
            await client.aclose()

    return asyncio.run(go())


def until_done(ws, server, rounds=8):
    """Rounds until a run submits nothing and no batch is open; the statuses each round collected."""
    seen = []
    for _ in range(rounds):
        collected, _, submitted = round_(ws, server)
        seen.append(collected)
        if submitted is None and not LLMCache.of_workspace(ws).open_batches():
            return seen
    raise AssertionError(f"still submitting after {rounds} rounds: {seen}")


def outcome(ws):
    """Items answered (proposal counts) and flagged (reasons) for French."""
    answered = Counter(r["item_id"] for r in ws.rows(select(t.proposals.c.item_id).where(t.proposals.c.lang == "fr")))
    flagged = {r["item_id"]: r["reason"] for r in ws.rows(select(t.flags).where(t.flags.c.lang == "fr"))}
    return answered, flagged


def assert_each_item_once_and_nothing_paid_twice(ws, server):
    answered, flagged = outcome(ws)
    items = {it["id"] for it in Scope.parse(ws, PROPS).items(ws)}
    assert set(answered) | set(flagged) == items and not set(answered) & set(flagged)
    assert set(answered.values()) <= {1}
    assert set(server.stats.batch_replies.values()) <= {1}  # no line answered (and billed) twice
    keys = ws.rows(select(func.count(t.llm_calls.c.id), func.count(t.llm_calls.c.request_key.distinct())))[0]
    assert len(set(keys.values())) == 1  # one call per request key
    return answered, flagged


def test_a_batch_still_validating_is_waited_for_and_its_lines_never_sent_again(sample_ws, server):
    server.batch = BatchScript(validating_polls=2, running_polls=1, finalizing_polls=1)
    seen = until_done(sample_ws, server)
    [bid] = {b for c in seen for b in c}
    assert [c.get(bid) for c in seen] == [None, "validating", "validating", "in_progress", "finalizing", "completed"]
    _, flagged = assert_each_item_once_and_nothing_paid_twice(sample_ws, server)
    assert not flagged and sample_ws.count(t.batches) == 1


def test_an_open_batch_of_one_stage_does_not_block_another(sample_ws, server):
    server.batch = BatchScript(validating_polls=3)
    scope = Scope.parse(sample_ws, PROPS)

    def generating_round():
        return round_(sample_ws, server, lambda c: generate(sample_ws, c, [registry()["de"]], scope=scope), stage="generate")

    _, _, translating = round_(sample_ws, server)
    _, _, generating = generating_round()
    assert translating and generating and translating != generating  # generation submitted while translation validates
    assert generating_round()[0] == {translating: "validating", generating: "validating"}
    for _ in range(3):
        generating_round()
    de = sample_ws.rows(select(t.sentence_pairs.c.status).where(t.sentence_pairs.c.lang == "de"))
    assert len(de) == len(scope.pairs(sample_ws)) and {r["status"] for r in de} == {"generated"}
    until_done(sample_ws, server)  # translation's batch was collected by the generation runs; nothing left to send
    assert_each_item_once_and_nothing_paid_twice(sample_ws, server)
    assert sample_ws.count(t.batches) == 2


def test_a_batch_the_endpoint_cannot_show_stays_open_and_holds_up_nothing_else(sample_ws, server):
    """Polling fails (here: the server lost it); the batch is kept, its requests are not sent again (they may
    still be answered, and paid), and another stage goes on."""
    _, _, lost = round_(sample_ws, server)
    server._batches.clear()
    scope = Scope.parse(sample_ws, PROPS)
    collected, _, generating = round_(sample_ws, server, lambda c: generate(sample_ws, c, [registry()["de"]], scope=scope),
                                      stage="generate")
    assert collected[lost].startswith("not polled (NotFoundError: ") and generating
    collected, _, again = round_(sample_ws, server)
    assert collected[lost].startswith("not polled") and collected[generating] == "completed" and again is None
    assert [b["id"] for b in LLMCache.of_workspace(sample_ws).open_batches()] == [lost]
    assert sample_ws.count(t.proposals) == 0


def test_a_batch_whose_every_line_failed_has_only_an_error_file_and_flags_its_items(sample_ws, server):
    message = "Invalid 'messages[1].content': string too long."
    server.batch = BatchScript(line_error_rate=1.0, line_error=(400, "invalid_request_error", message))
    seen = until_done(sample_ws, server)
    assert [list(c.values()) for c in seen] == [[], ["completed"]]
    [batch] = sample_ws.rows(select(t.batches))
    assert batch["collected_at"] and len(batch["failures"]) == len(batch["request_keys"])
    answered, flagged = assert_each_item_once_and_nothing_paid_twice(sample_ws, server)
    assert not answered and set(flagged.values()) == {f"request failed: batch line HTTP 400 invalid_request_error: {message}"}
    assert sample_ws.count(t.llm_calls) == 0


def test_lines_failing_with_server_errors_are_asked_again_then_flagged(sample_ws, server):
    server.batch = BatchScript(line_error_rate=1.0)  # 500 on every line, every time
    until_done(sample_ws, server)
    assert sample_ws.count(t.batches) == BATCH_ATTEMPTS
    answered, flagged = assert_each_item_once_and_nothing_paid_twice(sample_ws, server)
    assert not answered and set(flagged.values()) == {
        "request failed: batch line HTTP 500 server_error: The server had an error while processing your request. "
        f"(in {BATCH_ATTEMPTS} batches)"}


def test_some_failed_lines_are_read_from_the_error_file_and_only_they_are_asked_again(sample_ws, server):
    server.batch = BatchScript(line_error_rate=0.4, seed=0)
    until_done(sample_ws, server)
    first, *later = sample_ws.rows(select(t.batches).order_by(t.batches.c.created_at))
    assert 0 < len(first["failures"]) < len(first["request_keys"]) and later
    assert set(later[0]["request_keys"]) == set(first["failures"])  # only the failed lines went again
    _, flagged = assert_each_item_once_and_nothing_paid_twice(sample_ws, server)
    assert not flagged


def test_an_expired_batch_keeps_its_completed_lines_and_asks_again_for_the_rest(sample_ws, server):
    server.batch = BatchScript(running_polls=1, end="expired", done_share=0.5)
    round_(sample_ws, server)
    round_(sample_ws, server)
    collected, _, again = round_(sample_ws, server)
    [expired] = sample_ws.rows(select(t.batches).where(t.batches.c.status == "expired"))
    assert list(collected.values()) == ["expired"] and again
    kept = len(expired["request_keys"]) - len(expired["failures"])
    assert kept > 0 and {f["reason"].split(":")[0] for f in expired["failures"].values()} == {"batch line batch_expired"}
    assert sample_ws.count(t.llm_calls) == kept  # the completed lines are stored
    server.batch = BatchScript()
    until_done(sample_ws, server)
    _, flagged = assert_each_item_once_and_nothing_paid_twice(sample_ws, server)
    assert not flagged and sample_ws.count(t.batches) == 2


def test_a_cancelled_batch_keeps_its_completed_lines_and_asks_again_for_the_rest(sample_ws, server):
    server.batch = BatchScript(running_polls=1, end="cancelled", done_share=0.3)
    seen = [round_(sample_ws, server)[0] for _ in range(4)]
    assert [list(c.values()) for c in seen] == [[], ["in_progress"], ["cancelling"], ["cancelled"]]
    [cancelled] = sample_ws.rows(select(t.batches).where(t.batches.c.status == "cancelled"))
    assert 0 < len(cancelled["failures"]) < len(cancelled["request_keys"])
    assert all(f["reason"].startswith("batch line batch_cancelled: ") for f in cancelled["failures"].values())
    server.batch = BatchScript()
    until_done(sample_ws, server)
    _, flagged = assert_each_item_once_and_nothing_paid_twice(sample_ws, server)
    assert not flagged and sample_ws.count(t.batches) == 2


def test_a_batch_that_failed_validation_flags_its_items_with_the_servers_reason(sample_ws, server):
    server.batch = BatchScript(end="failed", failure=("invalid_json_line", "This line is not parseable as valid JSON."))
    seen = until_done(sample_ws, server)
    assert [list(c.values()) for c in seen] == [[], ["failed"]]
    answered, flagged = assert_each_item_once_and_nothing_paid_twice(sample_ws, server)
    assert not answered and set(flagged.values()) == {
        "request failed: the batch failed validation: invalid_json_line: This line is not parseable as valid JSON."}
