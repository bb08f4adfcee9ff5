"""Benchmark: float32 linear layers on a CPU through oneDNN (`evaluate.onednn`, how `load_model` leaves a CPU
model) against PyTorch's default `F.linear` (MKL), on two threads, as CI's machines have.

- per shape: SmolLM2-135M's linear layers (576->576 queries and outputs, 576->192 keys and values, 576->1536 and
  1536->576 feed-forward, 576->49,152 output layer) at 1 row (a generated token), 64 rows (a batch of prompts)
  and 2,496 rows (a scoring batch: 39 packed rows of 64 tokens), the same inputs both ways, best of 20, in GFLOPS;
  the headline sums each way's seconds over all of them;
- whole: SmolLM2 loaded once, its layers routed and then set back to plain `Linear`, so both ways have the same
  weights: direct scoring of the demo release's unique sentences (`Scorer.score`), and greedy generation for 64 of
  its meta prompts, spread over its languages, 16 tokens each (`TransformersGenerator`). Scores are compared per
  sentence (max |d| nats) and replies one by one.
Ends with one line: BENCH cpu_linear key=value ...
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
THREADS = 2
SHAPES = {"attention": (576, 576), "keys": (576, 192), "up": (576, 1536), "down": (1536, 576), "output": (576, 49152)}
ROWS = (1, 64, 2496)
PROMPTS, NEW_TOKENS = 64, 16


def best_of(layer: torch.nn.Linear, x: torch.Tensor, n: int) -> float:
    layer(x)
    times = []
    for _ in range(n):
        started = time.perf_counter()
        layer(x)
        times.append(time.perf_counter() - started)
    return min(times)


def shapes() -> dict[str, float]:
    """Seconds per shape and rows, both ways; printed as GFLOPS."""
    from evaluate.onednn import route_linears

    out = {"mkl": 0.0, "onednn": 0.0}
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for name, (k, n) in SHAPES.items():
            for m in ROWS:
                x = torch.randn(m, k, generator=g)
                layer = torch.nn.Linear(k, n)
                plain = best_of(layer, x, 20)
                route_linears(layer)
                routed = best_of(layer, x, 20)
                out["mkl"], out["onednn"] = out["mkl"] + plain, out["onednn"] + routed
                flops = 2 * m * k * n
                print(f"{name:9s} {k:5d}->{n:<6d} x {m:5d} rows: MKL {flops / plain / 1e9:6.1f} GFLOPS, "
                      f"oneDNN {flops / routed / 1e9:6.1f} GFLOPS ({plain / routed:.2f}x)", flush=True)
    return out


def route(model, routed: bool) -> None:
    """The model's linear layers through oneDNN, as `load_model` leaves them, or set back to plain `Linear`."""
    from evaluate.onednn import OneDnnLinear, route_linears

    if routed:
        route_linears(model)
        return
    for m in model.modules():
        if type(m) is OneDnnLinear:
            m.__class__ = torch.nn.Linear


def main() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from sample_workspace import build_sample_release  # the demo's data, built by the real stages

    from evaluate.backends import TransformersGenerator
    from evaluate.data import load_release
    from evaluate.meta import prompts
    from evaluate.methods import EvalOptions
    from evaluate.models import load_model
    from evaluate.onednn import available
    from evaluate.scoring import Scorer

    torch.set_num_threads(THREADS)
    if not available():
        print("BENCH cpu_linear skipped=no_onednn")
        return
    per_shape = shapes()
    with tempfile.TemporaryDirectory() as tmp:
        data = load_release(build_sample_release(Path(tmp) / "demo", "1.0.0"), "1.0.0")
    pairs = data.pairs
    sentences = list(dict.fromkeys([*pairs["acceptable_sentence"], *pairs["unacceptable_sentence"]]))
    variant = EvalOptions().prompt_variant
    templates = {lang.code: lang.prompt(variant) for lang in data.dataset.languages if lang.prompt(variant)}
    asked = prompts(pairs.iloc[:: len(pairs) // PROMPTS].head(PROMPTS), templates)["acceptable_first"]
    loaded = load_model(None)
    timings, scores, replies = {}, {}, {}
    for way, routed in (("mkl", False), ("onednn", True)):
        route(loaded.model, routed)
        scorer = Scorer(loaded)
        scorer.score([("", sentences[0])])  # its probes of the model, untimed
        started = time.perf_counter()
        scored = scorer.score([("", s) for s in sentences])
        timings[f"direct_{way}"] = time.perf_counter() - started
        scores[way] = [float(scored[("", s)].logprobs.astype("float64").sum()) for s in sentences]
        generator = TransformersGenerator(loaded)
        started = time.perf_counter()
        replies[way] = generator.generate(asked, max_new_tokens=NEW_TOKENS, stage="bench")
        timings[f"generate_{way}"] = time.perf_counter() - started
        print(f"{way}: direct scoring of {len(sentences)} sentences {timings[f'direct_{way}']:.1f} s, "
              f"generating {len(asked)} x {NEW_TOKENS} tokens {timings[f'generate_{way}']:.1f} s", flush=True)
    max_diff = max(abs(a - b) for a, b in zip(scores["mkl"], scores["onednn"]))
    same = sum(a == b for a, b in zip(replies["mkl"], replies["onednn"]))
    print(f"scores: max |d| {max_diff:.1e} nats; replies identical {same} of {len(asked)}")
    print(f"BENCH cpu_linear threads={THREADS} shapes_mkl_s={per_shape['mkl']:.3f} shapes_onednn_s={per_shape['onednn']:.3f} "
          f"shapes_speedup={per_shape['mkl'] / per_shape['onednn']:.2f} sentences={len(sentences)} "
          f"direct_mkl_s={timings['direct_mkl']:.1f} direct_onednn_s={timings['direct_onednn']:.1f} "
          f"direct_speedup={timings['direct_mkl'] / timings['direct_onednn']:.2f} prompts={len(asked)} "
          f"generate_mkl_s={timings['generate_mkl']:.1f} generate_onednn_s={timings['generate_onednn']:.1f} "
          f"generate_speedup={timings['generate_mkl'] / timings['generate_onednn']:.2f} "
          f"max_diff={max_diff:.1e} replies_identical={same}")


if __name__ == "__main__":
    main()
