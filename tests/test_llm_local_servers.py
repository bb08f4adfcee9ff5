"""Local LLM servers, as llama.cpp's behaves: the model they serve is the one asked, recorded, priced and
credited; a server that answers one request at a time, or drops items from long lists, gets fewer at once.

The stand-in plays such a server over real HTTP: it answers to any model name and echoes it, lists
what it serves at /v1/models, answers `slots` requests at a time and queues the rest, and answers at
most `max_items` of the items a request asks for. The tests assert what the client decided and said,
never how long anything took.
"""

import asyncio
import json
import re

import pytest
from conftest import settings_for
from sqlalchemy import select
from typer.testing import CliRunner

from annotation.review import client as ls_client
from annotation.review import push
from builder.cli import app
from builder.cli.common import LLM_OPTIONS
from builder.languages import registry
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient
from builder.llm.config import RECORDED_AS, LLMSettings
from builder.llm.pricing import cost_usd
from builder.paths import sample_dir
from builder.reviews import (
    Annotation,
    ReviewProject,
    TranslationEdit,
    latest_proposals,
    record_pull,
    rejected_items,
    remember_project,
)
from builder.selection import Scope
from builder.translate import translate
from builder.workspace import schema as t
from builder.workspace.store import now

GGUF = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"  # llama.cpp serves a model under the path it was started with
ONE_PROPERTY = "can fly"  # 11 items to translate


def as_llama_cpp(server, models=(GGUF,), **kw):
    """The stand-in as llama.cpp's server: any name answered and echoed, `models` listed."""
    server.models, server.echo_model = list(models), True
    for name, value in kw.items():
        setattr(server, name, value)
    return server


def cli(ws, server, *args, model=None, code=0):
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k", "BUILDER_LLM_MODEL": model or ""}
    res = CliRunner().invoke(app, [*args, "-w", str(ws.directory)], env=env, catch_exceptions=False)
    assert res.exit_code == code, res.output
    return res.output


def calls(ws):
    return ws.rows(select(t.llm_calls.c.model, t.llm_calls.c.cost_usd))


# -- the model that did the work ----------------------------------------------------------------------

def translate_one_property(ws, settings: LLMSettings):
    """French words of one property through a client with these settings: (summary, the client, closed)."""
    client = LLMClient(LLMCache.of_workspace(ws), settings)

    async def go():
        try:
            return await translate(ws, client, [registry()["fr"]], scope=Scope.parse(ws, ONE_PROPERTY))
        finally:
            await client.aclose()

    return asyncio.run(go()), client


def test_with_no_model_set_the_one_the_server_serves_is_asked_recorded_and_said(sample_ws, server):
    as_llama_cpp(server)
    done = cli(sample_ws, server, "translate", "--lang", "fr", "--properties", ONE_PROPERTY)
    assert f"model {GGUF}: the one model {server.base_url} serves (its /models)" in done
    assert server.stats.models_listed == 1 and set(server.stats.models_asked) == {GGUF}
    assert {(c["model"], c["cost_usd"]) for c in calls(sample_ws)} == {(GGUF, None)}  # a local model: no price
    assert f"call(s) of '{GGUF}' at an unknown price" in done and "gpt-4o" not in done
    usage = json.loads(cli(sample_ws, server, "status", "--llm", "--json"))
    assert [(c["model"], c["unpriced"]) for c in usage["calls"]] == [(GGUF, len(calls(sample_ws)))]
    assert [(e["endpoint"], e["model"]) for e in usage["endpoints"]] == [(server.base_url, GGUF)]


@pytest.mark.parametrize(("models", "listed"), [
    (["smollm2-135m", "qwen2.5-0.5b"], "serves 2 models (qwen2.5-0.5b, smollm2-135m)"),
    ([], "lists no model at /models"),
])
def test_a_server_that_does_not_serve_exactly_one_model_is_refused_with_its_list(sample_ws, server, models, listed):
    as_llama_cpp(server, models)
    done = cli(sample_ws, server, "translate", "--lang", "fr", "--properties", ONE_PROPERTY, code=1)
    assert done.strip().splitlines()[-1] == (f"error: no model is set and the LLM endpoint {server.base_url} {listed}: set "
                            "BUILDER_LLM_MODEL or --model to the one to use")
    assert server.stats.calls == 0 and calls(sample_ws) == []
    if models:  # --model picks one; nothing is asked of /models then
        cli(sample_ws, server, "translate", "--lang", "fr", "--properties", ONE_PROPERTY, "--model", models[1])
        assert set(server.stats.models_asked) == {models[1]} and server.stats.models_listed == 1
        assert {c["model"] for c in calls(sample_ws)} == {models[1]}


