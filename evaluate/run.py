"""Run methods over a table of pairs and write the results (contract 3).

Each finished method is kept under DIR/parts/<method>/ with the configuration it ran under; a
re-run with the same configuration reuses it, so an interrupted evaluation resumes where it stopped
and never scores anything twice.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from builder.languages import registry as language_registry
from evaluate.data import check_pairs
from evaluate.methods import Context, EvalOptions, Method, MethodOutput, Score
from evaluate.models import LoadedModel
from evaluate.results import DatasetInfo, Results, RunConfig, code_version, now, write_json, write_parquet, write_results
from evaluate.scoring import Scorer


def _load_part(folder: Path, config: RunConfig) -> MethodOutput | None:
    done = folder / "done.json"
    if not done.is_file():
        return None
    meta = json.loads(done.read_text(encoding="utf-8"))
    if meta["config"] != config.fingerprint():
        return None
    return MethodOutput(pd.read_parquet(folder / "items.parquet"), [Score.model_validate(s) for s in meta["scores"]],
                        {t: pd.read_parquet(folder / f"{t}.parquet") for t in meta["tables"]})


def _save_part(folder: Path, config: RunConfig, out: MethodOutput) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    write_parquet(folder / "items.parquet", out.items)
    for name, table in out.tables.items():
        write_parquet(folder / f"{name}.parquet", table)
    write_json(folder / "done.json", {"config": config.fingerprint(), "scores": [s.model_dump() for s in out.scores],
                                      "tables": sorted(out.tables)})


def run_evaluation(pairs: pd.DataFrame, dataset: DatasetInfo, loaded: LoadedModel, methods: list[Method],
                   out_dir: Path, options: EvalOptions = EvalOptions(), progress=None) -> Results:
    pairs = check_pairs(pairs, f"dataset {dataset.source} {dataset.version}")
    out_dir = Path(out_dir)
    scorer = Scorer(loaded, options.bos_policy)
    config = RunConfig(model=loaded.info, scoring=scorer.setup, dataset=dataset, options=options,
                       methods=[m.name for m in methods], langs=sorted(pairs["lang"].unique()),
                       code_version=code_version(), created_at=now())
    ctx = Context(loaded, scorer, language_registry(), options, out_dir / "work", progress or (lambda *a: None))
    items, scores, tables = [], [], {}
    for method in methods:
        folder = out_dir / "parts" / method.name
        out = _load_part(folder, config)
        if out is None:
            out = method.run(ctx, pairs)
            _save_part(folder, config, out)
        items.append(out.items)
        scores += out.scores
        tables.update(out.tables)
    results = Results(config, pd.concat(items, ignore_index=True), scores, tables)
    write_results(out_dir, results)
    shutil.rmtree(ctx.work_dir, ignore_errors=True)
    return results
