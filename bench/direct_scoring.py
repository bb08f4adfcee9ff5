"""Benchmark: direct scoring of the sample's English pairs, three ways in one run, on two tiny models.

- ours: `evaluate.direct.Direct` (each unique sentence once, sentences that begin alike packed as
  prefix trees so each distinct prefix runs once, the output layer's log-sum-exp once per distinct
  prefix, all 8 variants and the accuracy table); also its scoring alone (`Scorer.score`, summed per
  sentence: what minicons returns), reported as `scores_only_*`;
- minicons: `IncrementalLMScorer.sequence_score` on each unique sentence once, as ours and the floor
  score them (an acceptable sentence is shared by its negatives: scoring both sentences of every pair
  would make minicons score 846 sentences where the others score 517), summed log-probabilities with
  BOS (the tool COMPS used), given the same batch size as ours, and also batches of 32 (whichever is
  faster is the baseline);
- floor: one forward pass per unique sentence, no padding, nothing else.
All three must agree on the full-sentence log-probabilities. Each way is timed best of N (10 on the
toy, whose runs of tens of milliseconds vary most; 3 on the real shape), on one thread (the machine
is shared; one thread keeps timings steady); each way's once-per-model set-up (minicons's scorer,
our `Scorer` and its probes of the model) is made once, outside the timing.
The models: the tests' toy (trained here; hidden 64, 2 layers, a 512-token vocabulary, where
per-call overheads dominate), and a tiny model of a real model's proportions (hidden 256, 4 layers,
random weights, the same tokenizer with the output layer widened to 32,000 entries, as in Llama 2
and Mistral), where the output layer is most of the work, as it is in real models.
minicons is not a run-time dependency: the `bench` extra, part of the project's lock, installs it.
Target: at least 3x faster than minicons, at most 1.3x the floor.
Ends with one line: BENCH direct_scoring key=value ...
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from minicons.scorer import IncrementalLMScorer  # the bench extra, in the project's lock
from transformers import LlamaForCausalLM

from builder.languages import registry
from evaluate.direct import Direct
from evaluate.methods import Context, EvalOptions
from evaluate.models import load_model
from evaluate.scoring import Scorer
from evaluate.toy import judgement_corpus, sample_pairs, toy_config, train_toy

REAL_VOCAB = 32_000


def best_of(fn, repeats: int):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def measure(name: str, loaded, pairs, repeats: int) -> dict[str, float]:
    tok, model = loaded.tokenizer, loaded.model
    unique = list(dict.fromkeys([*pairs["acceptable_sentence"], *pairs["unacceptable_sentence"]]))
    batch = loaded.info.batch_size

    scorer = Scorer(loaded)
    assert scorer.split and scorer.packs  # probed here, as minicons's scorer is made here

    def ours():
        with tempfile.TemporaryDirectory() as tmp:
            ctx = Context(registry(), EvalOptions(), Path(tmp), scorer=scorer)
            items = Direct().run(ctx, pairs).items
        return items[items["variant"] == "full"]

    def scores_only():
        scored = scorer.score([("", s) for s in unique])
        return {s: float(scored[("", s)].logprobs.sum()) for s in unique}

    def floor():
        out = {}
        with torch.inference_mode():
            for s in unique:
                ids = torch.tensor([[tok.bos_token_id, *tok(s, add_special_tokens=False)["input_ids"]]])
                lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1, dtype=torch.float32)
                out[s] = float(lp.gather(-1, ids[0, 1:, None]).sum())
        return out

    mc = IncrementalLMScorer(model, device="cpu", tokenizer=tok)

    def minicons(size: int):
        def run():
            scores = []
            for i in range(0, len(unique), size):
                scores += mc.sequence_score(unique[i : i + size], bos_token=True, reduction=lambda x: x.sum(0).item())
            return dict(zip(unique, scores))
        return run

    t_floor, ref = best_of(floor, repeats)
    t_ours, items = best_of(ours, repeats)
    t_scores, sums = best_of(scores_only, repeats)
    t_same, mc_scores = best_of(minicons(batch), repeats)
    t_32, _ = best_of(minicons(32), repeats)
    t_mc = min(t_same, t_32)
    diff_floor = max(np.max(np.abs(items["score_acceptable"].to_numpy() - [ref[s] for s in pairs["acceptable_sentence"]])),
                     np.max(np.abs(items["score_unacceptable"].to_numpy() - [ref[s] for s in pairs["unacceptable_sentence"]])),
                     max(abs(sums[s] - ref[s]) for s in unique))
    diff_mc = max(abs(mc_scores[s] - ref[s]) for s in unique)
    print(f"{name}: {loaded.info.n_params:,} parameters, vocabulary {model.config.vocab_size}, batch {batch}; floor {t_floor:.3f} s, "
          f"ours {t_ours:.3f} s (scoring alone {t_scores:.3f} s), minicons {t_same:.3f} s (batch {batch}) / {t_32:.3f} s (batch 32); "
          f"max |diff| from the floor: ours {diff_floor:.1e}, minicons {diff_mc:.1e}", flush=True)
    assert diff_floor < 1e-3 and diff_mc < 1e-3, "the three ways must compute the same log-probabilities"
    return {"ours_s": t_ours, "minicons_s": t_mc, "floor_s": t_floor, "speedup_vs_minicons": t_mc / t_ours,
            "ratio_to_floor": t_ours / t_floor, "scores_only_s": t_scores, "scores_only_speedup_vs_minicons": t_mc / t_scores}


def main() -> None:
    torch.set_num_threads(1)
    pairs = sample_pairs()
    unique = len(set(pairs["acceptable_sentence"]) | set(pairs["unacceptable_sentence"]))
    print(f"{len(pairs)} pairs, {unique} unique sentences, torch threads {torch.get_num_threads()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = train_toy(judgement_corpus(pairs), Path(tmp) / "toy", steps=100)  # weights do not change the timing
        toy = load_model(folder, device="cpu", dtype="float32")  # batch size: the automatic choice
        tok = toy.tokenizer
        config = toy_config(tok, hidden=256, layers=4)
        config.vocab_size = REAL_VOCAB  # ids beyond the tokenizer's are never produced, as in padded vocabularies
        torch.manual_seed(0)
        LlamaForCausalLM(config).save_pretrained(Path(tmp) / "real")
        tok.save_pretrained(Path(tmp) / "real")
        real = load_model(Path(tmp) / "real", device="cpu", dtype="float32")
    results = {"toy": measure("toy", toy, pairs, 10), "real_shape": measure("real-shape", real, pairs, 3)}
    fields = " ".join(f"{model}_{k}={v:.3f}" if k.endswith("_s") else f"{model}_{k}={v:.2f}"
                      for model, r in results.items() for k, v in r.items())
    print(f"BENCH direct_scoring pairs={len(pairs)} unique_sentences={unique} {fields} target_speedup=3 target_ratio_to_floor=1.3")


if __name__ == "__main__":
    main()
