"""The LLM client against the stand-in server over real HTTP, through the real `openai` SDK."""

import asyncio
import threading
import time

import httpx2
import openai
import pytest
from conftest import settings_for
from sqlalchemy import select

from builder.languages import registry
from builder.llm._transport import backoff
from builder.llm.cache import LLMCache
from builder.llm.client import CacheMissError, LLMClient, LLMError
from builder.testing.standin import JSON_SCHEMA_400, Faults
from builder.translate import TranslationBatch, request_for
from builder.workspace import schema as t

ITEMS = [{"id": "c_000000000001", "kind": "concept", "english": "toaster", "category": "kitchen appliance"},
         {"id": "c_000000000002", "kind": "concept", "english": "kettle", "category": "kitchen appliance"}]


def _req(lang="fr"):
    return request_for(registry()[lang], ITEMS, {("c_000000000001", "de"): "Toaster"})


def ask(client, req=None):
    async def go():
        try:
            return await client.ask(req or _req(), TranslationBatch)
        finally:
            await client.aclose()
    return asyncio.run(go())


def ask_items(client, req=None, wanted=tuple(it["id"] for it in ITEMS), **kw):
    """The re-ask loop over ITEMS; returns the outcome and what `store` was handed, reply by reply."""
    stored = []

    async def go():
        try:
            return await client.ask_items(req or _req(), TranslationBatch, wanted, lambda good, call: stored.append((good, call)), **kw)
        finally:
            await client.aclose()
    return asyncio.run(go()), stored


def test_structured_reply_is_parsed_recorded_and_costed(ws, make_client, server):
    reply = ask(make_client(ws))
    assert [i.translation for i in reply.value.items] == ["toaster (fr)", "kettle (fr)"]
    call = ws.rows(select(t.llm_calls))[0]
    assert call["model"] == "standin-translator" and call["source"] == "api" and call["stage"] == "translate"
    assert call["tokens_in"] > 0 and call["tokens_out"] > 0 and call["cost_usd"] > 0
    assert len(call["prompt_hash"]) == 64 and call["latency_ms"] > 0


def test_identical_request_is_never_sent_twice(ws, make_client, server):
    ask(make_client(ws))
    calls = server.stats.calls
    reply = ask(make_client(ws))
    assert server.stats.calls == calls
    assert reply.value.items[0].translation == "toaster (fr)"


def test_offline_serves_cache_and_fails_clearly_on_a_miss(ws, make_client, server):
    ask(make_client(ws))
    calls = server.stats.calls
    assert ask(make_client(ws, offline=True)).value is not None
    with pytest.raises(CacheMissError, match="--offline: no cached reply for a translate request"):
        ask(make_client(ws, offline=True), _req("es"))
    assert server.stats.calls == calls


def asked(server):
    """The chat requests a server received that asked for something (not the client's mode probes)."""
    return server.stats.calls - server.stats.probes


def test_json_mode_fallback_for_servers_without_json_schema(ws, make_client, server):
    server.refusals = {"json_schema": JSON_SCHEMA_400}
    reply = ask(make_client(ws))
    assert reply.value is not None
    assert dict(server.stats.refused) == {"json_schema": 1} and server.stats.probes == 2  # refused once, by the probe
    assert asked(server) == 1 and ws.rows(select(t.llm_calls.c.mode)) == [{"mode": "json_object"}]
    ask(make_client(ws), _req("es"))  # the mode is recorded: a later run probes nothing
    assert server.stats.probes == 2 and asked(server) == 2


def test_schema_violation_is_reasked_with_the_validation_error(ws, make_client, server):
    server.faults = Faults(rate=1.0, kinds=("schema",))
    assert "does not match the schema" in ask(make_client(ws)).error
    client = make_client(ws, max_reasks=2)
    outcome, stored = ask_items(client)
    assert not outcome.accepted and not stored
    assert set(outcome.flags) == {it["id"] for it in ITEMS}
    assert all(p.reason.startswith("failed validation: translation: Input should be a valid string") for p in outcome.flags.values())
    assert client.stats.reasks == 2 and asked(server) == 3  # bounded (the single ask above was the first)
    server.faults = Faults(rate=0.0)
    # A later run replays the cached bad replies, then asks the next re-ask (with the error in it).
    outcome, stored = ask_items(make_client(ws, max_reasks=3))
    assert set(outcome.accepted) == {it["id"] for it in ITEMS} and not outcome.flags and asked(server) == 4
    last_user = max((r["request"]["messages"] for r in ws.rows(select(t.llm_cache.c.request))), key=len)[-1]["content"]
    assert "failed validation: translation" in last_user and all(it["id"] in last_user for it in ITEMS)
    assert [call for _, call in stored] == [outcome.last_call_id]


def test_items_a_check_rejects_are_asked_again_alone_with_its_message_then_flagged(ws, make_client, server):
    from builder.llm.items import Rejected, per_item

    toaster, kettle = (it["id"] for it in ITEMS)
    client = make_client(ws, max_reasks=2)
    outcome, stored = ask_items(client, check=per_item(lambda it: Rejected("too literal") if it.id == kettle else it.translation))
    assert outcome.accepted == {toaster: "toaster (fr)"} and [good for good, _ in stored] == [{toaster: "toaster (fr)"}]
    assert {i: p.reason for i, p in outcome.flags.items()} == {kettle: "failed validation: too literal"}
    assert client.stats.reasks == 2 == server.stats.followups
    assert server.stats.requested[("fr", toaster)] == 1 and server.stats.requested[("fr", kettle)] == 3
    last_user = max((r["request"]["messages"] for r in ws.rows(select(t.llm_cache.c.request))), key=len)[-1]["content"]
    assert f"- {kettle}: failed validation: too literal" in last_user and toaster not in last_user


