"""Benchmark: the release evaluation on a CUDA GPU (CI has none; run it where one is lent).

Three parts, each `python bench/gpu.py PART` (no part: all three), so that each fits a lent machine's call:
- smollm2: SmolLM2-135M-Instruct (the default model's GGUF file, or --gguf) in bfloat16 on the GPU with every
  method on the demo release (built by the real stages, or --release). The baseline, in the same run: the same
  weights in float32 on the CPU (all its cores), with direct, meta and neuro; and those three again in float32
  on the GPU. Per item (pair, method, variant): the largest score difference from the CPU's and the decisions
  that differ. With --reference (a float32 CPU results folder of the same release, the demo's), the M2C replies
  are compared too.
- large: an 8B-shaped model: Llama 3.1 8B's configuration with random weights made on the GPU (no 8B weights can
  be reached here) and SmolLM2's tokenizer and vocabulary, in bfloat16, with every method on the demo release.
- comps: that model's direct scoring of a COMPS-size release: 49,340 pairs in each of the 17 XCOMPS languages,
  the sentences bench/full_scale.py's workspace holds (`comps_pairs`), with the decoder's rate in TFLOP/s.
  On an H100 that is about 10 minutes; `--langs` takes some languages, for a machine lent in shorter calls.
Each part prints its methods' seconds and the GPU's peak memory. Without CUDA it says so and ends with
`BENCH gpu skipped=no_cuda`. Ends with one line: BENCH gpu key=value ...
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

from full_scale import comps_rows  # noqa: E402 - bench/ and tests/ are not packages
from real_model import Timed, peak_kib  # noqa: E402

ALL = ("direct", "meta", "neuro", "consistency", "selftranslate", "m2c")
DEVICE = "cuda"
REFERENCE = ("direct", "meta", "neuro")  # what the float32 baseline runs: the methods that score
LLAMA_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False}  # Llama 3.1 8B's config.json, its vocabulary apart


def comps_pairs(size: float = 1.0, langs: list[str] | None = None) -> pd.DataFrame:
    """The pairs of full_scale's workspace at `size`, in the release's columns: English sentences as its stand-in
    generates them ("A <concept> <property>."), the other languages' words as its stand-in translates them
    ("<word> (<code>)"). Ids are made up; the sentences are the release's."""
    from builder.languages import SOURCE_LANGUAGE, registry

    rows = list(comps_rows(size))
    frames = []
    for lang in langs or [c for c in registry() if c != SOURCE_LANGUAGE]:
        tag = "" if lang == SOURCE_LANGUAGE else f" ({lang})"
        acc = [r["acceptable_concept"] + tag for r in rows]
        unacc = [r["unacceptable_concept"] + tag for r in rows]
        prop = [r["property"] + tag for r in rows]
        lead = "A " if lang == SOURCE_LANGUAGE else ""
        frames.append(pd.DataFrame({
            "pair_id": [f"x{i:06d}" for i in range(len(rows))], "lang": lang, "property_id": [r["property"] for r in rows],
            "property": prop, "acceptable_concept": acc, "unacceptable_concept": unacc,
            "negative_type": [r["negative_sample_type"] for r in rows],
            "acceptable_sentence": [f"{lead}{a} {p}." for a, p in zip(acc, prop)],
            "unacceptable_sentence": [f"{lead}{u} {p}." for u, p in zip(unacc, prop)]}))
    return pd.concat(frames, ignore_index=True)


def gpu_peak_gib() -> float:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30


def evaluate_timed(data, loaded, methods, out: Path) -> tuple[pd.DataFrame, dict[str, float]]:
    """`run_evaluation` of `methods`, each timed; the items."""
    from evaluate.methods import resolve
    from evaluate.run import run_evaluation

    seconds: dict[str, float] = {}
    results = run_evaluation(data.pairs, data.dataset, loaded, [Timed(m, seconds) for m in resolve(list(methods))], out,
                             m2c=data.m2c)
    return results.items, seconds


def differences(items: pd.DataFrame, baseline: pd.DataFrame) -> dict[str, dict]:
    """Per method: items compared, the largest |score difference| and the decisions that differ."""
    keys = ["method", "variant", "lang", "pair_id"]
    both = items.merge(baseline, on=keys, suffixes=("", "_base"))
    out = {}
    for method, g in both.groupby("method"):
        diff = pd.concat([(g["score_acceptable"] - g["score_acceptable_base"]).abs(),
                          (g["score_unacceptable"] - g["score_unacceptable_base"]).abs()])
        out[method] = {"items": len(g), "max_diff": float(diff.max()), "decisions_differing": int((g["correct"] != g["correct_base"]).sum())}
    return out


