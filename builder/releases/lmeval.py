"""lm-evaluation-harness task files for one version, in lm-eval's own idiom (its blimp/ tasks): a shared
template, a four-line task per language over it, and a group listing them.

Each task is multiple choice between the acceptable (gold, index 0) and the unacceptable sentence
with an empty context, like BLiMP, but with no delimiter before the sentence (BLiMP's default space
would prefix every Chinese or Japanese sentence with a space it never has). The group is the only
name that gathers the tasks: they carry no tag, which lm-eval would resolve in place of the group.

For the Hub the tasks name the release's dataset id and the version's tag. For a local store the
version's parquet files are copied into the folder, and a loader written beside the task files
(`custom_dataset: !function <prefix>_data.load`, which lm-eval resolves relative to the task file)
reads them from its own location: the folder works from any working directory and can be moved.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import yaml

from builder.errors import InputError
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
LOADER = '''"""The lm-eval tasks beside this file read release {version} from this folder's data/<language>/ (written by
`builder releases export-lm-eval`): paths are found from this file, so the folder works from anywhere."""

from pathlib import Path

import datasets

HERE = Path(__file__).resolve().parent


def load(language, **_):
    files = sorted(str(p) for p in (HERE / "data" / language).glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{{HERE / 'data' / language}}: no parquet files of release {version}")
    return datasets.load_dataset("parquet", data_files={{"test": files}})
'''


class _Function(str):
    """A `!function module.name` reference in a task file, resolved by lm-eval relative to that file."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Function, lambda dumper, ref: dumper.represent_scalar("!function", str(ref)))


def export_lm_eval(source, version: str, out: Path, *, prefix: str = "xcomps") -> list[Path]:
    """Write `_<prefix>_template_yaml`, `<prefix>_<lang>.yaml` per language and the group `_<prefix>.yaml` (and, for
    a local store, the data and its loader `<prefix>_data.py`); returns the task and group files' paths."""
    src = open_source(source)
    v = src.resolve(version)
    man = src.manifest(v)
    langs = [c for c in man["configs"] if not is_m2c(c)]
    if not langs:
        raise InputError(f"version {v} has no minimal-pair configs")
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        template = f"_{prefix}_template_yaml"
        if isinstance(src, HubSource):
            data = {"dataset_path": src.repo_id, "dataset_kwargs": {"revision": V.tag(v)}}
        else:
            data = {"custom_dataset": _Function(f"{prefix}_data.load")}
            (tmp / f"{prefix}_data.py").write_text(LOADER.format(version=v), encoding="utf-8")
            for lang in langs:
                _copy(src, v, lang, tmp)
        _dump(tmp / template, data | TASK_TEMPLATE)
        written = []
        for lang in langs:
            task = {"include": template, "task": f"{prefix}_{lang}"}
            if isinstance(src, HubSource):
                task["dataset_name"] = lang
            task["metadata"] = {"version": 1.0, "dataset_version": v, "language": lang}
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


def _copy(src: LocalSource, version: str, lang: str, tmp: Path) -> None:
    for p, data in src.config_files(version, lang).items():  # each checked against the manifest's sha256
        (tmp / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp / p).write_bytes(data)


def _dump(path: Path, obj: dict) -> Path:
    path.write_text(yaml.dump(obj, Dumper=_Dumper, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path
