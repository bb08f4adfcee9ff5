"""Benchmark: greedy generation of the M2C prompts by SmolLM2-135M-Instruct, prompts read as a packed prefix tree
against the same prompts read whole.

The demo's M2C tests (German and Chinese, rendered by the real stages from the bundled sample) are asked zero-shot
and one-shot as `evaluate.m2c` asks them; every `STRIDE`th prompt is generated (20 new tokens, the model's batch
size, `THREADS` threads) by `TransformersGenerator` twice: as the baseline, batched by length with each prompt
read whole (as the generator runs for models that do not pack), then reading a batch's prompts as
one packed prefix tree. The replies must be identical. Beside the times: the prompt positions each read (the
decoder's work before decoding; decoding is the same in both). Ends with one line: BENCH generation key=value ...
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THREADS = 2
STRIDE = 8
LANGS = ("de", "zh")


def main() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    import torch
    from sample_workspace import build_sample_release  # the demo's data, built by the real stages

    from builder.default_model import gguf_path
    from evaluate.backends import TransformersGenerator
    from evaluate.data import load_release_m2c
    from evaluate.m2c import MAX_NEW_TOKENS, exemplars, one_shot, prompt_words, zero_shot
    from evaluate.models import load_model

    torch.set_num_threads(THREADS)
    with tempfile.TemporaryDirectory() as tmp:
        release = build_sample_release(Path(tmp) / "demo", "1.0.0", m2c_langs=LANGS)
        tests, _ = load_release_m2c(release, "1.0.0")
    words, tests = prompt_words(), tests.reset_index(drop=True)
    by_id = {r["test_id"]: r for r in tests.to_dict("records")}
    shots = exemplars(tests, 0)
    prompts = [zero_shot(words[r["lang"]], r) for r in by_id.values()]
    prompts += [one_shot(words[r["lang"]], r, by_id[shots[t]]) for t, r in by_id.items() if t in shots]
    prompts = prompts[::STRIDE]
    loaded = load_model(gguf_path(), device="cpu", dtype="float32")
    read: list[int] = []
    forward = loaded.model.forward

    @functools.wraps(forward)  # generate reads the signature to choose the inputs it passes
    def counted(*args, input_ids, **kw):
        if input_ids.shape[1] > 1:
            read.append(input_ids.numel())
        return forward(*args, input_ids=input_ids, **kw)

    loaded.model.forward = counted
    print(f"{len(prompts)} M2C prompts ({', '.join(LANGS)}, zero- and one-shot), batch {loaded.info.batch_size}, "
          f"{THREADS} threads, load average {os.getloadavg()[0]:.1f} ...", flush=True)
    results = {}
    for name, packs in (("whole", False), ("shared", True)):
        gen = TransformersGenerator(loaded)
        gen.packs = packs and gen.packs
        read.clear()
        start = time.perf_counter()
        replies = gen.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, stage="bench")
        results[name] = (time.perf_counter() - start, sum(read), replies)
        print(f"  {name:>6}: {results[name][0]:7.1f} s, {results[name][1]} prompt positions read", flush=True)
    (whole_s, whole_read, whole_replies), (shared_s, shared_read, shared_replies) = results["whole"], results["shared"]
    differing = sum(a != b for a, b in zip(whole_replies, shared_replies))
    if differing:
        raise SystemExit(f"{differing} of {len(prompts)} replies differ between the two ways of reading the prompts")
    print(f"BENCH generation prompts={len(prompts)} threads={THREADS} whole_s={whole_s:.1f} shared_s={shared_s:.1f} "
          f"speedup={whole_s / shared_s:.2f} positions_whole={whole_read} positions_shared={shared_read} "
          f"position_ratio={whole_read / shared_read:.2f} replies_differing={differing}")


if __name__ == "__main__":
    main()
