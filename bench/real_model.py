"""Benchmark: SmolLM2-135M-Instruct, the default model, evaluated on the demo release with direct, meta and neuro,
and its direct scoring against lm-evaluation-harness's HF backend and minicons on the same sentences.

The demo release (7 languages x 104 pairs) is built by the real stages from the bundled recording.
A child process, on `THREADS` threads, loads the model (its GGUF file converted once and cached:
the conversion is not timed) and runs `run_evaluation` with the three methods; it reports each
method's seconds, the whole wall time and its own peak resident memory (VmHWM, model included).
Then the unique sentences are scored by the platform's `Scorer` alone, and by lm-eval's
`HFLM.loglikelihood` and minicons's `sequence_score` (with BOS, summed) in their own environment
(`builder.testing.parity`), each on the same sentences, batch size, threads and BOS, set-up untimed; the
speed-ups are their seconds over ours, and the largest difference in nats is reported with the
number of differing decisions. Beside them, the work ratio: lm-eval's multiply-adds of the weights
over ours (its padded positions through the decoder and the whole output layer; ours through the
decoder, and the output layer once per distinct prefix). Scoring is compute-bound on a CPU, so the
work ratio is about the speed-up two equally efficient implementations would show. The machine's load
average is printed: other work on it slows every timing alike. Ends with one line: BENCH real_model key=value ...
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THREADS = 2
METHODS = ("direct", "meta", "neuro")
TARGET_WALL_S, TARGET_PEAK_MIB = 300, 2048


def peak_kib() -> int:
    return int(re.search(r"^VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1))


class Timed:
    """A method that records how long its run took."""

    def __init__(self, method, seconds: dict[str, float]) -> None:
        self.method, self.seconds = method, seconds
        self.name, self.headline, self.needs = method.name, method.headline, method.needs

    def run(self, ctx, pairs):
        started = time.perf_counter()
        try:
            return self.method.run(ctx, pairs)
        finally:
            self.seconds[self.name] = time.perf_counter() - started


def child(release: Path, out: Path) -> None:
    """The whole evaluation, then the platform's direct scoring of the unique sentences alone."""
    import torch

    from evaluate.data import load_release
    from evaluate.methods import resolve
    from evaluate.models import load_model
    from evaluate.run import run_evaluation
    from evaluate.scoring import Scorer, Work, length_batches

    torch.set_num_threads(THREADS)
    data = load_release(release, "1.0.0")
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    loaded = load_model(None)
    loaded_s = time.perf_counter() - started
    run_evaluation(data.pairs, data.dataset, loaded, [Timed(m, seconds) for m in resolve(list(METHODS))], out / "eval")
    wall = time.perf_counter() - started
    peak = peak_kib()
    pairs = data.pairs
    sentences = list(dict.fromkeys([*pairs["acceptable_sentence"], *pairs["unacceptable_sentence"]]))
    scorer = Scorer(loaded)
    scorer.score([("", sentences[0])])  # its probes of the model, as the tools' set-up, untimed
    scorer.work = Work()
    started = time.perf_counter()
    scored = scorer.score([("", s) for s in sentences])
    direct_s = time.perf_counter() - started
    body, head = scorer.split
    lengths = [len(scorer.prefix()) + len(t.ids) - 1 for t in scorer.tokenize([("", s) for s in sentences])]
    work = {"ours_positions": scorer.work.positions, "ours_output_rows": scorer.work.output_rows,
            "lm_eval_positions": sum(len(b) * lengths[b[0]] for b in length_batches(lengths, loaded.info.batch_size)),
            "decoder_madds": sum(p.numel() for p in body.parameters()) - body.get_input_embeddings().weight.numel(),
            "head_madds": head.weight.numel()}
    print(json.dumps({"wall_s": wall, "load_s": loaded_s, "methods_s": seconds, "peak_kib": peak, "direct_alone_s": direct_s,
                      "batch_size": loaded.info.batch_size, "work": work, "bos_token": scorer.setup.bos_token, "bos_id": scorer.bos_id,
                      "sentences": sentences, "scores": [float(scored[("", s)].logprobs.astype("float64").sum())
                                                         for s in sentences]}))


