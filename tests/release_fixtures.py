"""Fixtures for release tests: a demo workspace built once by the real stages, copied per test.

The session template runs `builder demo` (translation and generation replayed from the bundled
recording, proposals accepted by `builder.reviews.accept`), so every row a release holds comes from
the same stages a maintainer runs. On PostgreSQL the template is a database that each test copies.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import datasets
import pytest
from sample_workspace import build_sample_workspace

from builder.workspace.store import init_workspace, open_workspace


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("demo") / "ws"
    build_sample_workspace(directory)
    return directory


@pytest.fixture(scope="session")
def demo_template_postgresql(tmp_path_factory, postgres) -> str:
    """The demo workspace's database on the session's PostgreSQL server (its name)."""
    directory = tmp_path_factory.mktemp("demo-pg") / "ws"
    url = postgres.database()
    init_workspace(directory, database_url=url).close()
    build_sample_workspace(directory)
    return url.rsplit("/", 1)[1]


@pytest.fixture
def demo_ws(database, request, tmp_path):
    directory = tmp_path / "ws"
    if database == "postgresql":
        copy = request.getfixturevalue("new_database")(request.getfixturevalue("demo_template_postgresql"))
        ws = init_workspace(directory, database_url=copy)
    else:
        shutil.copytree(request.getfixturevalue("demo_template"), directory)
        ws = open_workspace(directory)
    yield ws
    ws.close()


@pytest.fixture(autouse=True)
def offline_datasets(tmp_path, monkeypatch):
    """No network, and a `datasets` cache of this test's own."""
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
