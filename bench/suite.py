"""Benchmark: a suite of three configurations on the demo release, then on a release with a tenth of it changed.

The suite: SmolLM2-135M-Instruct as it is, SmolLM2 with another BOS policy (`eos`), and the toy model
(trained here, untimed), each with direct, meta, selftranslate and m2c. The demo release (7 languages
x 104 pairs, M2C tests of en, de, ru, zh) is built by the real stages; the derived release 1.0.1
rewords every tenth pair (in every language) and every tenth M2C test, and is published by the real
`publish`. Timed, each a `run_suite` with its models loaded inside it:

- full: 1.0.0 with an empty score store;
- incremental: 1.0.1 with the store the full run filled;
- scratch: 1.0.1 with an empty store (not in the ratio: the reference the incremental run must equal).

`computed_fraction` is the incremental run's texts computed over all it asked for; `identical` is true
when every item decision of the incremental run equals the scratch run's, every item score is within 1e-4
nats of it, every method table is the same (m2c's replies and verdicts, selftranslate's translations and
letters; its numbers within 1e-4) and every summary score is within 1e-4. Target: incremental_ratio at most 0.2, identical=true.
`--quick` evaluates en, de and zh only with 3 M2C tests per template (a busy 2-core machine runs the
whole bench in well over an hour); `--demo-sample` evaluates every language with the demo's stated sample of
the generative methods (`builder.demo.DEMO_SAMPLE`: 4 M2C tests per language and test type, 2 self-translation
pairs per negative type; direct and meta score every pair), about 19 minutes on two idle cores. Ends with one
line: BENCH suite entries=3 full_s=… incremental_s=… incremental_ratio=… computed_fraction=… identical=true|false
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METHODS = ["direct", "meta", "selftranslate", "m2c"]
M2C_LANGS = ("en", "de", "ru", "zh")  # the demo's (builder.demo.DEMO_M2C)
QUICK_LANGS = ["de", "en", "zh"]
TOY_STEPS = 300
TOLERANCE = 1e-4


def identical(a_dir: Path, b_dir: Path) -> tuple[bool, str]:
    """Every item decision the same, every item and summary score within TOLERANCE; else what differs. Either way
    the largest item-score difference of each method."""
    import pandas as pd

    from evaluate.results import read_results

    a, b = read_results(a_dir), read_results(b_dir)
    key = ["method", "variant", "lang", "pair_id"]
    x, y = (r.items.sort_values(key).reset_index(drop=True) for r in (a, b))
    if not x[key].equals(y[key]):
        return False, "different items"
    gaps = pd.concat([(x[c] - y[c]).abs() for c in ("score_acceptable", "score_unacceptable")], axis=1).max(axis=1)
    largest = "largest item-score difference: " + ", ".join(
        f"{m} {g:.2g}" for m, g in gaps.groupby(x["method"]).max().fillna(0).items())
    ok, why = compare(a, b, x, y, gaps)
    return ok, f"{why} ({largest})".lstrip()


def compare(a, b, x, y, gaps) -> tuple[bool, str]:
    """Decisions, item scores (their differences `gaps`), tables and summary scores of results a and b, whose items
    are x and y, aligned."""
    import numpy as np
    import pandas as pd

    if (flipped := int((x["correct"] != y["correct"]).sum())):
        return False, f"{flipped} decisions differ"
    if gaps.max() > TOLERANCE:
        return False, f"item scores differ by {gaps.max():.1e}"
    if sorted(a.tables) != sorted(b.tables):
        return False, "different tables"
    for name in a.tables:  # m2c's and selftranslate's decisions (replies, letters, verdicts) are in their tables
        x, y = a.tables[name].reset_index(drop=True), b.tables[name].reset_index(drop=True)
        if list(x.columns) != list(y.columns) or len(x) != len(y):
            return False, f"table {name} differs in shape"
        for col in x.columns:
            if pd.api.types.is_float_dtype(x[col]) and pd.api.types.is_float_dtype(y[col]):
                same = np.allclose(x[col], y[col], rtol=0, atol=TOLERANCE, equal_nan=True)
            else:
                same = x[col].astype(str).equals(y[col].astype(str))
            if not same:
                return False, f"table {name} column {col} differs"
    sa, sb = (pd.DataFrame([{**s.model_dump(exclude={"extra"})} for s in r.scores]).set_index(
        ["method", "variant", "lang", "negative_type", "metric"]).sort_index() for r in (a, b))
    if not sa.index.equals(sb.index):
        return False, "different scores"
    if not np.allclose(sa["value"], sb["value"], rtol=0, atol=TOLERANCE, equal_nan=True):
        worst = (sa["value"] - sb["value"]).abs().idxmax()
        return False, f"summary score {worst} differs"
    return True, ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="en, de and zh only, 3 M2C tests per template")
    parser.add_argument("--demo-sample", action="store_true", help="the demo's sample of M2C tests and self-translations")
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from rich.console import Console
    from sample_workspace import build_sample_release, publish_changed  # the demo's data, built by the real stages

    from builder.demo import DEMO_SAMPLE
    from builder.progress import progress
    from evaluate.data import load_release_pairs
    from evaluate.suite import ModelEntry, Suite
    from evaluate.suite_run import run_suite
    from evaluate.toy import judgement_corpus, train_toy

    langs = QUICK_LANGS if args.quick else None
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        m2c_langs = tuple(lang for lang in M2C_LANGS if langs is None or lang in langs)
        release = build_sample_release(tmp / "demo", "1.0.0", m2c_langs=m2c_langs, m2c_n=3 if args.quick else None)
        pairs, _ = load_release_pairs(release, "1.0.0")
        toy = train_toy(judgement_corpus(pairs), tmp / "toy", steps=TOY_STEPS, seed=0)
        changed = publish_changed(tmp / "demo", "1.0.1")
        sample = dict(sample_m2c=DEMO_SAMPLE.sample_m2c, sample_selftranslate=DEMO_SAMPLE.sample_selftranslate) \
            if args.demo_sample else {}
        suite = Suite(methods=METHODS, langs=langs, **sample, models=[
            ModelEntry(name="smollm2", gguf="default"), ModelEntry(name="smollm2-eos", gguf="default", bos="eos"),
            ModelEntry(name="toy", folder=toy)])
        print(f"{len(pairs)} pairs in {pairs['lang'].nunique()} languages, {len(changed)} pair ids changed in 1.0.1; "
              + (f"sample {sample}; " if sample else "")
              + f"suite of {len(suite.models)} on {os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f})",
              flush=True)

        def timed(version: str, out: str, store: str) -> tuple[float, list]:
            started = time.perf_counter()
            with progress(Console(stderr=True)) as show:  # a line as each task passes a tenth, in a log
                outcomes = run_suite(suite, str(release), version, tmp / out, store=str(tmp / store), report=False,
                                     progress=show, log=lambda m: print(m, flush=True))
            if failed := [o for o in outcomes if not o.ok]:
                raise SystemExit("; ".join(f"{o.name}: {o.error}" for o in failed))
            return time.perf_counter() - started, outcomes

        full_s, _ = timed("1.0.0", "full", "store.sqlite")
        incremental_s, outcomes = timed("1.0.1", "incremental", "store.sqlite")
        scratch_s, _ = timed("1.0.1", "scratch", "scratch.sqlite")
        computed = sum(c["computed"] + c["unstored"] for o in outcomes for c in o.store.values())
        asked = computed + sum(c["stored"] for o in outcomes for c in o.store.values())
        for o in outcomes:
            print(f"{o.name}: " + ", ".join(f"{m} {c['computed']} computed / {c['stored']} stored"
                                            for m, c in o.store.items()), flush=True)
        checks = {m.name: identical(tmp / "incremental" / m.name, tmp / "scratch" / m.name) for m in suite.models}
        for name, (same, why) in checks.items():
            print(f"{name}: incremental {'equals' if same else 'differs from'} scratch {why}".rstrip(), flush=True)
        same = all(ok for ok, _ in checks.values())
    ratio = incremental_s / full_s
    print(f"scratch run of 1.0.1: {scratch_s:.1f} s; target incremental_ratio <= 0.2: "
          f"{'met' if ratio <= 0.2 and same else 'NOT met'}", flush=True)
    print(f"BENCH suite entries={len(suite.models)} full_s={full_s:.1f} incremental_s={incremental_s:.1f} "
          f"incremental_ratio={ratio:.3f} computed_fraction={computed / max(asked, 1):.3f} "
          f"identical={'true' if same else 'false'}")


if __name__ == "__main__":
    main()