def test_a_local_server_answering_to_a_hosted_models_name_is_not_priced_as_it(sample_ws, server):
    as_llama_cpp(server)
    done = cli(sample_ws, server, "translate", "--lang", "fr", "--properties", ONE_PROPERTY, model="gpt-4o-2024-08-06")
    assert server.stats.models_listed == 0  # a model set is asked as it is
    assert {(c["model"], c["cost_usd"]) for c in calls(sample_ws)} == {("gpt-4o-2024-08-06", None)}
    assert "call(s) of 'gpt-4o-2024-08-06' at an unknown price (none for it at this endpoint" in done


def test_prices_hold_at_the_host_that_publishes_them():
    hosted = "https://api.openai.com/v1"
    assert cost_usd("gpt-4o-mini-2024-07-18", 1_000_000, 1_000_000, endpoint=hosted) == 0.75  # a dated snapshot
    assert cost_usd("gpt-4o-mini", 1_000_000, 0, endpoint=hosted, batch=True) == 0.075
    assert cost_usd("gpt-4o-2024-08-06", 10, 10, endpoint="http://127.0.0.1:8080/v1") is None  # llama.cpp's echo
    assert cost_usd("gpt-4o-2024-08-06", 10, 10, endpoint="https://gateway.example/v1") is None
    assert cost_usd("a-local-model", 10, 10, endpoint=hosted) is None
    assert cost_usd("gpt-4o", 10, 10, endpoint=None) is None  # a replayed recording costs nothing known


def test_the_hosted_api_keeps_its_documented_default_and_a_recording_its_own(ws):
    """api.openai.com lists dozens of models: there the documented default is asked (its replies name the dated
    snapshot, which is what is recorded and priced); a replayed recording asks under the name it was recorded with."""
    async def named(settings):
        client = LLMClient(LLMCache.of_workspace(ws), settings)
        try:
            return await client.named_model(), client.stats.notices
        finally:
            await client.aclose()

    hosted = LLMSettings(base_url="https://api.openai.com/v1", api_key="sk-x")
    assert asyncio.run(named(hosted)) == ("gpt-4o-2024-08-06", [])  # no request: .invalid hosts would fail it
    assert asyncio.run(named(LLMSettings(api_key="sk-x"))) == ("gpt-4o-2024-08-06", [])  # the SDK's default URL
    assert asyncio.run(named(LLMSettings.from_env())) == (RECORDED_AS, [])


