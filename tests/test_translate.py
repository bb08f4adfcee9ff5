"""Stage 2 end to end against the stand-in server: faults, crash and resume, offline replay, batches,
and two workers sharing one workspace; on SQLite and on PostgreSQL."""

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta, timezone

import pytest
from conftest import settings_for
from sqlalchemy import func, select

from builder.languages import registry
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient
from builder.records import concept_id
from builder.selection import Scope
from builder.testing.standin import BatchScript, Faults
from builder.translate import translate
from builder.workspace import schema as t
from builder.workspace.store import now

pytestmark = pytest.mark.both_databases

N_ITEMS = 108 + 85  # concepts + properties of the bundled sample


def run(ws, server, langs, **kw):
    stage_kw = {k: kw.pop(k) for k in ("scope",) if k in kw}
    client = LLMClient(LLMCache.of_workspace(ws), settings_for(server, **kw))

    async def go():
        try:
            return await translate(ws, client, [registry(ws)[c] for c in langs], **stage_kw), client
        finally:
            await client.aclose()

    return asyncio.run(go())


def proposals(ws):
    return ws.rows(select(t.proposals.c.item_id, t.proposals.c.lang, t.proposals.c.text, t.proposals.c.llm_call_id))


def test_fault_storm_ends_with_exactly_one_proposal_per_item(sample_ws, server):
    server.faults = Faults(rate=0.3, seed=7, slow_s=8.0)  # slow replies time out; on a busy machine, only they do
    summary, client = run(sample_ws, server, ["hu", "tr", "ru"], timeout_s=2.0, max_retries=10, max_reasks=8)
    rows = proposals(sample_ws)
    per_item = Counter((r["item_id"], r["lang"]) for r in rows)
    assert len(per_item) == 3 * N_ITEMS and set(per_item.values()) == {1}
    assert summary.flagged == {"hu": 0, "tr": 0, "ru": 0}
    assert sum(server.stats.faults.values()) > 0.2 * server.stats.calls  # faults really happened
    minimum = 3 * -(-N_ITEMS // 10)
    assert server.stats.calls <= 2.5 * minimum  # bounded
    # Every proposal points at the call that produced it, whose reply is in the cache.
    call_ids = {r["llm_call_id"] for r in rows}
    cached = {r["llm_call_id"] for r in sample_ws.rows(select(t.llm_cache.c.llm_call_id))}
    assert call_ids <= cached


def test_one_bad_item_loses_nothing_else_and_is_flagged(sample_ws, server):
    server.lexicon.translations[("fr", "concept", "kettle")] = {"translation": "  ", "alternatives": []}
    summary, _ = run(sample_ws, server, ["fr"], max_reasks=2)
    assert summary.proposed["fr"] == N_ITEMS - 1 and summary.flagged["fr"] == 1
    flag = sample_ws.rows(select(t.flags))[0]
    assert flag["lang"] == "fr" and "translation" in flag["reason"]
    # The follow-up asked for the bad item only.
    assert max(server.stats.requested.values()) == 3 and sum(v == 3 for v in server.stats.requested.values()) == 1


def test_killed_run_resumes_without_repeating_answered_items(sample_ws, server, tmp_path):
    server.latency_s = 0.05
    server.hold_after = 12
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k", "BUILDER_LLM_MODEL": "standin-translator"}
    cmd = [sys.executable, "-m", "builder.cli", "translate", "--lang", "hu,tr,ru", "-w", str(sample_ws.directory), "--concurrency", "4"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300  # a bound on waiting, not a measure: the CLI's start alone is slow on a busy machine
        # Wait until the server holds further requests and the client has stored every answer it got.
        while time.monotonic() < deadline:
            answered = sum(1 for v in server.stats.answered.values() if v)
            idle = server.stats.in_flight == 0  # nothing half-answered: every reply sent has arrived
            if server.stats.ok >= 12 and idle and sample_ws.count(t.proposals) == answered:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the run never reached the crash point")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = sample_ws.count(t.proposals)
    assert 0 < before < 3 * N_ITEMS
    server.hold_after = None
    server.release.set()
    run(sample_ws, server, ["hu", "tr", "ru"])
    per_item = Counter((r["item_id"], r["lang"]) for r in proposals(sample_ws))
    assert len(per_item) == 3 * N_ITEMS and set(per_item.values()) == {1}
    assert server.stats.repeats == 0


def _worker(ws, server, langs, *extra):
    """A `builder translate` process on the workspace's folder (its database URL, the password from the environment)."""
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k", "BUILDER_LLM_MODEL": "standin-translator"}
    cmd = [sys.executable, "-m", "builder.cli", "translate", "--lang", langs, "-w", str(ws.directory), *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _mode_known(ws, server) -> None:
    """The endpoint's structured-output mode recorded (as after any earlier run), so that the workers send no probe
    for the server to hold."""
    LLMCache.of_workspace(ws).record_mode(server.base_url, "standin-translator", "json_schema", {})


def _await(what: str, done, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


def test_two_workers_on_one_workspace_split_the_work_and_send_no_request_twice(sample_ws, server):
    _mode_known(sample_ws, server)
    server.hold_after = 0  # hold every request until both workers are sending
    workers = [_worker(sample_ws, server, "hu,tr,ru", "--concurrency", "3") for _ in range(2)]
    try:
        _await("both workers holding claims at once",
               lambda: len({r["worker"] for r in sample_ws.rows(select(t.llm_claims.c.worker))}) == 2)
        server.hold_after = None
        server.release.set()  # the held requests fail as dropped connections, and are retried by their worker
        outputs = [w.communicate(timeout=300)[0] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    assert [w.returncode for w in workers] == [0, 0], outputs
    # No lost item and none stored twice; the server was asked for each item once, by one request.
    per_item = Counter((r["item_id"], r["lang"]) for r in proposals(sample_ws))
    assert len(per_item) == 3 * N_ITEMS and set(per_item.values()) == {1}
    assert len(server.stats.requested) == 3 * N_ITEMS and set(server.stats.requested.values()) == {1}
    assert server.stats.repeats == 0
    # Each worker sent its share (attempts less retries): together, each of the 60 requests once.
    counts = [re.search(r"requests sent (\d+), retries (\d+)", out) for out in outputs]
    sent = [int(m[1]) - int(m[2]) for m in counts]
    assert min(sent) > 0 and sum(sent) == 3 * -(-N_ITEMS // 10), outputs
    assert sample_ws.count(t.llm_claims) == 0


def test_a_dead_workers_claims_are_taken_over_and_their_requests_sent_once(sample_ws, server):
    """A worker killed while sending: its claim ends at once if it ran on this machine, else when its lease runs out."""
    scope = Scope.parse(sample_ws, "can fly")
    _mode_known(sample_ws, server)
    server.hold_after = 0
    dead = _worker(sample_ws, server, "fr", "--properties", "can fly", "--concurrency", "2")
    try:
        _await("the worker claiming two requests", lambda: sample_ws.count(t.llm_claims) == 2)
    finally:
        dead.kill()
        dead.wait(timeout=30)
    local, remote = sample_ws.rows(select(t.llm_claims).order_by(t.llm_claims.c.request_key))
    runs_out = now() + timedelta(seconds=2)  # as if the other claim were a worker's on another machine, lease nearly out
    with sample_ws.transaction() as conn:
        conn.execute(t.llm_claims.update().where(t.llm_claims.c.request_key == remote["request_key"])
                     .values(host="another-machine", expires_at=runs_out))
    server.hold_after = None
    server.release.set()
    summary, client = run(sample_ws, server, ["fr"], scope=scope)
    assert summary.proposed["fr"] == len(scope.items(sample_ws)) and sample_ws.count(t.proposals) == summary.proposed["fr"]
    assert set(server.stats.requested.values()) == {1}  # the dead worker's requests never reached the server twice
    sent = {c["request_key"]: c["created_at"] if c["created_at"].tzinfo else c["created_at"].replace(tzinfo=timezone.utc)
            for c in sample_ws.rows(select(t.llm_calls.c.request_key, t.llm_calls.c.created_at))}
    local_expiry = local["expires_at"] if local["expires_at"].tzinfo else local["expires_at"].replace(tzinfo=timezone.utc)
    assert sent[local["request_key"]] < local_expiry  # taken over without waiting out the lease
    assert sent[remote["request_key"]] >= runs_out  # waited until the lease ran out
    assert sample_ws.count(t.llm_claims) == 0


def test_two_workers_probing_a_new_endpoint_at_once_both_record_its_mode_and_finish(sample_ws, server):
    """The first run against an endpoint, on two workers: both probe it (held until both have asked), both record the
    mode they found, and both finish; one row for the endpoint, every item proposed once."""
    scope = Scope.parse(sample_ws, "can fly")
    server.hold_after = 0
    workers = [_worker(sample_ws, server, "fr", "--properties", "can fly", "--concurrency", "2") for _ in range(2)]
    try:
        _await("both workers probing the endpoint", lambda: server.stats.probes >= 2)
        server.hold_after = None
        server.release.set()  # the held probes fail as dropped connections: each worker probes again, at once
        outputs = [w.communicate(timeout=300)[0] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    assert [w.returncode for w in workers] == [0, 0], outputs
    assert [(r["endpoint"], r["mode"]) for r in LLMCache.of_workspace(sample_ws).endpoints()] == [(server.base_url, "json_schema")]
    per_item = Counter(r["item_id"] for r in proposals(sample_ws))
    assert len(per_item) == len(scope.items(sample_ws)) and set(per_item.values()) == {1}


def test_offline_rerun_reproduces_the_same_proposals_without_requests(sample_ws, server):
    run(sample_ws, server, ["hu", "tr", "ko"])
    first = {(r["item_id"], r["lang"], r["text"]) for r in proposals(sample_ws)}
    calls = server.stats.calls
    with sample_ws.transaction() as conn:  # forget the derived records; keep the cache
        conn.execute(t.proposals.delete())
    summary, client = run(sample_ws, server, ["hu", "tr", "ko"], offline=True)
    assert {(r["item_id"], r["lang"], r["text"]) for r in proposals(sample_ws)} == first
    assert server.stats.calls == calls and client.stats.sent == 0


def test_dry_run_counts_requests_and_cost_and_sends_nothing(sample_ws, server):
    summary, client = run(sample_ws, server, ["hu", "tr"], dry_run=True)
    assert server.stats.calls == 0 and sample_ws.count(t.proposals) == 0
    assert client.plan.requests == 2 * -(-N_ITEMS // 10)
    assert client.plan.tokens_in > 1000 and client.plan.cost_usd > 0


def test_batch_api_submits_persists_and_collects(sample_ws, server):
    server.batch = BatchScript(running_polls=1)
    scope = Scope.parse(sample_ws, "is used for heating food,can fly")

    async def go():
        client = LLMClient(LLMCache.of_workspace(sample_ws), settings_for(server, batch=True))
        try:
            collected = await client.collect_batches()
            summary = await translate(sample_ws, client, [registry()["fr"]], scope=scope)
            bid = await client.submit_batch("translate")
            return collected, summary, bid
        finally:
            await client.aclose()

    collected, summary, bid = asyncio.run(go())
    assert bid and collected == {} and sample_ws.count(t.proposals) == 0
    stored = sample_ws.rows(select(t.batches))
    assert stored[0]["id"] == bid and len(stored[0]["request_keys"]) >= 1
    collected, summary, bid2 = asyncio.run(go())  # first poll: still running
    assert collected == {bid: "in_progress"} and bid2 is None
    collected, summary, bid3 = asyncio.run(go())  # done: collected into the cache, proposals written
    assert collected == {bid: "completed"} and bid3 is None and sample_ws.rows(select(t.batches))[0]["collected_at"]
    n_items = len(scope.items(sample_ws))
    assert sample_ws.count(t.proposals) == n_items
    sources = {r["source"] for r in sample_ws.rows(select(t.llm_calls.c.source))}
    assert sources == {"batch"}
    cost = sample_ws.rows(select(func.sum(t.llm_calls.c.cost_usd)))[0]
    assert list(cost.values())[0] > 0


def test_a_declared_language_goes_through_with_no_code_change(sample_ws, server):
    from builder.languages import declare

    declare(sample_ws, code="sw", name="Swahili", typology="agglutinative", family="Niger-Congo (Bantu)", script="Latn")
    summary, _ = run(sample_ws, server, ["sw"], scope=Scope.parse(sample_ws, "can fly"))
    assert summary.proposed["sw"] > 0
    assert all(r["lang"] == "sw" for r in proposals(sample_ws))


def test_the_cli_reports_every_reask_and_status_shows_why_an_item_was_flagged(sample_ws, server):
    """`builder translate` against a server that spoils replies: the printed re-asks are the follow-ups it received."""
    import re

    from typer.testing import CliRunner

    from builder.cli import app

    server.faults = Faults(rate=0.3, kinds=("malformed", "schema"), seed=3)
    server.lexicon.translations[("fr", "concept", "kettle")] = {"translation": "  ", "alternatives": []}  # never valid
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k", "BUILDER_LLM_MODEL": "standin-translator"}
    ws_dir = str(sample_ws.directory)
    runner = CliRunner()

    def cli(*args):
        res = runner.invoke(app, [*args, "-w", ws_dir], env=env, catch_exceptions=False)
        assert res.exit_code == 0, res.output
        return res.output

    props = "is used for heating food,can fly,has a mane"
    done = cli("translate", "--lang", "fr", "--properties", props)
    reasks = int(re.search(r"re-asks (\d+)", done).group(1))
    assert reasks == server.stats.followups
    assert reasks > 4 and set(server.stats.faults) == {"malformed", "schema"}  # the blank item alone is re-asked 4 times
    assert "flagged fr 1" in done

    kettle = concept_id("kettle")
    status = json.loads(cli("status", "--json"))
    assert next(r for r in status if r["lang"] == "fr")["flags"] == {"translate": 1}
    flags = json.loads(cli("status", "--flags", "--json"))
    assert [(f["stage"], f["lang"], f["item_id"], f["what"]) for f in flags] == [("translate", "fr", kettle, "kettle")]
    assert flags[0]["reason"] == "failed validation: translation: Value error, translation is blank"
    assert json.loads(cli("status", "--flags", "--lang", "de,hu", "--json")) == []
    table = cli("status", "--flags")
    assert kettle in table and "failed validation: translation" in table

    # Fixed at the source, the item is asked again (nothing else is) and its flag goes.
    server.lexicon.translations[("fr", "concept", "kettle")] = {"translation": "bouilloire", "alternatives": []}
    server.faults = Faults()
    calls = server.stats.calls
    again = cli("translate", "--lang", "fr", "--properties", props)
    assert "proposed fr 1" in again and server.stats.calls == calls + 1
    assert json.loads(cli("status", "--flags", "--json")) == []
