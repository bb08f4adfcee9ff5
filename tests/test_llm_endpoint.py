"""Endpoint errors that name the URL and the fix, credentials that stay hidden, and honest costs."""

import asyncio
import json
import logging
import re
import socket

import pytest
from conftest import settings_for
from sqlalchemy import select
from typer.testing import CliRunner

from builder.cli import app
from builder.languages import registry
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient, LLMError
from builder.llm.endpoint import redact_url
from builder.translate import TranslationBatch, request_for
from builder.workspace import schema as t
from evaluate.backends import endpoint_info

ITEMS = [{"id": "c_000000000001", "kind": "concept", "english": "kettle", "category": "kitchen appliance"}]


def ask(ws, server, **kw):
    client = LLMClient(LLMCache.of_workspace(ws), settings_for(server, **kw))

    async def go():
        try:
            return await client.ask(request_for(registry()["fr"], ITEMS, {}), TranslationBatch)
        finally:
            await client.aclose()

    return asyncio.run(go()), client


def failure(ws, server, **kw) -> tuple[str, LLMClient]:
    client = LLMClient(LLMCache.of_workspace(ws), settings_for(server, **kw))

    async def go():
        try:
            await client.ask(request_for(registry()["fr"], ITEMS, {}), TranslationBatch)
        finally:
            await client.aclose()

    with pytest.raises(LLMError) as info:
        asyncio.run(go())
    return str(info.value), client


def test_a_base_url_without_v1_is_named_with_the_fix(ws, server):
    bare = server.base_url.removesuffix("/v1")
    message, client = failure(ws, server, base_url=bare)
    assert message == f"the LLM endpoint {bare} answered 404; it answers at {bare}/v1: add /v1 to OPENAI_BASE_URL"
    assert client.stats.retries == 0


def test_a_model_the_server_does_not_serve_lists_what_it_does(ws, server):
    server.check_model = True
    message, client = failure(ws, server, model="gpt-4o-mini")
    assert message == (f"the LLM endpoint {server.base_url} does not serve the model 'gpt-4o-mini'; its /models lists: "
                       "standin-translator. Set BUILDER_LLM_MODEL to one of them")
    assert client.stats.retries == 0


def test_a_server_that_is_not_running_fails_at_once_naming_the_url(ws, server):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    message, client = failure(ws, server, base_url=url)
    assert message.startswith(f"cannot reach the LLM endpoint {url} (ConnectError: ")
    assert message.endswith("is the server running, and is OPENAI_BASE_URL its address (scheme, host, port)?")
    assert client.stats.sent == 1 and client.stats.retries == 0  # not 72 s of retries


def test_a_refused_key_is_named_and_never_echoed(ws, server):
    server.api_key = "the-right-key"
    message, client = failure(ws, server, api_key="sk-wrong-but-secret")
    assert message == (f"the LLM endpoint {server.base_url} refused the key in OPENAI_API_KEY (as a Bearer token) "
                       "(HTTP 401): set OPENAI_API_KEY to a key it accepts (a local server started without a key accepts any)")
    assert client.stats.retries == 0


def test_the_key_and_the_urls_user_and_password_each_go_where_meant(ws, server):
    """The key as a Bearer token, the URL's user and password as Basic auth where no key is set; when both are
    given the key wins and the refusal says the user and password were not sent. Neither secret is ever echoed."""
    secret_url = server.base_url.replace("http://", "http://curator:s3cret%40pass@")
    shown = server.base_url.replace("http://", "http://***@")
    server.api_key = "sk-the-right-key"
    reply, _ = ask(ws, server, base_url=secret_url, api_key="sk-the-right-key")  # was sent as Basic auth, and refused
    assert reply.value is not None
    server.basic_auth = ("curator", "s3cret@pass")
    reply, _ = ask(ws, server, base_url=secret_url, api_key=None, model="other")
    assert reply.value is not None
    message, _ = failure(ws, server, base_url=secret_url, api_key="sk-the-right-key", model="third")
    assert message == (f"the LLM endpoint {shown} refused the key in OPENAI_API_KEY (as a Bearer token) (HTTP 401): set "
                       "OPENAI_API_KEY to a key it accepts (a local server started without a key accepts any); the user "
                       "and password in OPENAI_BASE_URL were not sent, because a key is set and the key wins (unset "
                       "OPENAI_API_KEY to send them as HTTP Basic auth)")
    server.basic_auth = ("curator", "another")
    message, _ = failure(ws, server, base_url=secret_url, api_key=None, model="fourth")
    assert message == (f"the LLM endpoint {shown} refused the user and password in OPENAI_BASE_URL (as HTTP Basic auth) "
                       "(HTTP 401): correct them in OPENAI_BASE_URL, or set OPENAI_API_KEY if the server wants a key (it "
                       "is then sent instead)")