def release_data(release: Path | None, tmp: Path):
    from evaluate.data import load_release

    if release is None:
        from sample_workspace import build_sample_release  # the demo's data, built by the real stages

        release = build_sample_release(tmp / "demo", "1.0.0")
    return load_release(release, "latest", m2c=True)


def part_smollm2(args, tmp: Path) -> dict:
    import torch

    from evaluate.models import load_model

    data = release_data(args.release, tmp)
    gguf = args.gguf or None
    print(f"{len(data.pairs)} pairs and {len(data.m2c)} M2C tests; SmolLM2 bf16 on the GPU: {args.methods} ...", flush=True)
    started = time.perf_counter()
    bf16 = load_model(gguf, device=DEVICE, dtype="bfloat16", log=print)
    items, seconds = evaluate_timed(data, bf16, args.methods.split(","), tmp / "bf16")
    bf16_s, gpu_peak = time.perf_counter() - started, gpu_peak_gib()
    print(f"  {bf16_s:.1f} s (" + ", ".join(f"{m} {s:.1f} s" for m, s in seconds.items()) + f"), GPU peak {gpu_peak:.2f} GiB",
          flush=True)
    del bf16
    torch.cuda.empty_cache()
    fp32_gpu = load_model(gguf, device=DEVICE, dtype="float32")
    gpu_items, gpu_seconds = evaluate_timed(data, fp32_gpu, REFERENCE, tmp / "fp32-gpu")
    del fp32_gpu
    torch.set_num_threads(os.cpu_count() or 1)
    cpu = load_model(gguf, device="cpu", dtype="float32")
    cpu_items, cpu_seconds = evaluate_timed(data, cpu, REFERENCE, tmp / "fp32-cpu")
    print(f"  float32 on the CPU ({torch.get_num_threads()} threads): " + ", ".join(f"{m} {s:.1f} s" for m, s in cpu_seconds.items())
          + "; on the GPU: " + ", ".join(f"{m} {s:.1f} s" for m, s in gpu_seconds.items()), flush=True)
    vs_cpu, gpu_vs_cpu = differences(items, cpu_items), differences(gpu_items, cpu_items)
    for method in REFERENCE:
        a, b = vs_cpu[method], gpu_vs_cpu[method]
        print(f"  {method}: bf16 GPU vs fp32 CPU max |d| {a['max_diff']:.3g}, {a['decisions_differing']} of {a['items']} decisions "
              f"differ; fp32 GPU vs fp32 CPU max |d| {b['max_diff']:.3g}, {b['decisions_differing']} differ", flush=True)
    accuracy = items.groupby(["method", "lang"])["correct"].mean().unstack()
    print("  bf16 GPU accuracy by language:\n" + accuracy.round(3).to_string(), flush=True)
    out = {"smollm2_bf16_s": bf16_s, **{f"smollm2_{m}_s": s for m, s in seconds.items()}, "smollm2_gpu_peak_gib": gpu_peak,
           "smollm2_scoring_gpu_s": sum(seconds[m] for m in REFERENCE), "smollm2_scoring_cpu_s": sum(cpu_seconds.values()),
           "smollm2_scoring_gpu_fp32_s": sum(gpu_seconds.values())}
    out["smollm2_speedup_vs_cpu"] = out["smollm2_scoring_cpu_s"] / out["smollm2_scoring_gpu_s"]
    for method in REFERENCE:
        out[f"{method}_max_diff_bf16"] = vs_cpu[method]["max_diff"]
        out[f"{method}_decisions_differing_bf16"] = vs_cpu[method]["decisions_differing"]
        out[f"{method}_max_diff_fp32_gpu"] = gpu_vs_cpu[method]["max_diff"]
    out["items_compared"] = vs_cpu["direct"]["items"]
    if args.reference:
        ref = pd.read_parquet(args.reference / "m2c_items.parquet")
        mine = pd.read_parquet(tmp / "bf16" / "m2c_items.parquet")
        both = mine.merge(ref, on=["test_id", "lang", "variant", "exemplar"], suffixes=("", "_ref"))
        out["m2c_replies_same"] = float((both["reply"] == both["reply_ref"]).mean())
        out["m2c_correct_same"] = float((both["correct"] == both["correct_ref"]).mean())
        print(f"  m2c vs the reference's fp32 CPU run: {len(both)} tests, replies identical {out['m2c_replies_same']:.3f}, "
              f"correctness identical {out['m2c_correct_same']:.3f}; accuracy {both['correct'].mean():.3f} vs "
              f"{both['correct_ref'].mean():.3f}", flush=True)
    return out


def large_model(tokenizer_dir: Path):
    from transformers import AutoTokenizer, LlamaConfig

    from evaluate.models import random_model

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         **LLAMA_8B)
    return random_model(config, tokenizer, name="Llama-3.1-8B configuration, random weights, SmolLM2 vocabulary",
                        device=DEVICE, dtype="bfloat16")


