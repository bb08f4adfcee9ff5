"""Write one version as a Hugging Face dataset folder: content-named parquet files per config under
`data/<config>/`, the dataset card, `croissant.json`, and the manifest `release.json` last."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from builder.paths import data_dir
from builder.records import Language
from builder.releases import card as card_mod
from builder.releases.croissant import croissant
from builder.releases.declarations import MANIFEST_FIELD, to_manifest
from builder.releases.stats import ReleaseStats
from builder.releases.store import MANIFEST, sha256
from builder.version import code_version


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def write_release(folder: Path, *, tables: dict[str, pa.Table], languages: list[Language], version: str, parent: str | None,
                  created_at: str, stats: ReleaseStats, changelog: list[dict], changes: dict, notes: str, pretty_name: str,
                  license: str) -> dict:
    """Write every file of the version into `folder`; returns the manifest (also written, last).

    `languages` are the released languages' declarations, written whole into the manifest and the card."""
    langs = [lang.code for lang in languages]
    files: dict[str, str] = {}
    paths: dict[str, list[str]] = {}
    sizes: dict[str, tuple[int, int]] = {}
    for name, table in sorted(tables.items()):
        data = parquet_bytes(table)
        digest = sha256(data)
        path = f"data/{name}/test-{digest[:16]}.parquet"
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
        files[path], paths[name], sizes[name] = digest, [path], (table.num_rows, len(data))
    data_card = card_mod.card_data(files=paths, sizes=sizes, pretty_name=pretty_name, license=license, langs=langs)
    code = code_version()
    readme = card_mod.render(data=data_card, version=version, parent=parent, created_at=created_at, stats=stats,
                             languages=languages, changelog=changelog, code_version=code).content
    citation = (data_dir() / "release" / "citations.bib").read_text(encoding="utf-8").strip()
    cr = croissant(name=pretty_name, version=version, license=license, created_at=created_at, langs=langs,
                   files=dict(files), stats=stats, citation=citation)
    for path, text in (("README.md", readme), ("croissant.json", json.dumps(cr, ensure_ascii=False, indent=1) + "\n")):
        raw = text.encode("utf-8")
        (folder / path).write_bytes(raw)
        files[path] = sha256(raw)
    manifest = {
        "version": version,
        "parent": parent,
        "created_at": created_at,
        "files": dict(sorted(files.items())),
        "configs": sorted(tables),
        MANIFEST_FIELD: to_manifest(languages),
        "counts": {name: table.num_rows for name, table in sorted(tables.items())},
        "by_type": stats.counts,
        "models": stats.models,
        "code_version": code,
        "changes": changes,
        "notes": notes,
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return manifest