def test_credentials_in_the_base_url_are_redacted_everywhere(ws, server, caplog):
    assert redact_url("https://user:pw@gw.example/v1?api-key=k&api-version=2024-10-21") == (
        "https://***@gw.example/v1?api-key=***&api-version=2024-10-21")
    secret_url = server.base_url.replace("http://", "http://curator:s3cret-pass@") + "?key=s3cret-key"
    shown = server.base_url.replace("http://", "http://***@") + "?key=***"
    caplog.set_level(logging.INFO, logger="httpx2")
    reply, client = ask(ws, server, base_url=secret_url)
    assert reply.value is not None and caplog.records  # the HTTP client logged its requests
    assert "s3cret" not in caplog.text and "s3cret" not in repr(client.settings)
    assert [e["endpoint"] for e in LLMCache.of_workspace(ws).endpoints()] == [shown]
    dump = json.dumps([ws.rows(select(table)) for table in t.metadata.sorted_tables], default=str)
    assert "s3cret" not in dump
    assert endpoint_info(client.settings).device == shown  # what summary.json and the report show
    server.check_model = True
    message, _ = failure(ws, server, base_url=secret_url, model="another")
    assert shown in message and "s3cret" not in message


def cli(ws, server, *args):
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k", "BUILDER_LLM_MODEL": "standin-translator"}
    res = CliRunner().invoke(app, [*args, "-w", str(ws.directory)], env=env, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def test_a_priced_model_is_costed_and_a_hosted_name_on_another_host_is_counted_as_unknown(sample_ws, server):
    done = cli(sample_ws, server, "translate", "--lang", "fr", "--properties", "can fly")  # the stand-in's own price
    assert re.search(r"cost \$0\.0\d*[1-9]", done) and "unknown price" not in done
    server.model = "gpt-4o-mini-2024-07-18"  # a hosted snapshot's name, answered by a server on loopback
    done = cli(sample_ws, server, "translate", "--lang", "es", "--properties", "can fly")
    assert ("; 2 call(s) of 'gpt-4o-mini-2024-07-18' at an unknown price (none for it at this endpoint in "
            "data/prices.yaml)") in done
    usage = json.loads(cli(sample_ws, server, "status", "--llm", "--json"))
    by_model = {c["model"]: c for c in usage["calls"]}
    assert by_model["standin-translator"]["unpriced"] == 0 and by_model["standin-translator"]["cost_usd"] > 0
    assert by_model["gpt-4o-mini-2024-07-18"] | {"cost_usd": None} == {
        "stage": "translate", "model": "gpt-4o-mini-2024-07-18", "mode": "json_schema", "calls": 2,
        "tokens_in": by_model["gpt-4o-mini-2024-07-18"]["tokens_in"],
        "tokens_out": by_model["gpt-4o-mini-2024-07-18"]["tokens_out"], "cost_usd": None, "unpriced": 2}
    assert [(e["endpoint"], e["mode"]) for e in usage["endpoints"]] == [(server.base_url, "json_schema")]
    assert "4 calls" in cli(sample_ws, server, "status") and "2 at an unknown price" in cli(sample_ws, server, "status")


def test_a_dry_run_shows_the_first_requests_and_counts_them_all(sample_ws, server):
    done = cli(sample_ws, server, "translate", "--lang", "fr,es", "--properties", "can fly,has a mane", "--dry-run")
    assert server.stats.calls == 0
    assert "dry run: 6 request(s) in structured-output mode json_schema (assumed: a dry run probes nothing)" in done
    assert "the first 3:" in done
    shown = json.loads("[" + done[done.index("the first 3:") + len("the first 3:"):done.index("proposed ")].replace("}\n{", "},{") + "]")
    assert len(shown) == 3 and all(b["response_format"]["type"] == "json_schema" for b in shown)
    assert shown[0]["max_tokens"] == 2 * 40 * 10 + 100 and all(b["max_tokens"] for b in shown)
    assert shown[0]["messages"][1]["content"].startswith("Target language code: fr.")
