"""Structured-output modes against servers that refuse the stronger ones, at full concurrency.

The stand-in refuses a response format as the server it plays does: the OpenAI API with 400, llama.cpp's
server with 500. The client must settle the mode before any stage request goes out, so that none of
16 concurrent requests is refused, and lose no item.
"""

import asyncio
import json
import sqlite3
from collections import Counter

import pytest
from conftest import settings_for
from sqlalchemy import select
from together import at_once

from builder.generate import SentenceBatch
from builder.languages import registry
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient, Request
from builder.llm.schema import KEYWORDS, strict_schema
from builder.m2c.fills import InflectionBatch
from builder.testing.standin import JSON_SCHEMA_400, LLAMA_CPP_500, Refusal
from builder.translate import TranslationBatch, request_for, translate
from builder.workspace import schema as t
from builder.workspace.store import init_workspace, open_workspace

N_ITEMS = 108 + 85  # concepts + properties of the bundled sample
LANGS = ("hu", "tr", "ko")


def run(ws, server, **kw):
    client = LLMClient(LLMCache.of_workspace(ws), settings_for(server, concurrency=16, **kw))

    async def go():
        try:
            return await translate(ws, client, [registry(ws)[c] for c in LANGS])
        finally:
            await client.aclose()

    return asyncio.run(go()), client


def every_item_proposed_once(ws):
    per_item = Counter((r["item_id"], r["lang"]) for r in ws.rows(select(t.proposals.c.item_id, t.proposals.c.lang)))
    return len(per_item) == len(LANGS) * N_ITEMS and set(per_item.values()) == {1} and ws.count(t.flags) == 0


# A FastAPI server's own validation error for the same field.
FASTAPI_422 = Refusal(422, {"detail": [{"type": "literal_error", "loc": ["body", "response_format", "type"],
                                        "msg": "Input should be 'text' or 'json_object'", "input": "json_schema"}]})


@pytest.mark.parametrize("refusal", [JSON_SCHEMA_400, LLAMA_CPP_500, FASTAPI_422], ids=["400", "llama.cpp-500", "422"])
def test_a_server_refusing_json_schema_gets_json_mode_for_the_whole_run(sample_ws, server, refusal):
    server.refusals = {"json_schema": refusal}
    server.latency_s = 0.02  # replies overlap: 16 requests in flight
    summary, client = run(sample_ws, server)
    assert every_item_proposed_once(sample_ws) and summary.flagged == dict.fromkeys(LANGS, 0)
    assert dict(server.stats.refused) == {"json_schema": 1}  # the probe's; no stage request raced the choice
    assert client.stats.retries == 0 and client.stats.probes == 2 and server.stats.without_max_tokens == 0
    calls = sample_ws.rows(select(t.llm_calls.c.mode, t.llm_calls.c.max_tokens))
    assert {c["mode"] for c in calls} == {"json_object"}
    assert {c["max_tokens"] for c in calls} == {2 * 40 * 10 + 100, 2 * 40 * 3 + 100}  # chunks of 10 items, the last of 3
    [recorded] = LLMCache.of_workspace(sample_ws).endpoints()
    assert recorded["endpoint"] == server.base_url and recorded["mode"] == "json_object"
    assert "'response_format'" in recorded["refusals"]["json_schema"] or "'json_object'" in recorded["refusals"]["json_schema"]


def test_a_server_refusing_both_json_formats_is_asked_in_the_prompt(sample_ws, server):
    """Its replies wrap the JSON in prose and a Markdown fence, as chat models do; they are read all the same."""
    server.refusals = {"json_schema": JSON_SCHEMA_400, "json_object": JSON_SCHEMA_400}
    _, client = run(sample_ws, server)
    assert every_item_proposed_once(sample_ws) and client.mode == "prompt"
    assert dict(server.stats.refused) == {"json_schema": 1, "json_object": 1}
    reply = sample_ws.rows(select(t.llm_cache.c.response))[0]["response"]["choices"][0]["message"]["content"]
    assert reply.startswith("Here is the JSON") and "```json" in reply


