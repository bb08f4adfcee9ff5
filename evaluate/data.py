"""What an evaluation reads from a released version, never from the workspace: its pairs, its M2C tests,
and its languages as the release declares them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from builder import releases
from builder.errors import BuilderError
from builder.records import NEGATIVE_TYPES
from builder.releases.declarations import config_language, from_manifest
from builder.releases.features import is_m2c
from evaluate.results import DatasetInfo

PAIR_COLUMNS = ("pair_id", "lang", "property_id", "property", "acceptable_concept", "unacceptable_concept",
                "negative_type", "acceptable_sentence", "unacceptable_sentence")


class PairsError(BuilderError, ValueError):
    pass


def check_pairs(df: pd.DataFrame, where: str) -> pd.DataFrame:
    """The columns evaluation reads, present and filled; negative types among the four known ones."""
    missing = [c for c in PAIR_COLUMNS if c not in df.columns]
    if missing:
        raise PairsError(f"{where}: missing column(s) {', '.join(missing)}")
    for col in PAIR_COLUMNS:
        bad = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise PairsError(f"{where}: row {row} (pair {df['pair_id'].iloc[row]}): empty {col}")
    odd = ~df["negative_type"].isin(NEGATIVE_TYPES)
    if odd.any():
        row = int(odd.to_numpy().nonzero()[0][0])
        raise PairsError(f"{where}: row {row}: negative_type {df['negative_type'].iloc[row]!r} is not one of {', '.join(NEGATIVE_TYPES)}")
    dup = df.duplicated(["lang", "pair_id"])
    if dup.any():
        row = int(dup.to_numpy().nonzero()[0][0])
        raise PairsError(f"{where}: row {row}: pair {df['pair_id'].iloc[row]} appears twice in {df['lang'].iloc[row]}")
    return df.reset_index(drop=True)


def manifest_sha256(manifest: dict) -> str:
    """Digest of the manifest's canonical JSON (it lists every data file's sha256)."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def dataset_info(source: str | Path, version: str, configs: list[str]) -> DatasetInfo:
    """The record results keep of the release: its version and manifest digest, the configs read, and the
    declarations of their languages."""
    manifest = releases.manifest(source, version)
    declared = from_manifest(manifest)
    codes = {config_language(c) for c in configs}
    return DatasetInfo(source=str(source), version=str(manifest.get("version", version)),
                       manifest_sha256=manifest_sha256(manifest), configs=list(configs),
                       release_code_version=manifest.get("code_version"),
                       languages=[lang for lang in declared.languages if lang.code in codes], languages_note=declared.note)


def load_release_pairs(source: str | Path, version: str, langs: list[str] | None = None) -> tuple[pd.DataFrame, DatasetInfo]:
    """Every requested language's pairs of exactly that version (all minimal-pair configs when `langs` is None)."""
    manifest = releases.manifest(source, version)
    available = [c for c in releases.configs(source, version) if not is_m2c(c)]
    chosen = available if not langs else langs
    unknown = [c for c in chosen if c not in available]
    if unknown:
        raise PairsError(f"release {source} {version}: no config(s) {', '.join(unknown)}; it has {', '.join(available)}")
    frames = []
    for config in chosen:
        ds = releases.load(source, version, config)
        df = ds.to_pandas()
        feature = ds.features.get("negative_type")
        if hasattr(feature, "int2str") and pd.api.types.is_integer_dtype(df["negative_type"]):
            df["negative_type"] = [feature.int2str(int(v)) for v in df["negative_type"]]
        frames.append(check_pairs(df, f"release {source} {manifest.get('version', version)} config {config}"))
    return pd.concat(frames, ignore_index=True), dataset_info(source, version, list(chosen))


M2C_COLUMNS = ("test_id", "lang", "capability", "template_id", "context", "question", "answer", "alternatives", "answer_forms")


def load_release_m2c(source: str | Path, version: str, langs: list[str] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """The M2C tests (configs m2c_<lang>) of exactly that version for `langs` (all when None), and their configs."""
    available = [c for c in releases.configs(source, version) if is_m2c(c)]
    chosen = [c for c in available if langs is None or config_language(c) in langs]
    if not chosen:
        raise PairsError(f"release {source} {version}: no M2C tests{' for ' + ', '.join(langs) if langs else ''} "
                         f"(configs m2c_<lang>: {', '.join(available) or 'none'})")
    frames = []
    for config in chosen:
        df = releases.load(source, version, config).to_pandas()
        missing = [c for c in M2C_COLUMNS if c not in df.columns]
        if missing:
            raise PairsError(f"release {source} {version} config {config}: missing column(s) {', '.join(missing)}")
        frames.append(df[list(M2C_COLUMNS)])
    return pd.concat(frames, ignore_index=True), chosen


def sample_rows(rows: pd.DataFrame, n: int | None, seed: int, key: str, by: list[str]) -> pd.DataFrame:
    """At most `n` rows of each group of `by` (every row when `n` is None), in their order: those whose sha256 of the
    seed and `key` ranks lowest. The same rows on every run and machine, and a larger `n` keeps a smaller one's rows,
    so a sample's results are a part of the whole run's."""
    if n is None or rows.empty:
        return rows
    rank = rows[key].map(lambda k: int.from_bytes(hashlib.sha256(f"{seed}|{k}".encode()).digest()[:7], "big"))
    kept = rank.groupby([rows[c] for c in by]).rank(method="first") <= n
    return rows[kept.to_numpy()]


@dataclass
class ReleaseData:
    """Everything an evaluation run reads from one release."""

    pairs: pd.DataFrame
    dataset: DatasetInfo  # configs read (pairs and M2C) and their languages' declarations
    m2c: pd.DataFrame | None = None  # the M2C tests, when asked for


def load_release(source: str | Path, version: str, langs: list[str] | None = None, *, m2c: bool = False) -> ReleaseData:
    """The pairs of `langs` (all when None) of exactly that version and, with `m2c`, their M2C tests."""
    pairs, info = load_release_pairs(source, version, langs)
    if not m2c:
        return ReleaseData(pairs, info)
    tests, m2c_configs = load_release_m2c(source, version, langs)
    return ReleaseData(pairs, dataset_info(source, version, info.configs + m2c_configs), tests)
