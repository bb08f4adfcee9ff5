"""Scores by lm-evaluation-harness (HF backend) and minicons, run inside their own environment (see
`builder.testing.parity`), never imported by the platform: `python -P reference_scorers.py REQUEST.json OUT.json`.

Only the standard library is imported at module level, so the module stays importable anywhere;
the tools are imported where they run. Each tool's set-up (loading the model) is outside the timing.

- `lm_eval_tasks`: `simple_evaluate` over the release's exported task files (the first `limit`
  documents of each, if given), `log_samples` on, so each document's two log-likelihoods
  (acceptable, unacceptable) come back with its pair id.
- `lm_eval_sentences`: `HFLM.loglikelihood` on the unique sentences (empty context), timed.
- `minicons`: `IncrementalLMScorer.sequence_score` with `bos_token=True`, summed, on the unique
  sentences in batches of `batch_size`, timed.
Both condition on the BOS token given (lm-eval's `prefix_token_id`; minicons prepends the
tokenizer's `bos_token` text, set to it).
"""

from __future__ import annotations

import json
import sys
import time


def lm_eval_tasks(req: dict) -> dict:
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    lm = HFLM(pretrained=req["model"], batch_size=req["batch_size"], device="cpu", dtype="float32",
              prefix_token_id=req["bos_id"])
    started = time.perf_counter()
    out = simple_evaluate(model=lm, tasks=req["tasks"], task_manager=TaskManager(include_path=req["tasks_dir"]),
                          log_samples=True, num_fewshot=0, limit=req.get("limit"))
    seconds = time.perf_counter() - started
    docs = [{"pair_id": s["doc"]["pair_id"], "lang": s["doc"]["lang"], "acceptable": s["filtered_resps"][0][0],
             "unacceptable": s["filtered_resps"][1][0]} for samples in out["samples"].values() for s in samples]
    accuracy = {task: r.get("acc,none") for task, r in out["results"].items()}
    return {"docs": docs, "accuracy": accuracy, "seconds": seconds}


def lm_eval_sentences(req: dict) -> dict:
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=req["model"], batch_size=req["batch_size"], device="cpu", dtype="float32",
              prefix_token_id=req["bos_id"])
    requests = [Instance(request_type="loglikelihood", doc={}, arguments=("", s), idx=0) for s in req["sentences"]]
    started = time.perf_counter()
    scores = [ll for ll, _ in lm.loglikelihood(requests, disable_tqdm=True)]
    return {"scores": scores, "seconds": time.perf_counter() - started}


def minicons(req: dict) -> dict:
    from minicons.scorer import IncrementalLMScorer

    scorer = IncrementalLMScorer(req["model"], device="cpu")  # loaded by path: minicons puts it in eval mode
    scorer.tokenizer.bos_token = req["bos_token"]
    sentences, size = req["sentences"], req["batch_size"]
    started = time.perf_counter()
    scores = []
    for i in range(0, len(sentences), size):
        scores += scorer.sequence_score(sentences[i : i + size], bos_token=True, reduction=lambda x: x.sum(0).item())
    return {"scores": scores, "seconds": time.perf_counter() - started}


TOOLS = {"lm_eval_tasks": lm_eval_tasks, "lm_eval_sentences": lm_eval_sentences, "minicons": minicons}


def main(request_path: str, out_path: str) -> None:
    import importlib.metadata

    import torch

    req = json.loads(open(request_path, encoding="utf-8").read())
    torch.set_num_threads(req["threads"])
    out = {"versions": {p: importlib.metadata.version(p) for p in ("lm_eval", "minicons", "transformers", "torch")}}
    for tool in req["tools"]:
        out[tool] = TOOLS[tool](req)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
