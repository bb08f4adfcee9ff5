"""The dataset card (README.md): YAML metadata for the Hub and `datasets`, and a body for people.

`dataset_info` (features, sizes) and `configs` listing each config's exact, content-named files make
the card differ whenever the data differs, so `datasets` never serves another version from its cache.
"""

from __future__ import annotations

import datasets
from huggingface_hub import DatasetCard, DatasetCardData

from builder.paths import data_dir
from builder.records import NEGATIVE_TYPES, Language
from builder.releases.features import (
    COLUMN_DOCS,
    M2C_FEATURES,
    PAIR_FEATURES,
    features_for,
    is_m2c,
)
from builder.releases.stats import ReleaseStats

_SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"))


def size_category(n: int) -> str:
    return next((label for limit, label in _SIZES if n < limit), "n>10M")


def _dtype(feature) -> str:
    if isinstance(feature, datasets.ClassLabel):
        return "class label (" + ", ".join(feature.names) + ")"
    if isinstance(feature, datasets.List):
        return f"list[{feature.feature.dtype}]" + (f" of length {feature.length}" if feature.length > 0 else "")
    return feature.dtype


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def card_data(*, files: dict[str, list[str]], sizes: dict[str, tuple[int, int]], pretty_name: str, license: str,
              langs: list[str]) -> DatasetCardData:
    """files: config -> its parquet paths; sizes: config -> (rows, bytes)."""
    has_m2c = any(is_m2c(c) for c in files)
    data = DatasetCardData(
        pretty_name=pretty_name,
        license=license,
        language=langs,
        annotations_creators=["expert-generated", "machine-generated"],
        language_creators=["expert-generated", "machine-generated"],
        multilinguality="multilingual" if len(langs) > 1 else "monolingual",
        size_categories=[size_category(sum(n for n, _ in sizes.values()))],
        source_datasets=["extended"],
        task_categories=["text-classification"] + (["question-answering"] if has_m2c else []),
        task_ids=["acceptability-classification"],
        tags=["minimal-pairs", "conceptual-knowledge", "multilingual", "xcomps"] + (["m2c", "morphology"] if has_m2c else []),
        configs=[{"config_name": c, "data_files": [{"split": "test", "path": paths}]} for c, paths in sorted(files.items())],
    )
    infos = {
        c: datasets.DatasetInfo(
            config_name=c, features=features_for(c), dataset_size=sizes[c][1], download_size=sizes[c][1],
            splits=datasets.SplitDict({"test": datasets.SplitInfo("test", num_bytes=sizes[c][1], num_examples=sizes[c][0])}),
        )
        for c in sorted(files)
    }
    datasets.info.DatasetInfosDict(infos).to_dataset_card_data(data)
    return data


def render(*, data: DatasetCardData, version: str, parent: str | None, created_at: str, stats: ReleaseStats,
           languages: list[Language], changelog: list[dict], code_version: str) -> DatasetCard:
    """`languages`: the released languages' declarations, shown whole (the manifest holds the same)."""
    configs = sorted(stats.counts)
    pair_configs = [c for c in configs if not is_m2c(c)]
    names = {lang.code: lang for lang in languages}
    return DatasetCard.from_template(
        data,
        template_path=str(data_dir() / "release" / "card_template.md"),
        version=version,
        parent=parent,
        created_at=created_at,
        pair_configs=pair_configs,
        m2c_configs=[c for c in configs if is_m2c(c)],
        language_names=", ".join(f"{names[c].name} ({c})" for c in pair_configs),
        languages=languages,
        total_rows=stats.rows,
        pair_columns=[(k, _dtype(f), COLUMN_DOCS[k]) for k, f in PAIR_FEATURES.items()],
        m2c_columns=[(k, _dtype(f), COLUMN_DOCS[k]) for k, f in M2C_FEATURES.items()],
        negative_types=list(NEGATIVE_TYPES),
        pair_counts=[(c, stats.counts[c]) for c in pair_configs],
        m2c_counts=[(c, stats.counts[c]) for c in configs if is_m2c(c)],
        review=stats.review,
        overlap=stats.overlap,
        reviewed_share=stats.reviewed_share,
        corrected_share=stats.corrected_share,
        models=stats.models,
        citations=(data_dir() / "release" / "citations.bib").read_text(encoding="utf-8").strip(),
        changelog=changelog,
        code_version=code_version,
        fmt=_fmt,
    )
