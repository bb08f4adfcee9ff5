"""Benchmark: direct scoring of the sample's English pairs with one tiny model, three ways in one run.

- ours: `evaluate.direct.Direct` (each unique sentence once, length-ordered batches, all 8 variants);
- minicons: `IncrementalLMScorer.sequence_score` on both sentences of every pair, summed
  log-probabilities with BOS (the tool COMPS used), given the same batch size as ours, and also
  batches of 32 (whichever is faster is the baseline);
- floor: one forward pass per unique sentence, no padding, nothing else.
All three must agree on the full-sentence log-probabilities. Each way is timed best of 5, on one thread (the machine is shared; one thread keeps timings steady).
minicons is not a project dependency: `pip install minicons` into the environment to run this.
Target: at least 3x faster than minicons, at most 1.3x the floor.
Ends with one line: BENCH direct_scoring key=value ...
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch

try:
    from minicons.scorer import IncrementalLMScorer
except ImportError:
    raise SystemExit("bench/direct_scoring.py compares with minicons, which is not a project dependency: pip install minicons")

from builder.languages import registry
from evaluate.direct import Direct
from evaluate.methods import Context, EvalOptions
from evaluate.models import load_model
from evaluate.scoring import Scorer
from evaluate.toy import judgement_corpus, sample_pairs, train_toy

REPEATS = 5


def best_of(fn):
    times, result = [], None
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    torch.set_num_threads(1)
    pairs = sample_pairs()
    with tempfile.TemporaryDirectory() as tmp:
        print("training the toy model (its weights do not change the timing) ...", flush=True)
        folder = train_toy(judgement_corpus(pairs), Path(tmp) / "toy", steps=100)
        loaded = load_model(folder, device="cpu", dtype="float32")  # batch size: the automatic choice
    tok, model = loaded.tokenizer, loaded.model
    unique = list(dict.fromkeys([*pairs["acceptable_sentence"], *pairs["unacceptable_sentence"]]))
    batch = loaded.info.batch_size
    print(f"{len(pairs)} pairs, {len(unique)} unique sentences, batch size {batch}, torch threads {torch.get_num_threads()}",
          flush=True)

    def ours():
        with tempfile.TemporaryDirectory() as tmp:
            ctx = Context(loaded, Scorer(loaded), registry(), EvalOptions(), Path(tmp))
            items = Direct().run(ctx, pairs).items
        return items[items["variant"] == "full"]

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
            sentences = [*pairs["acceptable_sentence"], *pairs["unacceptable_sentence"]]
            scores = []
            for i in range(0, len(sentences), size):
                scores += mc.sequence_score(sentences[i : i + size], bos_token=True, reduction=lambda x: x.sum(0).item())
            return dict(zip(sentences, scores))
        return run

    t_floor, ref = best_of(floor)
    print(f"floor     {t_floor:.3f} s", flush=True)
    t_ours, items = best_of(ours)
    print(f"ours      {t_ours:.3f} s", flush=True)
    t_same, mc_scores = best_of(minicons(batch))
    print(f"minicons  {t_same:.3f} s (batch {batch})", flush=True)
    t_32, _ = best_of(minicons(32))
    print(f"minicons  {t_32:.3f} s (batch 32)", flush=True)
    t_mc = min(t_same, t_32)
    diff_floor = max(np.max(np.abs(items["score_acceptable"].to_numpy() - [ref[s] for s in pairs["acceptable_sentence"]])),
                     np.max(np.abs(items["score_unacceptable"].to_numpy() - [ref[s] for s in pairs["unacceptable_sentence"]])))
    diff_mc = max(abs(mc_scores[s] - ref[s]) for s in unique)
    print(f"agreement with the floor: max |diff| ours {diff_floor:.2e}, minicons {diff_mc:.2e}", flush=True)
    assert diff_floor < 1e-3 and diff_mc < 1e-3, "the three ways must compute the same log-probabilities"
    print(f"BENCH direct_scoring pairs={len(pairs)} unique_sentences={len(unique)} batch={batch} ours_s={t_ours:.3f} "
          f"minicons_s={t_mc:.3f} minicons_same_batch_s={t_same:.3f} minicons_batch32_s={t_32:.3f} floor_s={t_floor:.3f} speedup_vs_minicons={t_mc / t_ours:.2f} "
          f"ratio_to_floor={t_ours / t_floor:.2f} target_speedup=3 target_ratio_to_floor=1.3")


if __name__ == "__main__":
    main()
