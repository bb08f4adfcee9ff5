"""Shared fixtures: a workspace with the bundled sample, and the OpenAI-compatible stand-in server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from annotation import server as ls_server
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient
from builder.llm.config import LLMSettings
from builder.llm.standin import Faults, Lexicon, StandinServer
from builder.paths import sample_dir
from builder.seeds import import_seeds
from builder.workspace.store import init_workspace

for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "BUILDER_WORKSPACE", "BUILDER_DATABASE_URL", "BUILDER_LLM_MODEL",
            "LABEL_STUDIO_URL", "LABEL_STUDIO_API_KEY"):
    os.environ.pop(var, None)


@pytest.fixture
def ws(tmp_path: Path):
    w = init_workspace(tmp_path / "ws")
    yield w
    w.close()


@pytest.fixture
def sample_ws(ws):
    import_seeds(ws, sample_dir() / "seeds")
    return ws


@pytest.fixture
def server():
    """A stand-in server; tests set `.faults`, `.latency_s` or `.lexicon` as they need."""
    with StandinServer(Lexicon(), faults=Faults()) as srv:
        yield srv


def settings_for(server: StandinServer, **kw) -> LLMSettings:
    base = dict(base_url=server.base_url, api_key="test-key", model="standin-translator", mode="api",
                timeout_s=60.0, backoff_base_s=0.01, backoff_max_s=0.2, concurrency=8)
    base.update(kw)
    return LLMSettings(**base)


@pytest.fixture
def make_client(server):
    clients = []

    def make(ws, **kw) -> LLMClient:
        c = LLMClient(LLMCache.of_workspace(ws), settings_for(server, **kw))
        clients.append(c)
        return c

    return make


@pytest.fixture(scope="module")
def label_studio(tmp_path_factory):
    """A real Label Studio for one test module (a module that restarts it keeps its own, with the folder)."""
    ws_dir = tmp_path_factory.mktemp("ls")
    conn = ls_server.serve(ws_dir, log=lambda *a: None)
    yield conn
    ls_server.stop(ws_dir)