def test_items_in_a_dry_run_are_deferred_not_flagged(ws, make_client, server):
    outcome, stored = ask_items(make_client(ws, dry_run=True))
    assert outcome.deferred and not outcome.flags and not stored and server.stats.calls == 0


@pytest.mark.parametrize("kind", ["429", "500", "drop", "slow"])
def test_transient_faults_are_retried(ws, make_client, server, kind):
    server.faults = Faults(rate=0.6, kinds=(kind,), seed=3, slow_s=8.0)
    client = make_client(ws, timeout_s=2.0)  # a slow reply takes 8 s; a busy machine answers the others in far less than 2
    reply = ask(client)
    assert reply.value is not None
    assert client.stats.retries == server.stats.faults[kind] > 0


def test_retries_are_bounded(ws, make_client, server):
    server.faults = Faults(rate=1.0, kinds=("500",))
    with pytest.raises(LLMError, match="failed after 3 attempts"):
        ask(make_client(ws, max_retries=2))
    assert server.stats.calls == 3


def test_backoff_honours_retry_after_and_is_jittered_otherwise(server):
    settings = settings_for(server, backoff_base_s=1.0, backoff_max_s=8.0)
    req = httpx2.Request("POST", server.base_url)
    limited = openai.RateLimitError("slow down", response=httpx2.Response(429, headers={"Retry-After": "3"}, request=req), body=None)
    assert backoff(0, limited, settings) == 3.0
    plain = openai.InternalServerError("boom", response=httpx2.Response(500, request=req), body=None)
    waits = {backoff(2, plain, settings) for _ in range(20)}
    assert all(2.0 <= w <= 4.0 for w in waits) and len(waits) > 1
    assert max(backoff(10, plain, settings) for _ in range(20)) <= 8.0


def test_concurrency_limit_is_respected(ws, make_client, server):
    """The stand-in answers only once four requests are in flight together, then takes 0.2 s, and records the
    most it ever held: a client that sends fewer at a time stalls here, one that sends more shows a higher peak."""
    together = threading.Barrier(4, timeout=60)
    answer = server.answer

    def answer_in_fours(body, **kw):
        together.wait()
        time.sleep(0.2)  # time for a fifth request to arrive, were the client to send one
        return answer(body, **kw)

    client = make_client(ws, concurrency=4, timeout_s=120)
    reqs = [_req(code) for code in ("fr", "es", "ca", "nl", "el", "hu", "tr", "ko")]

    async def go():
        try:
            await client.structured_mode()  # the endpoint's probe, answered alone, before the requests
            server.answer = answer_in_fours
            return await asyncio.gather(*(client.ask(r, TranslationBatch) for r in reqs))
        finally:
            await client.aclose()

    replies = asyncio.run(go())
    assert all(r.value for r in replies)
    assert server.stats.calls - server.stats.probes == 8 and server.stats.peak_in_flight == 4  # two waves of four


def test_secret_key_is_not_in_settings_repr_or_records(ws, make_client, server):
    client = make_client(ws, api_key="sk-very-secret")
    ask(client)
    assert "sk-very-secret" not in repr(client.settings)
    dump = str(ws.rows(select(t.llm_calls))) + str(ws.rows(select(t.llm_cache)))
    assert "sk-very-secret" not in dump


def test_a_recording_replays_structured_and_plain_text_replies(ws, tmp_path, make_client, server):
    """Exported from a workspace's cache, replayed into a cache file with no server: same replies, source `recording`."""
    from builder.llm.client import Request
    from builder.llm.config import LLMSettings
    from builder.llm.recording import export_recording

    server.lexicon.texts[("German", "A kettle boils water.")] = "Ein Wasserkocher kocht Wasser."
    text_req = Request((("user", "Please translate the following text into German: “A kettle boils water.”"),),
                       "text", "selftranslate: translation", "de", "p" * 64)

    async def both(client):
        try:
            return (await client.ask(_req(), TranslationBatch),
                    await client.ask_text(text_req, max_tokens=64), await client.ask_text(text_req, max_tokens=8))
        finally:
            await client.aclose()

    live = asyncio.run(both(make_client(ws)))
    assert export_recording(tmp_path / "rec.jsonl", LLMCache.of_workspace(ws)) == 3  # decoding settings are part of a text request's key
    replay = LLMCache.open(tmp_path / "replay.sqlite")
    settings = LLMSettings(model="standin-translator", source="recording", recording_path=str(tmp_path / "rec.jsonl"))
    calls = server.stats.calls
    structured, text, short = asyncio.run(both(LLMClient(replay, settings)))
    assert server.stats.calls == calls
    assert structured.value == live[0].value and text.text == live[1].text == "Ein Wasserkocher kocht Wasser."
    assert short.text == live[2].text
    with replay.engine.connect() as conn:
        assert {r.source for r in conn.execute(select(t.llm_calls.c.source))} == {"recording"}
    assert export_recording(tmp_path / "again.jsonl", replay) == 3
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "rec.jsonl").read_bytes()
    with pytest.raises(LLMError, match="not in the bundled recording"):
        asyncio.run(both(LLMClient(LLMCache.open(tmp_path / "other.sqlite"), settings.model_copy(update={"model": "another"}))))
    replay.close()