def test_the_bundled_recording_replays_and_records_its_replies_model(sample_ws, monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "BUILDER_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    demo = sample_dir() / "demo" / "properties.txt"  # what the recording covers
    res = CliRunner().invoke(app, ["translate", "--lang", "ja", "--properties", str(demo), "-w", str(sample_ws.directory)],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "replaying the bundled recording" in res.output and re.search(r"proposed ja [1-9]", res.output)
    assert {(c["model"], c["cost_usd"]) for c in calls(sample_ws)} == {("sample-recording", None)}


def test_offline_with_no_model_uses_the_model_cached_for_the_endpoint(sample_ws, server):
    as_llama_cpp(server)
    cli(sample_ws, server, "translate", "--lang", "fr", "--properties", ONE_PROPERTY)
    with sample_ws.transaction() as conn:  # forget the proposals; keep the cache
        conn.execute(t.proposals.delete())
    served = server.stats.calls
    done = cli(sample_ws, server, "translate", "--lang", "fr", "--properties", ONE_PROPERTY, "--offline")
    assert f"model {GGUF}: the one model whose replies from {server.base_url} are cached" in done
    assert server.stats.calls == served and server.stats.models_listed == 1 and "proposed fr 11" in done


def test_label_studio_shows_the_served_model_as_the_drafts_author(sample_ws, server, label_studio):
    as_llama_cpp(server)
    cli(sample_ws, server, "translate", "--lang", "fr", "--properties", ONE_PROPERTY)
    assert push(sample_ws, label_studio, "fr").created == 11
    [project] = sample_ws.rows(select(t.review_projects).where(t.review_projects.c.lang == "fr"))
    tasks = list(ls_client(label_studio).tasks.list(project=project["project_id"], fields="all", page_size=100))
    versions = {p["model_version"] if isinstance(p, dict) else p.model_version for tk in tasks for p in tk.predictions}
    assert len(tasks) == 11 and versions == {"SmolLM2-135M-Instruct.Q4_1.gguf"}  # the file served, not where it lies


# -- a server that answers one request at a time --------------------------------------------------------

def test_a_server_that_queues_requests_gets_fewer_at_once_and_the_client_says_so(sample_ws, server):
    as_llama_cpp(server, slots=1, latency_s=0.4)
    done = cli(sample_ws, server, "translate", "--lang", "fr,es", "--properties", "can fly,has a mane,lives in water,has strings",
               "--items-per-request", "4")  # 18 requests, 16 at once by default
    [lowered] = [line for line in done.splitlines() if "concurrency lowered" in line]
    said = re.fullmatch(rf"the LLM endpoint {re.escape(server.base_url)} answers about [\d.]+ request\(s\) at a time and "
                        r"queues the others \(\d+ in flight, replies taking \d+ s\): concurrency lowered from 16 to (\d+) "
                        r"for this run \(next time: --concurrency \1\)", lowered)
    assert said and int(said.group(1)) < 16, lowered
    assert server.stats.peak_waiting > 1  # it did queue, before the client noticed
    assert "proposed fr 35, es 35" in done and "flagged" not in done


def test_time_outs_while_others_wait_lower_the_concurrency(sample_ws, server):
    """Replies quicker than a second never count as queueing: here only the time-outs tell."""
    as_llama_cpp(server, slots=1, latency_s=0.2)
    settings = settings_for(server, model=GGUF, concurrency=8, items_per_request=2, timeout_s=0.9, max_retries=20)
    summary, client = translate_one_property(sample_ws, settings)
    assert summary.proposed == {"fr": 11} and client.stats.retries > 0
    assert client.concurrency < 8 and client.stats.notices
    assert all("let a request time out while" in n and "concurrency lowered from" in n for n in client.stats.notices)


def test_replies_that_drop_items_lower_the_items_per_request_and_the_dropped_are_asked_again(sample_ws, server):
    as_llama_cpp(server, max_items=1)
    settings = settings_for(server, model=GGUF, concurrency=1, items_per_request=8, max_reasks=1)
    summary, client = translate_one_property(sample_ws, settings)
    assert summary.proposed == {"fr": 11} and summary.flagged == {"fr": 0}
    assert client.items_per_request < 8 and sample_ws.count(t.flags) == 0
    assert client.stats.notices[0] == (f"the LLM endpoint {server.base_url} dropped 6 of 8 items asked in one request: "
                                       "items per request lowered from 8 to 4 for this run (next time: --items-per-request 4)")


# -- every stage takes the same LLM options ------------------------------------------------------------

STAGES = [["translate"], ["generate"], ["audit"], ["templates", "fill"], ["review", "repropose"]]


@pytest.mark.parametrize("command", STAGES, ids=" ".join)
def test_every_llm_stage_takes_the_shared_options(command):
    shown = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"}).output
    for option in LLM_OPTIONS:
        assert option.default.param_decls[0] in shown


def test_review_repropose_takes_the_options_of_the_other_stages(sample_ws, server):
    as_llama_cpp(server)
    cli(sample_ws, server, "translate", "--lang", "fr", "--properties", ONE_PROPERTY)
    proposal = sorted(latest_proposals(sample_ws, "fr").values(), key=lambda p: p["item_id"])[0]
    ls = "local:0123456789abcdef0123456789abcdef"  # a curator rejects one proposal in Label Studio
    remember_project(sample_ws, ReviewProject(stage="translation", lang="fr", project_id=1, title="[translation:fr] review",
                                              server=ls))
    record_pull(sample_ws, ls, [Annotation(
        stage="translation", lang="fr", item_id=proposal["item_id"], annotation_id=1, server=ls, task_id=1,
        decision="reject", comment="wrong sense", reviewer="ana", cancelled=False, lead_time_s=1.0, created_at=now(),
        updated_at=now(), translation=TranslationEdit(proposal_id=proposal["id"], text=None))])
    assert list(rejected_items(sample_ws, "fr")) == [proposal["item_id"]]
    sent = server.stats.calls
    planned = cli(sample_ws, server, "review", "repropose", "--lang", "fr", "--dry-run", "--model", "another-name")
    assert "dry run: 1 request(s)" in planned and '"model": "another-name"' in planned and server.stats.calls == sent
    done = cli(sample_ws, server, "review", "repropose", "--lang", "fr", "--concurrency", "1", "--items-per-request", "1")
    assert "fr: 1 new revision(s)" in done and server.stats.calls == sent + 1


def test_generate_asks_a_group_in_parts_that_keep_its_acceptable_sentence(sample_ws, server):
    """With fewer items per request than a group has concepts, the first part writes the acceptable sentence
    and every later part of the group is asked to keep it (German: its words are verified expert seeds)."""
    done = cli(sample_ws, server, "generate", "--lang", "de", "--properties", ONE_PROPERTY, "--items-per-request", "3",
               model="standin-translator")
    stmt = (select(t.sentence_pairs.c.acceptable, t.sentence_pairs.c.llm_call_id, t.pairs.c.group_id)
            .join(t.pairs, t.pairs.c.id == t.sentence_pairs.c.pair_id).where(t.sentence_pairs.c.lang == "de"))
    rows = sample_ws.rows(stmt)
    groups = {r["group_id"] for r in rows}
    assert rows and re.search(r"; flagged (en 0, )?de 0;", done), done
    assert all(len({r["acceptable"] for r in rows if r["group_id"] == g}) == 1 for g in groups)  # one per group
    calls = {r["group_id"]: {r2["llm_call_id"] for r2 in rows if r2["group_id"] == r["group_id"]} for r in rows}
    assert all(len(ids) == -(-sum(r["group_id"] == g for r in rows) // 2) for g, ids in calls.items())  # 2 negatives a call
    fixed = [m for r in sample_ws.rows(select(t.llm_cache.c.request)) for m in r["request"]["messages"]
             if "is already fixed" in m["content"]]
    assert len(fixed) == sum(len(ids) - 1 for ids in calls.values())  # every part after the first keeps the sentence


def test_the_dataset_card_lists_the_served_model_as_the_llm_used(sample_ws, server, tmp_path):
    """German sentences written by a local server with no model set: the release's card credits the model it served,
    by its file's name (llama.cpp names it by the path it was started with)."""
    as_llama_cpp(server)
    cli(sample_ws, server, "generate", "--lang", "en,de", "--properties", ONE_PROPERTY)
    cli(sample_ws, server, "publish", "--version", "0.1.0", "--to", str(tmp_path / "releases"), "--exclude-unverified")
    card = (tmp_path / "releases" / "README.md").read_text(encoding="utf-8")
    used = card[card.index("## LLMs used"):card.index("## Citation")]
    assert "- `SmolLM2-135M-Instruct.Q4_1.gguf`: generate " in used and GGUF not in card and "gpt-4o" not in card


def test_a_dry_run_with_no_model_lists_the_servers_models_and_sends_no_completion(sample_ws, server):
    as_llama_cpp(server)
    planned = cli(sample_ws, server, "translate", "--lang", "fr", "--properties", ONE_PROPERTY, "--dry-run")
    assert f'"model": "{GGUF}"' in planned and "estimated cost unknown" in planned
    assert server.stats.models_listed == 1 and server.stats.calls == 0
    cli(sample_ws, server, "translate", "--lang", "fr", "--properties", ONE_PROPERTY)
    listed = server.stats.models_listed
    planned = cli(sample_ws, server, "translate", "--lang", "es", "--properties", ONE_PROPERTY, "--dry-run")
    assert f"model {GGUF}: the one model whose replies from {server.base_url} are cached" in planned
    assert server.stats.models_listed == listed  # known from the cache: nothing asked
