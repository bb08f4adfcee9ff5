"""Benchmark: peak memory of neuro probing on 20,000 sentences against one layer's hidden states plus the models.

A Llama-style model (hidden 256, 4 layers, random weights: memory does not depend on training)
runs the neuro method itself (`evaluate.neuro.Neuro`) on 16,000 synthetic pairs (4,000 acceptable
sentences, each with four negatives: 20,000 unique sentences): hidden states of model and control
streamed to disk, then probes per negative type x layer x model, two at a time. A child process
measures its own peak resident memory (VmHWM, reset through /proc/self/clear_refs once the model is
loaded and has run one forward pass, whose one-off workspace does not depend on the data, and again
when the method reports its first probe), so the numbers cover the method alone, by phase.
The bound: 1.5 x one layer's hidden states of all sentences (float32, as probes use them), plus,
for the whole method, the randomly initialised control that extraction builds: a second copy of the
model, which the method needs. The model itself is loaded before the baseline, so it is in none of
the measured increases and counts in no bound (it once counted in both, and twice in the second).
For scale, keeping every layer in memory would need (layers + 1) x one layer.
Ends with one line: BENCH probe_memory key=value ...
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

GROUPS = 4000
NEGATIVES = ("taxonomic", "overlap", "co-occurrence", "random")
HIDDEN, LAYERS = 256, 4


def synthetic_pairs() -> pd.DataFrame:
    rnd = random.Random(0)
    syllables = ["ka", "lo", "mi", "ru", "te", "za", "po", "ne", "vi", "su", "da", "fe"]

    def word(i: int) -> str:
        return "".join(rnd.choice(syllables) for _ in range(2)) + str(i)

    rows = []
    for g in range(GROUPS):
        prop = f"can {word(g)} the {word(g + 1)}"
        acc = word(5 * g)
        for k, neg in enumerate(NEGATIVES):
            other = word(5 * g + k + 1)
            rows.append({"pair_id": f"x{g}_{k}", "lang": "en", "property_id": f"p{g}", "property": prop,
                         "acceptable_concept": acc, "unacceptable_concept": other, "negative_type": neg,
                         "acceptable_sentence": f"A {acc} {prop}.", "unacceptable_sentence": f"A {other} {prop}."})
    return pd.DataFrame(rows)


def status_kib(field: str) -> int:
    return int(re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1))


def child(folder: Path) -> None:
    import numpy as np  # noqa: F401 - imported before the baseline, like every library the method uses

    from builder.languages import registry
    from evaluate.methods import Context, EvalOptions
    from evaluate.models import load_model
    from evaluate.neuro import Neuro
    from evaluate.scoring import Scorer

    pairs = synthetic_pairs()
    loaded = load_model(folder / "model", device="cpu", dtype="float32")
    scorer = Scorer(loaded)
    texts = list(pd.unique(pd.concat([pairs["acceptable_sentence"], pairs["unacceptable_sentence"]])))
    scorer.score([("", texts[0])])  # warm-up
    peaks: dict[str, int] = {}

    def watch(task: str, done: int, total: int) -> None:
        if "probes" in task and "extract" not in peaks:  # extraction is over: its peak, then probing's from here
            peaks["extract"], peaks["before_probes"] = status_kib("VmHWM"), status_kib("VmRSS")
            Path("/proc/self/clear_refs").write_text("5")

    ctx = Context(registry(), EvalOptions(probe_jobs=2), folder / "work", hidden=scorer, progress=watch)
    baseline = status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    start = time.perf_counter()
    out = Neuro().run(ctx, pairs)
    wall = time.perf_counter() - start
    probe_peak = status_kib("VmHWM")
    model_bytes = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    print(json.dumps({"sentences": len(texts), "pairs": len(pairs), "extract_kib": peaks["extract"] - baseline,
                      "probe_kib": probe_peak - peaks["before_probes"], "overall_kib": max(peaks["extract"], probe_peak) - baseline,
                      "wall_s": wall, "layer_bytes": len(texts) * HIDDEN * 4, "model_bytes": model_bytes,
                      "hidden_states": LAYERS + 1, "probes": len(out.tables["probes"])}))


def main() -> None:
    import torch
    from transformers import LlamaForCausalLM

    from evaluate.toy import toy_config, train_tokenizer

    pairs = synthetic_pairs()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        texts = list(pd.unique(pd.concat([pairs["acceptable_sentence"], pairs["unacceptable_sentence"]])))
        print(f"{len(pairs)} pairs, {len(texts)} unique sentences; building a random {LAYERS}-layer model (hidden {HIDDEN}) ...",
              flush=True)
        tok = train_tokenizer(texts)
        torch.manual_seed(0)
        LlamaForCausalLM(toy_config(tok, hidden=HIDDEN, layers=LAYERS)).save_pretrained(folder / "model")
        tok.save_pretrained(folder / "model")
        print("probing in a child process ...", flush=True)
        proc = subprocess.run([sys.executable, __file__, "--child", str(folder)], capture_output=True, text=True, check=True)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    mib = 2**20
    probing, overall, extraction = r["probe_kib"] * 1024, r["overall_kib"] * 1024, r["extract_kib"] * 1024
    bound = 1.5 * r["layer_bytes"]  # the model was loaded before the baseline: it is in no measured increase
    models_bound = bound + r["model_bytes"]  # the control, the one copy the method adds, exists during extraction
    print(f"one layer {r['layer_bytes'] / mib:.1f} MiB, model {r['model_bytes'] / mib:.1f} MiB, all layers "
          f"{r['hidden_states'] * r['layer_bytes'] / mib:.1f} MiB; bound {bound / mib:.1f} MiB, with the control "
          f"{models_bound / mib:.1f} MiB", flush=True)
    print(f"peak increase: extraction of model and control states {extraction / mib:.1f} MiB (the control copy and one "
          f"batch's activations), probing {probing / mib:.1f} MiB, whole method {overall / mib:.1f} MiB; "
          f"{r['probes']} probes in {r['wall_s']:.1f} s", flush=True)
    print(f"BENCH probe_memory sentences={r['sentences']} pairs={r['pairs']} layer_mib={r['layer_bytes'] / mib:.1f} "
          f"model_mib={r['model_bytes'] / mib:.1f} all_layers_mib={r['hidden_states'] * r['layer_bytes'] / mib:.1f} "
          f"bound_mib={bound / mib:.1f} bound_with_control_mib={models_bound / mib:.1f} probing_peak_mib={probing / mib:.1f} extraction_peak_mib={extraction / mib:.1f} "
          f"method_peak_mib={overall / mib:.1f} probing_ratio_to_bound={probing / bound:.2f} "
          f"method_ratio_to_bound={overall / bound:.2f} method_ratio_to_bound_with_control={overall / models_bound:.2f} "
          f"wall_s={r['wall_s']:.1f} target_ratio_to_bound=1.0")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]))
    else:
        main()
