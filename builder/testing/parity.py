"""Parity of the platform's sentence scores with the tools the field scores minimal pairs with:
lm-evaluation-harness's HF backend (log-likelihood through the release's exported task files) and
minicons (summed log-probabilities with BOS). Every sentence within `TOLERANCE` nats and every
decision identical, or the comparison says which.

The tools run in their own environment, installed once per machine from
`requirements/reference-scorers.lock` (as Label Studio's and llama.cpp's are), with the project's
own torch and transformers versions: lm-eval depends on Hugging Face's `evaluate`
package, whose import name would shadow this project's `evaluate` package in the project's
environment. `builder/testing/reference_scorers.py` is what runs there.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from builder.child_env import child_env
from builder.environments import ToolEnvironment

REFERENCE = ToolEnvironment("reference-scorers")  # requirements/reference-scorers.lock: lm-eval, minicons
TOLERANCE = 1e-3  # nats per sentence
SCRIPT = Path(__file__).with_name("reference_scorers.py")


def ensure_environment(log=print) -> Path:
    """The reference environment's python, installed from its lock on first use (a few minutes, once per machine);
    `BUILDER_REFERENCE_SCORERS_VENV` names one of yours instead."""
    own = os.environ.get("BUILDER_REFERENCE_SCORERS_VENV")
    return REFERENCE.ensure(Path(own) if own else None, log=log) / "bin" / "python"


def run_references(tools: list[str], *, model: Path, bos_token: str, bos_id: int, batch_size: int,
                   sentences: list[str] | None = None, tasks_dir: Path | None = None, tasks: list[str] | None = None,
                   limit: int | None = None, threads: int | None = None, log=print) -> dict:
    """The tools' scores (and their seconds), computed in the reference environment."""
    python = ensure_environment(log)
    request = {"tools": tools, "model": str(model), "bos_token": bos_token, "bos_id": bos_id, "batch_size": batch_size,
               "sentences": sentences, "tasks_dir": str(tasks_dir) if tasks_dir else None, "tasks": tasks, "limit": limit,
               "threads": threads or os.cpu_count() or 1}
    with tempfile.TemporaryDirectory() as tmp:
        req, out = Path(tmp) / "request.json", Path(tmp) / "out.json"
        req.write_text(json.dumps(request, ensure_ascii=False), encoding="utf-8")
        env = child_env(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                        HF_DATASETS_CACHE=str(Path(tmp) / "datasets"))
        # -P: the script's folder (this package, whose module names such as `gguf` shadow real ones) is not on sys.path
        done = subprocess.run([str(python), "-P", str(SCRIPT), str(req), str(out)], env=env, capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise RuntimeError(f"reference scorers failed ({' '.join(tools)}):\n{done.stderr[-4000:]}")
        return json.loads(out.read_text(encoding="utf-8"))


class ToolParity(BaseModel):
    """One tool against the platform, on the same sentences and pairs."""

    tool: str
    n_sentences: int
    max_abs_diff: float  # nats, over sentences
    n_pairs: int
    decisions_differing: int
    worst: list[tuple[str, float, float]]  # (sentence, platform, tool), largest differences first

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= TOLERANCE and self.decisions_differing == 0


def compare(tool: str, ours: dict[str, float], theirs: dict[str, float], pairs: pd.DataFrame) -> ToolParity:
    """Every sentence's difference and every pair's decision (acceptable scored strictly higher)."""
    missing = sorted(set(ours) ^ set(theirs))
    if missing:
        raise ValueError(f"{tool}: scored other sentences than the platform (e.g. {missing[:3]})")
    diffs = sorted(((abs(ours[s] - theirs[s]), s) for s in ours), reverse=True)
    good, bad = pairs["acceptable_sentence"], pairs["unacceptable_sentence"]
    differing = sum((ours[a] > ours[b]) != (theirs[a] > theirs[b]) for a, b in zip(good, bad))
    return ToolParity(tool=tool, n_sentences=len(ours), max_abs_diff=diffs[0][0] if diffs else 0.0, n_pairs=len(pairs),
                      decisions_differing=int(differing), worst=[(s, ours[s], theirs[s]) for _, s in diffs[:3]])


def lm_eval_sentence_scores(docs: list[dict], pairs: pd.DataFrame) -> dict[str, float]:
    """Sentence scores from lm-eval's documents (pair id and language name their two sentences); a sentence scored
    in several documents must get one score."""
    rows = pairs.set_index(["lang", "pair_id"])
    out: dict[str, float] = {}
    for d in docs:
        row = rows.loc[(d["lang"], d["pair_id"])]
        for side in ("acceptable", "unacceptable"):
            sentence = row[f"{side}_sentence"]
            if sentence in out and abs(out[sentence] - d[side]) > TOLERANCE:
                raise ValueError(f"lm-eval scored {sentence!r} twice differently: {out[sentence]} and {d[side]}")
            out[sentence] = d[side]
    return out
