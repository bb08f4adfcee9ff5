"""Checksums: every file of every version (from git) and the checked-out latest version (the folder
people load directly) must match the sha256 its manifest records.

A checkout that a killed publish cut short (the store records when one finished) is first finished, under
the publisher's lock, so that what is reported is a file changed since, never the kill."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from builder.releases.store import MANIFEST, ReleaseStore, ReleaseStoreError, sha256


class VerifyReport(BaseModel):
    versions: list[str]
    files: int
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def _compare(where: str, manifest: dict, contents: dict[str, bytes | None]) -> list[str]:
    problems = []
    for path, digest in sorted(manifest["files"].items()):
        data = contents.get(path)
        if data is None:
            problems.append(f"{where}: {path} is missing")
        elif sha256(data) != digest:
            problems.append(f"{where}: {path} does not match its checksum (sha256 {sha256(data)[:16]}…, "
                            f"manifest {digest[:16]}…)")
    for path in sorted(set(contents) - set(manifest["files"]) - {MANIFEST}):
        problems.append(f"{where}: {path} is not listed in {MANIFEST}")
    return problems


def verify(root: Path | str, version: str | None = None) -> VerifyReport:
    store = ReleaseStore(root)
    store.require()
    chosen = [store.resolve(version)] if version else store.versions()
    problems, n = [], 0
    for v in chosen:
        files = store.files(v)
        if MANIFEST not in files:
            problems.append(f"version {v}: {MANIFEST} is missing")
            continue
        contents = store.read(v, sorted(files))
        manifest = json.loads(contents[MANIFEST])
        if manifest.get("version") != v:
            problems.append(f"version {v}: {MANIFEST} names version {manifest.get('version')!r}")
        problems += _compare(f"version {v}", manifest, contents)
        n += len(files)
    latest = store.latest()
    if latest and (version is None or store.resolve(version) == latest) and store.checkout_pending():
        try:
            with store.lock():  # repairs the store
                pass
        except (OSError, ReleaseStoreError) as exc:
            problems.append(f"working tree: the checkout of version {latest} was cut short by a killed publish and "
                            f"could not be finished here ({exc}); the next publish finishes it")
            return VerifyReport(versions=chosen, files=n, problems=problems)
    if latest and (version is None or store.resolve(version) == latest):
        recorded = store.read(latest, [MANIFEST])[MANIFEST]
        tree = {str(p.relative_to(store.root)): p.read_bytes() for p in store.root.rglob("*")
                if p.is_file() and ".git" not in p.relative_to(store.root).parts}
        if tree.get(MANIFEST) != recorded:
            problems.append(f"working tree: {MANIFEST} differs from version {latest}'s")
        problems += _compare("working tree", json.loads(recorded), tree)
        n += len(tree)
    return VerifyReport(versions=chosen, files=n, problems=problems)
