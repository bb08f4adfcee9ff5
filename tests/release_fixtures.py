"""Fixtures for release tests: a demo workspace built once by the real stages, copied per test.

The session template runs `builder demo` (translation and generation replayed from the bundled
recording, proposals accepted by `builder.verify.accept`), so every row a release holds comes from
the same stages a maintainer runs.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import datasets
import pytest
from rich.console import Console
from sqlalchemy import select

from builder.demo import run_demo
from builder.generate import generate
from builder.languages import registry
from builder.llm.client import LLMClient
from builder.llm.config import LLMSettings
from builder.paths import sample_dir
from builder.records import normalise
from builder.selection import Scope
from builder.workspace import schema as t
from builder.workspace.store import open_workspace

from conftest import settings_for


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("demo") / "ws"
    run_demo(directory, Console(quiet=True), LLMSettings.from_env())
    return directory


@pytest.fixture
def demo_ws(demo_template, tmp_path):
    directory = tmp_path / "ws"
    shutil.copytree(demo_template, directory)
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


def demo_properties() -> set[str]:
    return {normalise(p) for p in (sample_dir() / "demo" / "properties.txt").read_text().splitlines() if p.strip()}


def property_outside_demo(ws) -> str:
    """A property whose pairs the demo did not generate."""
    inside = demo_properties()
    return sorted(r["id"] for r in ws.rows(select(t.properties)) if normalise(r["english"]) not in inside)[0]


def generate_with_standin(ws, server, lang: str, property_ids: set[str]) -> None:
    """Stage 4 for more pairs, answered by the OpenAI-compatible stand-in server."""
    client = LLMClient(ws, settings_for(server))

    async def go():
        try:
            return await generate(ws, client, [registry(ws)[lang]], scope=Scope(frozenset(property_ids)))
        finally:
            await client.aclose()

    return asyncio.run(go())