def test_a_recorded_mode_the_server_no_longer_accepts_moves_the_run_to_a_weaker_one(sample_ws, server):
    """Another server behind the same URL: the 16 requests in flight are refused, then sent again in JSON mode."""
    LLMCache.of_workspace(sample_ws).record_mode(server.base_url, "standin-translator", "json_schema", {})
    server.refusals = {"json_schema": LLAMA_CPP_500}
    server.latency_s = 0.02
    _, client = run(sample_ws, server)
    assert every_item_proposed_once(sample_ws) and client.stats.probes == 0 and client.stats.retries == 0
    assert 1 <= server.stats.refused["json_schema"] <= 16  # at most the requests already in flight
    assert LLMCache.of_workspace(sample_ws).mode(server.base_url, "standin-translator") == "json_object"


def test_a_rerun_reuses_the_recorded_mode_and_probes_nothing(sample_ws, server):
    server.refusals = {"json_schema": LLAMA_CPP_500}
    run(sample_ws, server)
    with sample_ws.transaction() as conn:  # forget the replies, keep the recorded mode
        for table in (t.proposals, t.llm_cache, t.llm_calls):
            conn.execute(table.delete())
    _, client = run(sample_ws, server)
    assert client.stats.probes == 0 and dict(server.stats.refused) == {"json_schema": 1} and every_item_proposed_once(sample_ws)


KETTLE = {"id": "c_000000000001", "kind": "concept", "english": "kettle", "category": "kitchen appliance"}
TOASTER = {"id": "c_000000000002", "kind": "concept", "english": "toaster", "category": "kitchen appliance"}


def ask_items(client, items, req=None):
    """The re-ask loop over French translations of `items`: its outcome, and what it stored."""
    stored = {}

    async def go():
        try:
            return await client.ask_items(req or request_for(registry()["fr"], items, {}), TranslationBatch,
                                          [it["id"] for it in items], lambda good, _: stored.update(good))
        finally:
            await client.aclose()

    return asyncio.run(go()), stored


def test_the_wire_schema_uses_only_portable_keywords_and_pydantic_keeps_the_rest(ws, make_client, server):
    def keywords(node) -> set[str]:
        """The schema keywords used anywhere in `node` (property names are not keywords)."""
        if isinstance(node, list):
            return {k for v in node for k in keywords(v)}
        if not isinstance(node, dict):
            return set()
        subs = [v for k, v in node.items() if k != "properties"] + list(node.get("properties", {}).values())
        return set(node) | {k for v in subs for k in keywords(v)}

    for schema in (TranslationBatch, SentenceBatch, InflectionBatch):
        assert keywords(strict_schema(schema)) <= KEYWORDS, schema
    translation = strict_schema(TranslationBatch)["properties"]["items"]["items"]
    assert translation["properties"]["translation"] == {"type": "string"} and translation["additionalProperties"] is False
    # The dropped minLength is checked on our side: an empty translation is asked again, then flagged.
    server.lexicon.translations[("fr", "concept", "kettle")] = {"translation": "", "alternatives": []}
    outcome, _ = ask_items(make_client(ws, max_reasks=1), [KETTLE])
    assert outcome.reasons == {KETTLE["id"]: "failed validation: translation: String should have at least 1 character"}


def test_a_reply_cut_off_at_max_tokens_says_so(ws, make_client, server):
    items = [{"id": f"c_00000000000{n}", "kind": "concept", "english": f"thing {n}", "category": "x"} for n in range(1, 6)]
    req = request_for(registry()["fr"], items, {})
    short = Request(req.messages, req.schema_name, req.stage, req.lang, req.prompt_hash, expected_output_tokens=10)
    outcome, _ = ask_items(make_client(ws, max_reasks=0), items, short)
    assert set(outcome.flags) == {it["id"] for it in items}
    assert all(r.startswith("unreadable reply: ") and r.endswith("the reply was cut off at its max_tokens (120)")
               for r in outcome.reasons.values())
    assert ws.rows(select(t.llm_calls.c.max_tokens)) == [{"max_tokens": 120}]


