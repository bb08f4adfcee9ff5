"""lm-evaluation-harness task files for one version: a task per language, multiple choice between
the acceptable (gold, index 0) and the unacceptable sentence with an empty context, like BLiMP,
but with no delimiter before the sentence (BLiMP's default space would prefix every Chinese or
Japanese sentence with a space it never has).

For a local store the version's parquet files are copied next to the task files and named by
absolute path, so the tasks keep reading exactly that version; for the Hub they name the tag.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import yaml

from builder.releases import versions as V
from builder.releases.features import is_m2c
from builder.releases.reading import HubSource, LocalSource, open_source

TASK_TEMPLATE = {
    "output_type": "multiple_choice",
    "test_split": "test",
    "doc_to_text": "",
    "doc_to_target": 0,
    "doc_to_choice": "{{[acceptable_sentence, unacceptable_sentence]}}",
    "target_delimiter": "",  # the sentence exactly as released: no space before it, in every script
    "num_fewshot": 0,
    "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
}


def export_lm_eval(source, version: str, out: Path, *, prefix: str = "xcomps") -> list[Path]:
    """Write `<prefix>_<lang>.yaml` per language and a group file `_<prefix>.yaml`; returns their paths."""
    src = open_source(source)
    v = src.resolve(version)
    man = src.manifest(v)
    langs = [c for c in man["configs"] if not is_m2c(c)]
    if not langs:
        raise ValueError(f"version {v} has no minimal-pair configs")
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        written = []
        for lang in langs:
            task = {"task": f"{prefix}_{lang}", "tag": [prefix]}
            if isinstance(src, HubSource):
                task |= {"dataset_path": src.repo_id, "dataset_name": lang, "dataset_kwargs": {"revision": V.tag(v)}}
            else:
                task |= {"dataset_path": "parquet", "dataset_kwargs": {"data_files": {"test": _copy(src, v, lang, tmp, out)}}}
            task |= TASK_TEMPLATE | {"metadata": {"version": 1.0, "dataset_version": v, "language": lang}}
            written.append(_dump(tmp / f"{prefix}_{lang}.yaml", task))
        group = {"group": prefix, "task": [f"{prefix}_{lang}" for lang in langs],
                 "aggregate_metric_list": [{"metric": "acc", "aggregation": "mean", "weight_by_size": False}],
                 "metadata": {"version": 1.0, "dataset_version": v}}
        written.append(_dump(tmp / f"_{prefix}.yaml", group))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [out / p.name for p in written]


def _copy(src: LocalSource, version: str, lang: str, tmp: Path, out: Path) -> list[str]:
    blobs = src.config_files(version, lang)
    for p, data in blobs.items():
        (tmp / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp / p).write_bytes(data)
    return [str(out / p) for p in sorted(blobs)]


def _dump(path: Path, obj: dict) -> Path:
    path.write_text(yaml.safe_dump(obj, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path