def tokenizer_dir(args) -> Path:
    """--tokenizer, else the folder SmolLM2's GGUF file converts to."""
    from builder.default_model import gguf_path
    from evaluate.gguf import converted

    return args.tokenizer or converted(args.gguf or gguf_path(), log=print)[0]


def part_large(args, tmp: Path) -> dict:
    data = release_data(args.release, tmp)
    started = time.perf_counter()
    loaded = large_model(tokenizer_dir(args))
    built = time.perf_counter() - started
    print(f"8B-shaped model: {loaded.info.n_params / 1e9:.2f}B parameters, made in {built:.1f} s, batch "
          f"{loaded.info.batch_size}; {args.methods} on the demo release ...", flush=True)
    _, seconds = evaluate_timed(data, loaded, args.methods.split(","), tmp / "large")
    total = sum(seconds.values())
    print(f"  {total:.1f} s (" + ", ".join(f"{m} {s:.1f} s" for m, s in seconds.items()) + f"), GPU peak {gpu_peak_gib():.1f} GiB",
          flush=True)
    return {"large_params_b": loaded.info.n_params / 1e9, "large_s": total, **{f"large_{m}_s": s for m, s in seconds.items()},
            "large_gpu_peak_gib": gpu_peak_gib()}


def part_comps(args, tmp: Path) -> dict:
    from builder.languages import registry
    from evaluate.direct import Direct
    from evaluate.methods import Context, EvalOptions
    from evaluate.scoring import Scorer

    pairs = comps_pairs(langs=args.langs.split(",") if args.langs else None)
    loaded = large_model(tokenizer_dir(args))
    scorer = Scorer(loaded)
    scorer.score([("", "A probe.")])  # the scorer's probes of the model, untimed
    marks, shown = [time.perf_counter()], [0]

    def progress(task: str, done: int, total: int) -> None:
        if done * 20 // total > shown[0]:  # every 5%
            shown[0] = done * 20 // total
            print(f"  {task}: {done}/{total} at {time.perf_counter() - marks[0]:.0f} s, "
                  f"{scorer.work.positions} positions", flush=True)

    print(f"{len(pairs)} pairs in {pairs['lang'].nunique()} languages, direct scoring with the 8B-shaped model ...", flush=True)
    ctx = Context(registry(), EvalOptions(), tmp / "comps", scorer=scorer, progress=progress)
    scorer.work.positions = 0
    items = Direct().run(ctx, pairs).items
    seconds = time.perf_counter() - marks[0]
    body, _ = scorer.split
    madds = sum(p.numel() for p in body.parameters()) - body.get_input_embeddings().weight.numel()
    tflops = 2 * madds * scorer.work.positions / seconds / 1e12
    print(f"  {seconds:.1f} s for {len(items)} items; {scorer.work.positions} decoder positions, "
          f"{scorer.work.positions / seconds:.0f} a second, decoder {tflops:.0f} TFLOP/s overall; GPU peak {gpu_peak_gib():.1f} GiB",
          flush=True)
    return {"comps_pairs": len(pairs), "comps_languages": pairs["lang"].nunique(), "comps_s": seconds,
            "comps_positions": scorer.work.positions, "comps_decoder_tflops": tflops, "comps_gpu_peak_gib": gpu_peak_gib()}


PARTS = {"smollm2": part_smollm2, "large": part_large, "comps": part_comps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", help=f"any of {', '.join(PARTS)} [default: all]")
    parser.add_argument("--methods", default=",".join(ALL), help="the methods smollm2 and large run [default: all]")
    parser.add_argument("--langs", help="comps: these of the 17 languages only (a call shorter than the whole run)")
    parser.add_argument("--gguf", type=Path, help="SmolLM2's GGUF file [default: the default model's]")
    parser.add_argument("--tokenizer", type=Path, help="the 8B-shaped model's tokenizer folder [default: SmolLM2's]")
    parser.add_argument("--release", type=Path, help="the demo release folder [default: built by the real stages]")
    parser.add_argument("--reference", type=Path, help="a float32 CPU results folder of that release (M2C replies)")
    args = parser.parse_args()
    if unknown := [p for p in args.parts if p not in PARTS]:
        parser.error(f"unknown part(s) {', '.join(unknown)}: expected {', '.join(PARTS)}")
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device here: nothing measured")
        print("BENCH gpu skipped=no_cuda")
        return
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    fields: dict[str, float | int | str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for part in args.parts or PARTS:
            torch.cuda.reset_peak_memory_stats()
            fields.update(PARTS[part](args, Path(tmp) / part))
            torch.cuda.empty_cache()
    fields["host_peak_mib"] = peak_kib() // 1024
    print("BENCH gpu " + " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in fields.items()))


if __name__ == "__main__":
    main()