def main() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from sample_workspace import build_sample_release  # the demo's data, built by the real stages

    from builder.default_model import gguf_path
    from builder.testing.parity import compare, ensure_environment, run_references
    from evaluate.data import load_release
    from evaluate.gguf import converted

    folder, _ = converted(gguf_path(), log=lambda m: print(m, flush=True))
    ensure_environment()
    with tempfile.TemporaryDirectory() as tmp:
        release = build_sample_release(Path(tmp) / "demo", "1.0.0")
        pairs = load_release(release, "1.0.0").pairs
        print(f"{len(pairs)} pairs in {pairs['lang'].nunique()} languages; evaluating SmolLM2 with "
              f"{', '.join(METHODS)} on {THREADS} threads (load average {os.getloadavg()[0]:.1f}) ...", flush=True)
        done = subprocess.run([sys.executable, __file__, "--child", str(release), tmp], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        if done.returncode != 0:
            raise SystemExit(done.stderr[-4000:])
    r = json.loads(done.stdout.strip().splitlines()[-1])
    sentences = r["sentences"]
    ours = dict(zip(sentences, r["scores"]))
    print(f"evaluation {r['wall_s']:.1f} s (model load {r['load_s']:.1f} s; "
          + ", ".join(f"{m} {s:.1f} s" for m, s in r["methods_s"].items())
          + f"), peak {r['peak_kib'] / 1024:.0f} MiB; direct scoring alone {r['direct_alone_s']:.1f} s "
          f"for {len(sentences)} sentences, batch {r['batch_size']}", flush=True)
    print(f"lm-eval and minicons on the same sentences (load average {os.getloadavg()[0]:.1f}) ...", flush=True)
    refs = run_references(["lm_eval_sentences", "minicons"], model=folder, bos_token=r["bos_token"], bos_id=r["bos_id"],
                          batch_size=r["batch_size"], sentences=sentences, threads=THREADS)
    tools = {"lm_eval": refs["lm_eval_sentences"], "minicons": refs["minicons"]}
    parity = {name: compare(name, ours, dict(zip(sentences, t["scores"])), pairs) for name, t in tools.items()}
    for name, t in tools.items():
        p = parity[name]
        print(f"{name}: {t['seconds']:.1f} s, max |d| {p.max_abs_diff:.1e} nats, {p.decisions_differing} of {p.n_pairs} "
              "decisions differ", flush=True)
    speed = {name: t["seconds"] / r["direct_alone_s"] for name, t in tools.items()}
    w = r["work"]  # lm-eval's positions run the decoder and the whole output layer; ours, the output layer once a prefix
    ours = w["ours_positions"] * w["decoder_madds"] + w["ours_output_rows"] * w["head_madds"]
    work_ratio = w["lm_eval_positions"] * (w["decoder_madds"] + w["head_madds"]) / ours
    print(f"work: ours {w['ours_positions']} decoder positions and {w['ours_output_rows']} output-layer rows, lm-eval "
          f"{w['lm_eval_positions']} of both: lm-eval does {work_ratio:.2f}x our weights' multiply-adds", flush=True)
    print(f"BENCH real_model pairs={len(pairs)} sentences={len(sentences)} methods={'+'.join(METHODS)} threads={THREADS} "
          + " ".join(f"{m}_s={s:.1f}" for m, s in r["methods_s"].items())
          + f" direct_alone_s={r['direct_alone_s']:.1f} lm_eval_s={tools['lm_eval']['seconds']:.1f} "
          f"minicons_s={tools['minicons']['seconds']:.1f} max_diff_lm_eval={parity['lm_eval'].max_abs_diff:.1e} "
          f"max_diff_minicons={parity['minicons'].max_abs_diff:.1e} "
          f"decisions_differing={parity['lm_eval'].decisions_differing + parity['minicons'].decisions_differing} "
          f"load_average={os.getloadavg()[0]:.1f} wall_s={r['wall_s']:.1f} target_wall_s={TARGET_WALL_S} "
          f"speedup_vs_lm_eval={speed['lm_eval']:.2f} speedup_vs_minicons={speed['minicons']:.2f} "
          f"work_ratio_vs_lm_eval={work_ratio:.2f} "
          f"peak_mib={r['peak_kib'] / 1024:.0f} target_peak_mib={TARGET_PEAK_MIB}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        main()
