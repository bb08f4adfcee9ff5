"""Reading releases by version: the loader evaluation uses, from a local store or the Hub.

A version is read from its files as published (a local store's git tag, or the Hub's tag), each
checked against the sha256 its manifest records, and turned into a `datasets.Dataset` in memory, so
the `datasets` cache, which keys local folders by name rather than content, can never hand back
another version's rows, and a file changed after publishing is refused wherever it is read from.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
from datasets.table import InMemoryTable

from builder.releases import versions as V
from builder.releases.declarations import ReleaseLanguages, from_manifest
from builder.releases.store import MANIFEST, ReleaseStore, ReleaseStoreError, sha256

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+", re.ASCII)  # fullmatch: no trailing newline


class ReleaseNotFound(ReleaseStoreError):
    pass


class _Source(ABC):
    """What a local store and the Hub share: a config's files, checked against the manifest, as a table or a dataset."""

    name: str

    @abstractmethod
    def resolve(self, version: str) -> str: ...

    @abstractmethod
    def manifest(self, version: str) -> dict: ...

    @abstractmethod
    def _read(self, version: str, paths: list[str]) -> dict[str, bytes]:
        """path -> contents, as published in `version`."""

    def config_files(self, version: str, config: str) -> dict[str, bytes]:
        """path -> contents of one config's data files, each matching the sha256 in the version's manifest."""
        v = self.resolve(version)
        man = self.manifest(v)
        if config not in man["configs"]:
            raise ReleaseNotFound(f"version {v} of {self.name} has no config {config!r}; configs: {', '.join(man['configs'])}")
        paths = sorted(p for p in man["files"] if p.startswith(f"data/{config}/"))
        blobs = self._read(v, paths)
        for p in paths:
            if sha256(blobs[p]) != man["files"][p]:
                raise ReleaseStoreError(f"{p} in version {v} of {self.name} does not match its checksum in {MANIFEST}")
        return blobs

    def read_table(self, version: str, config: str) -> pa.Table:
        blobs = self.config_files(version, config)
        return pa.concat_tables([pq.read_table(pa.BufferReader(blobs[p])) for p in sorted(blobs)])

    def load(self, version: str, config: str) -> datasets.Dataset:
        table = self.read_table(version, config)
        info = datasets.DatasetInfo(features=datasets.Features.from_arrow_schema(table.schema), config_name=config,
                                    version=self.resolve(version))
        return datasets.Dataset(InMemoryTable(table), info=info, split=datasets.Split.TEST)


class LocalSource(_Source):
    def __init__(self, root: Path) -> None:
        self.store = ReleaseStore(root)
        self.store.require()
        self.name = str(self.store.root)

    def versions(self) -> list[str]:
        return self.store.versions()

    def resolve(self, version: str) -> str:
        return self.store.resolve(version)

    def manifest(self, version: str) -> dict:
        v = self.resolve(version)
        return json.loads(self.store.read(v, [MANIFEST])[MANIFEST])

    def _read(self, version: str, paths: list[str]) -> dict[str, bytes]:
        return self.store.read(version, paths)


class HubSource(_Source):
    """A dataset repository on the Hub whose tags are the versions (needs the network; `api` is an `HfApi`)."""

    def __init__(self, repo_id: str, api=None) -> None:
        self.name = self.repo_id = repo_id
        self._api = api

    @property
    def api(self):
        if self._api is None:
            from huggingface_hub import HfApi

            self._api = HfApi()
        return self._api

    def versions(self) -> list[str]:
        try:
            refs = self.api.list_repo_refs(self.repo_id, repo_type="dataset")
        except Exception as exc:  # noqa: BLE001 - offline, unknown repository, no access: one clear message
            raise ReleaseNotFound(f"{self.repo_id} is not a local release store, and the Hub dataset of that name "
                                  f"could not be read ({type(exc).__name__})") from None
        return V.ordered([v for v in (V.from_tag(t.name) for t in refs.tags) if v])

    def resolve(self, version: str) -> str:
        if version != "latest":
            V.parse(version)
            return version
        published = self.versions()
        if not published:
            raise ReleaseNotFound(f"{self.repo_id} has no release tag")
        return published[-1]

    def manifest(self, version: str) -> dict:
        return json.loads(self._read(self.resolve(version), [MANIFEST])[MANIFEST])

    def _read(self, version: str, paths: list[str]) -> dict[str, bytes]:
        """The files at the version's tag, through the Hub's download cache."""
        return {p: Path(self.api.hf_hub_download(self.repo_id, p, repo_type="dataset", revision=V.tag(version))).read_bytes()
                for p in paths}


def open_source(source: str | Path) -> LocalSource | HubSource:
    """A local store (an existing folder) or, given as a string, a Hub id `ORG/NAME`."""
    path = Path(source)
    if path.exists():
        return LocalSource(path)
    if isinstance(source, str) and _HUB_ID.fullmatch(source):
        return HubSource(source)
    raise ReleaseNotFound(f"no release store at {source} (a local folder, or a Hub dataset id ORG/NAME)")


def load(source: str | Path, version: str, config: str) -> datasets.Dataset:
    """Exactly that version's rows of one config (split "test"), whatever the `datasets` cache holds."""
    return open_source(source).load(version, config)


def manifest(source: str | Path, version: str) -> dict:
    return open_source(source).manifest(version)


def configs(source: str | Path, version: str) -> list[str]:
    return list(manifest(source, version)["configs"])


def languages(source: str | Path, version: str) -> ReleaseLanguages:
    """Each language's declaration (name, typology, script, prompts, ...) as the version was published with it."""
    return from_manifest(manifest(source, version))
