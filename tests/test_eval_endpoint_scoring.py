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


def test_direct_meta_and_selftranslate_run_on_llama_cpp_with_and_without_score_endpoint(llama_server, release_pairs, tmp_path):
    """A handful of pairs, English into German: direct scored, meta scored and read, selftranslate reading replies
    either way (llama.cpp applies its own chat template, so where a reply begins is not known to score it)."""
    pairs, info = release_pairs
    ids = sorted(set(pairs.loc[pairs["lang"] == "en", "pair_id"]) & set(pairs.loc[pairs["lang"] == "de", "pair_id"]))[:3]
    few = pairs[pairs["pair_id"].isin(ids) & pairs["lang"].isin(["en", "de"])].reset_index(drop=True)
    settings = endpoint(llama_server.base_url, llama_server.model, concurrency=2)
    with pytest.raises(ValueError, match="^method direct needs log-probability scores, which an endpoint does not offer"):
        run_evaluation(few, info, None, resolve("direct,meta,selftranslate"), tmp_path / "o", endpoint=settings)
    scored = run_evaluation(few, info, None, resolve("direct,meta,selftranslate"), tmp_path / "scored",
                            EvalOptions(bos_policy="<|im_start|>"), endpoint=settings, score_endpoint=True)
    read = run_evaluation(few, info, None, resolve("meta,selftranslate"), tmp_path / "read", endpoint=settings)
    assert scored.config.scoring.bos_token == "<|im_start|>" and read.config.scoring is None
    direct = scored.items[(scored.items["method"] == "direct") & (scored.items["variant"] == "full")]
    assert len(direct) == len(few) and (direct[["score_acceptable", "score_unacceptable"]].to_numpy() < 0).all()
    meta = {name: r.items[r.items["method"] == "meta"] for name, r in (("scored", scored), ("read", read))}
    assert len(meta["scored"]) == len(meta["read"]) == 2 * len(few)
    assert (meta["scored"]["score_acceptable"] < 0).all() and set(meta["read"]["score_acceptable"]) <= {0.0, 1.0}
    assert len(read.tables["meta_replies"]) == 2 * len(few) and "meta_replies" not in scored.tables
    for r in (scored, read):
        summary = r.tables["selftranslate_summary"]
        assert set(zip(summary["direction"], summary["condition"])) == {("en-de", c) for c in ("I", "X", "T")}
        assert (summary["n"] == len(ids)).all()
        translated = r.tables["selftranslate_translations"]
        assert len(translated) == len(ids) and translated["acceptable"].str.len().gt(0).all()
        assert r.tables["selftranslate_items"]["reply"].str.len().gt(1).any()  # replies read, not a scored letter
