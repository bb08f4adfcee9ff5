"""Scoring through an OpenAI-compatible completions endpoint: the stand-in in vLLM's shape gives the local scores and
decisions, a chat-only server is refused with what is missing, and llama.cpp's real server is checked for alignment
and compared with local scores of the same weights."""

from __future__ import annotations

import numpy as np
import pytest
from completions_standin import CompletionsStandin
from conftest import settings_for

from builder.default_model import gguf_path
from builder.llm.config import LLMSettings
from builder.llm.llamacpp import LlamaServer
from evaluate.endpoint_scoring import PROBES, EndpointScorer, EndpointScoringError
from evaluate.methods import EvalOptions, resolve
from evaluate.models import load_model
from evaluate.run import run_evaluation
from evaluate.scoring import Scorer


def endpoint(base_url: str, model: str, concurrency: int = 4) -> LLMSettings:
    return LLMSettings(base_url=base_url, api_key="test-key", model=model, concurrency=concurrency, timeout_s=120.0,
                       max_retries=0)


@pytest.fixture(scope="module")
def subset(release_pairs):
    pairs, info = release_pairs
    return pairs[pairs["lang"].isin(["en", "de", "zh"])].groupby("lang").head(25).reset_index(drop=True), info


def test_endpoint_scores_and_decisions_equal_local_ones_through_the_vllm_standin(toy, subset, tmp_path):
    pairs, info = subset
    with CompletionsStandin(toy, "toy") as server:
        remote = run_evaluation(pairs, info, None, resolve("direct,meta"), tmp_path / "remote",
                                EvalOptions(bos_policy="<s>"), endpoint=endpoint(server.base_url, "toy"),
                                score_endpoint=True)
        sent = server.requests
    local = run_evaluation(pairs, info, toy, resolve("direct,meta"), tmp_path / "local", EvalOptions(bos_policy="bos"))
    unique = len(set(pairs["acceptable_sentence"]) | set(pairs["unacceptable_sentence"]))
    # The probe (a text's next tokens, up to one try per probe text, then that text echoed), then each unique request once.
    assert 2 + unique + 2 * 2 * len(pairs) <= sent <= len(PROBES) + 1 + unique + 2 * 2 * len(pairs)
    assert remote.config.scoring.bos_token == "<s>" and remote.config.scoring.first_token_scored
    key = ["method", "variant", "lang", "pair_id"]
    both = local.items.merge(remote.items, on=key, suffixes=("_local", "_remote"))
    assert len(both) == len(local.items) == len(remote.items)
    for side in ("acceptable", "unacceptable"):
        a, b = both[f"score_{side}_local"].to_numpy(), both[f"score_{side}_remote"].to_numpy()
        assert np.array_equal(np.isnan(a), np.isnan(b)) and np.nanmax(np.abs(a - b)) < 1e-3
    assert (both["correct_local"] == both["correct_remote"]).all()


def test_a_chat_only_server_is_refused_naming_what_is_missing(server, tmp_path, subset):
    pairs, info = subset
    with pytest.raises(EndpointScoringError, match=r"/v1/completions answered 404.*echo and logprobs"):
        run_evaluation(pairs, info, None, resolve("direct"), tmp_path / "o", endpoint=settings_for(server),
                       score_endpoint=True)
    assert server.stats.calls == 0  # nothing of the run was asked
    with pytest.raises(ValueError, match="an endpoint's tokens are the server's"):
        run_evaluation(pairs, info, None, resolve("direct"), tmp_path / "o", EvalOptions(bos_policy="eos"),
                       endpoint=settings_for(server), score_endpoint=True)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """Its own server: no prompt cache, whose restored state could stand in for evaluated prompt tokens."""
    with LlamaServer(tmp_path_factory.mktemp("llama-server") / "server.log", n_ctx=2048, prompt_cache=False) as srv:
        yield srv


def test_llama_cpp_server_needs_the_bos_token_and_then_agrees_with_local_scores(llama_server, subset):
    base_url, model = llama_server.base_url, llama_server.model
    with pytest.raises(EndpointScoringError, match="misaligned.*does not start with the model's BOS token"):
        _ = EndpointScorer(endpoint(base_url, model)).setup
    pairs, _ = subset
    remote = EndpointScorer(endpoint(base_url, model, concurrency=2), bos="<|im_start|>")
    assert not remote.setup.first_token_scored  # llama-cpp-python nulls the first echoed token
    local = Scorer(load_model(gguf_path()), "bos")  # the same weights, dequantized; BOS <|im_start|> as sent
    sentences = list(dict.fromkeys([*pairs["acceptable_sentence"], *pairs["unacceptable_sentence"]]))
    got, want = remote.score([("", s) for s in sentences]), local.score([("", s) for s in sentences])
    deltas, totals = [], {}
    for s in sentences:
        kept = np.isin(want[("", s)].starts, got[("", s)].starts) & (want[("", s)].starts > 0)  # after the first character
        mine = got[("", s)].logprobs[got[("", s)].starts > 0]
        assert kept.sum() == len(mine)  # the same tokens, by offset
        deltas.append(np.abs(mine - want[("", s)].logprobs[kept]))
        totals[s] = (float(mine.sum()), float(want[("", s)].logprobs[kept].sum()))
    agree = np.mean([(totals[a][0] > totals[b][0]) == (totals[a][1] > totals[b][1])
                     for a, b in zip(pairs["acceptable_sentence"], pairs["unacceptable_sentence"])])
    delta = np.concatenate(deltas)
    print(f"llama.cpp (Q4_1) vs local (dequantized, float32): {len(pairs)} pairs, decision agreement {agree:.3f}, "
          f"per-token |d| mean {delta.mean():.3f} max {delta.max():.3f} nats")
    assert agree >= 0.85 and np.median(delta) < 0.2