def test_a_conversation_grown_beyond_the_context_flags_what_is_left_with_the_servers_words(ws, make_client, server):
    """A re-ask carries the conversation so far; when the server answers 400 `context_length_exceeded` (as the
    OpenAI API and llama.cpp do), the items still wanted are flagged with its words and the run goes on."""
    server.lexicon.translations[("fr", "concept", "kettle")] = {"translation": " ", "alternatives": []}
    req = request_for(registry()["fr"], [KETTLE, TOASTER], {})
    server.context_tokens = len(json.dumps(req.as_messages())) // 4 + 10  # the first request fits, its re-ask not
    outcome, stored = ask_items(make_client(ws), [KETTLE, TOASTER], req)
    assert list(stored) == [TOASTER["id"]] and list(outcome.flags) == [KETTLE["id"]]
    assert outcome.reasons[KETTLE["id"]].startswith(
        "request failed: beyond the model's context: This model's maximum context length is ")


def test_an_older_workspace_and_cache_file_gain_the_new_columns(tmp_path, server):
    """Schema 3 had no mode, max_tokens or batch failures: opening adds them (old rows keep NULL) and the client runs."""
    init_workspace(tmp_path / "old").close()
    LLMCache.open(tmp_path / "eval.sqlite").close()
    for db in (tmp_path / "old" / "workspace.sqlite", tmp_path / "eval.sqlite"):
        with sqlite3.connect(db) as conn:
            conn.execute("DROP TABLE llm_endpoints")
            for table, column in (("llm_calls", "mode"), ("llm_calls", "max_tokens"), ("batches", "failures")):
                conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    with sqlite3.connect(tmp_path / "old" / "workspace.sqlite") as conn:
        conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    ws = open_workspace(tmp_path / "old")
    try:
        assert ws.rows(select(t.meta.c.value).where(t.meta.c.key == "schema_version")) == [{"value": str(t.SCHEMA_VERSION)}]
        _, stored = ask_items(LLMClient(LLMCache.of_workspace(ws), settings_for(server)), [KETTLE])
        assert list(stored) == [KETTLE["id"]] and ws.rows(select(t.llm_calls.c.mode)) == [{"mode": "json_schema"}]
    finally:
        ws.close()
    cache = LLMCache.open(tmp_path / "eval.sqlite")
    try:
        assert list(ask_items(LLMClient(cache, settings_for(server)), [KETTLE])[1]) == [KETTLE["id"]]
    finally:
        cache.close()


@pytest.mark.both_databases
def test_workers_recording_a_new_endpoints_mode_at_once_all_succeed_and_one_row_stays(ws):
    """Eight workers finish probing the same new endpoint at the same moment, 25 endpoints in turn: each records what it
    found (with the refusals that go with it) and none fails; one whole row per endpoint stays, one worker's."""
    workers, rounds = 8, 25
    found = {"json_schema": {}, "json_object": {"json_schema": "400: no json_schema"},
             "prompt": {"json_schema": "400: no json_schema", "json_object": "400: no json_object"}}
    caches = [LLMCache.of_workspace(ws) for _ in range(workers)]
    modes = [list(found)[n % len(found)] for n in range(workers)]

    def record(r: int):
        return lambda n: caches[n].record_mode(f"http://new-{r}.example/v1", "standin-translator", modes[n], found[modes[n]])

    failures = [exc for r in range(rounds) for exc in at_once(workers, record(r))]
    assert not failures, failures[:3]
    rows = LLMCache.of_workspace(ws).endpoints()
    assert sorted(r["endpoint"] for r in rows) == sorted(f"http://new-{r}.example/v1" for r in range(rounds))
    assert all(r["refusals"] == found[r["mode"]] for r in rows)
