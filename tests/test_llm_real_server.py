"""The construction loop against a real OpenAI-compatible server: llama.cpp's, serving SmolLM2-135M.

The server was not written for this client: it refuses `json_schema` with HTTP 500, answers one
request at a time, answers to any model name, and its 135M model garbles ids and runs on until
`max_tokens`. No model is set: the client asks the one the server lists at /v1/models. The run must
end anyway, every item proposed or flagged with its reason, in a bounded number of requests.
Translation quality does not matter here.
"""

import asyncio
import math
import time

import pytest
from sqlalchemy import select

from builder.generate import generate
from builder.languages import registry
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient
from builder.llm.config import LLMSettings
from builder.reviews import accept
from builder.selection import Scope
from builder.translate import translate
from builder.workspace import schema as t

LANGS = ("ru", "ja", "vi")  # three of the demo's targets: Cyrillic, Japanese, Latin
SEEDED = ("de",)  # verified words from expert seeds: generation runs there whatever the translations
PROPS = "makes honey"  # of the demo subset's properties, the one with fewest items: a 135M model on a CPU is slow
REASKS = 1
ITEMS_PER_REQUEST = 10


def run_stage(ws, server, work):
    settings = LLMSettings(base_url=server.base_url, api_key="none", concurrency=8,
                           items_per_request=ITEMS_PER_REQUEST, timeout_s=400, max_retries=2, max_reasks=REASKS)
    client = LLMClient(LLMCache.of_workspace(ws), settings)

    async def go():
        try:
            return await work(client)
        finally:
            await client.aclose()

    started = time.perf_counter()
    result = asyncio.run(go())
    print(f"{settings.model}: {result} {client.stats} in {time.perf_counter() - started:.0f} s")
    return result, client


def test_with_no_model_set_the_client_asks_the_one_llama_cpp_serves(ws, llama_server):
    client = LLMClient(LLMCache.of_workspace(ws), LLMSettings(base_url=llama_server.base_url, api_key="none"))

    async def named():
        try:
            return await client.named_model()
        finally:
            await client.aclose()

    assert asyncio.run(named()) == llama_server.model  # the path of the GGUF file it was started with
    assert client.stats.notices == [f"model {llama_server.model}: the one model {llama_server.base_url} serves (its /models)"]


@pytest.mark.timeout(2400)  # a 135M model on two busy cores: minutes, never near this
def test_translation_and_generation_against_llama_cpp(sample_ws, llama_server):
    ws = sample_ws
    scope = Scope.parse(ws, PROPS)
    langs = [registry(ws)[c] for c in LANGS]
    items = scope.items(ws)

    translated, client = run_stage(ws, llama_server, lambda c: translate(ws, c, langs, scope=scope))
    assert client.mode == "json_object" and client.stats.probes == 2  # json_schema refused once, by the probe
    [probed] = LLMCache.of_workspace(ws).endpoints()
    assert probed["mode"] == "json_object" and "Input should be 'text' or 'json_object'" in probed["refusals"]["json_schema"]
    proposed = {(r["item_id"], r["lang"]) for r in ws.rows(select(t.proposals.c.item_id, t.proposals.c.lang))}
    flagged = {(r["item_id"], r["lang"]): r["reason"] for r in ws.rows(select(t.flags).where(t.flags.c.stage == "translate"))}
    assert proposed.isdisjoint(flagged) and proposed | set(flagged) == {(i["id"], c) for i in items for c in LANGS}
    assert all(flagged.values())
    assert sum(translated.proposed.values()) == len(proposed) and sum(translated.flagged.values()) == len(flagged)
    calls = ws.rows(select(t.llm_calls).where(t.llm_calls.c.stage == "translate"))
    # Chunks of the items per request; after each lowering, an item it dropped is asked again in one more chunk.
    lowered = sum("items per request lowered" in n for n in client.stats.notices)
    assert len(calls) <= (1 + REASKS) * (math.ceil(len(items) / ITEMS_PER_REQUEST) + lowered * len(items)) * len(LANGS)
    assert client.stats.sent - client.stats.probes - client.stats.retries == len(calls)  # every reply stored

    for lang in LANGS:
        accept(ws, lang, reviewer="integration-test", include_ambiguous=True)
    targets = [*langs, *(registry(ws)[c] for c in SEEDED)]
    generated, client = run_stage(ws, llama_server, lambda c: generate(ws, c, targets, scope=scope))
    assert client.stats.probes == 0 and client.mode == "json_object"  # the recorded mode: nothing probed again
    written = (*LANGS, *SEEDED, "en")  # English sentences are written with any language's
    pairs = {(p["id"], c) for p in scope.pairs(ws) for c in written}
    rows = {(r["pair_id"], r["lang"]): r for r in ws.rows(select(t.sentence_pairs))}
    assert len(rows) == sum(generated.generated.values()) + sum(generated.flagged.values())
    assert len(rows) + sum(generated.blocked.values()) == len(pairs)  # blocked: a word of the pair is not verified
    assert {lang for (_, lang) in pairs - rows.keys()} <= set(LANGS)  # the seeded languages are never blocked
    assert all(r["status"] == "generated" or r["reason"] for r in rows.values())
    groups = {(p["group_id"], c) for p in scope.pairs(ws) for c in written if (p["id"], c) in rows}
    gen_calls = ws.rows(select(t.llm_calls).where(t.llm_calls.c.stage == "generate"))
    split = any("items per request lowered" in n for n in client.stats.notices)  # groups then go in parts, a pair or more each
    assert len(gen_calls) <= (1 + REASKS) * (len(rows) if split else len(groups))

    every = ws.rows(select(t.llm_calls))
    assert every and all(c["max_tokens"] and c["mode"] == "json_object" for c in every)
    assert {c["model"] for c in every} == {llama_server.model}  # what the server serves, not a default name
    assert all(c["cost_usd"] is None for c in every)  # a local model's price is unknown, not zero
