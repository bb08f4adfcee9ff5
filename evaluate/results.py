"""Evaluation results on disk: items as parquet, the summary with the whole configuration as JSON.

DIR/results.parquet   one row per item x method x variant
DIR/<table>.parquet   method tables (probes.parquet: F1 per language x negative type x model x layer)
DIR/summary.json      {"config": RunConfig, "scores": [Score, ...], "store": {method: {"computed": n, "stored": n,
                      "unstored": n}}} (texts computed, taken from the score store, computed unstorable; with a store)
Each file is written to a temporary name of its own and renamed (`builder.files`), so a reader never sees half a
file and two runs writing one folder never collide.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
from filelock import FileLock
from pydantic import BaseModel, ConfigDict

from builder.errors import InputError
from builder.files import atomic_write, write_text
from builder.records import Language
from evaluate.methods import ITEM_COLUMNS, EvalOptions, Score
from evaluate.models import ModelInfo
from evaluate.scoring import ScoringSetup

SUMMARY = "summary.json"
ITEMS = "results.parquet"
LOCK = ".results.lock"


class DatasetInfo(BaseModel):
    """The release evaluated: exactly which version, which configs, and its languages as it declares them."""

    model_config = ConfigDict(frozen=True)
    source: str
    version: str
    manifest_sha256: str | None
    configs: list[str]
    release_code_version: str | None = None
    languages: list[Language] = []  # the evaluated languages' declarations (names, typology, prompts)
    languages_note: str | None = None  # why they are not the release's own declarations (an older release)


class RunConfig(BaseModel):
    """Everything a number in the results depends on."""

    model_config = ConfigDict(frozen=True)
    model: ModelInfo
    scoring: ScoringSetup | None  # None for a model behind an endpoint (nothing scored)
    prompt_format: str | None = None  # how a generation prompt reaches a local model ({prompt} in its chat template)
    dataset: DatasetInfo
    options: EvalOptions
    methods: list[str]
    langs: list[str]
    code_version: str
    created_at: datetime

    def fingerprint(self) -> dict:
        """The parts that must match for earlier results to be reused (not the method list or the time)."""
        return self.model_dump(mode="json", exclude={"methods", "created_at"})


def now() -> datetime:
    return datetime.now(timezone.utc)


def write_parquet(path: Path, df: pd.DataFrame) -> None:
    atomic_write(path, lambda p: df.to_parquet(p, index=False))


def write_json(path: Path, data) -> None:
    write_text(path, json.dumps(data, ensure_ascii=False, indent=1))


@dataclass
class Results:
    config: RunConfig
    items: pd.DataFrame
    scores: list[Score]
    tables: dict[str, pd.DataFrame]
    store: dict[str, dict[str, int]] = field(default_factory=dict)  # per method: texts computed, stored, unstored
    threads: int | None = None  # torch's CPU threads in the run that wrote them (a local model; a suite's jobs share the cores)

    def score_frame(self) -> pd.DataFrame:
        return pd.DataFrame([s.model_dump() for s in self.scores], columns=list(Score.model_fields))


def results_lock(directory: Path) -> AbstractContextManager:
    """Held while a run writes a folder's results or its report: of two runs sharing the folder, each writes a whole
    set of files (tables, items, summary; report and figures), one after the other, never a mix of both."""
    directory = Path(directory)
    return FileLock(directory / LOCK) if directory.is_dir() else nullcontext()  # nothing there to read or to write into


def write_results(directory: Path, results: Results) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with results_lock(directory):
        for name, table in results.tables.items():
            write_parquet(directory / f"{name}.parquet", table)
        write_parquet(directory / ITEMS, results.items)
        write_json(directory / SUMMARY, {"config": results.config.model_dump(mode="json"),
                                         "scores": [s.model_dump() for s in results.scores],
                                         "tables": sorted(results.tables),
                                         **({"store": results.store} if results.store else {}),
                                         **({"threads": results.threads} if results.threads else {})})


def read_results(directory: Path) -> Results:
    path = Path(directory) / SUMMARY
    if not path.is_file():
        raise InputError(f"{directory}: no {SUMMARY}; is it the --out folder of `builder eval run`?")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        config = RunConfig.model_validate(data["config"])
        scores = [Score.model_validate(s) for s in data["scores"]]
    except (json.JSONDecodeError, KeyError, ValueError) as exc:
        raise InputError(f"{path}: not a results summary ({exc})") from exc
    items = pd.read_parquet(Path(directory) / ITEMS) if (Path(directory) / ITEMS).is_file() else pd.DataFrame(columns=ITEM_COLUMNS)
    tables = {name: pd.read_parquet(Path(directory) / f"{name}.parquet") for name in data.get("tables", [])}
    return Results(config, items, scores, tables, data.get("store", {}), data.get("threads"))
