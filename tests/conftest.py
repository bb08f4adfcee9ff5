"""Shared fixtures: a workspace with the bundled sample, the OpenAI-compatible stand-in server, a
PostgreSQL server for the tests marked `both_databases`, which run once on SQLite and once on it, and
each test's own default score store (`BUILDER_SCORE_STORE`), so that no test reads or fills the user's."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from postgres import PostgresServer, PostgresUnavailable
from slurm import SlurmCluster, SlurmUnavailable

from annotation import server as ls_server
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient
from builder.llm.config import LLMSettings
from builder.paths import sample_dir
from builder.seeds import import_seeds
from builder.testing.standin import Faults, Lexicon, StandinServer
from builder.workspace.store import init_workspace
from evaluate.store import ENV as SCORE_STORE

# Session fixtures shared by the evaluation tests: one release, one toy, one evaluation for the whole run.
pytest_plugins = ["eval_fixtures", "generative_fixtures"]

for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "BUILDER_WORKSPACE", "BUILDER_LLM_MODEL", "LABEL_STUDIO_URL",
            "LABEL_STUDIO_API_KEY", "PGPASSWORD", "PGPASSFILE"):
    os.environ.pop(var, None)

DATABASES = ("sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql))


def pytest_generate_tests(metafunc):
    """A test marked `both_databases` whose workspace comes from the `database` fixture runs on each."""
    if metafunc.definition.get_closest_marker("both_databases") and "database" in metafunc.fixturenames:
        metafunc.parametrize("database", DATABASES, indirect=True)


def started(start, unavailable: type[Exception], what: str, required: str):
    """`start()`'s server, or the test skipped where `unavailable` says it cannot run here, unless the variable
    `required` says `required` (CI sets it), where that fails the test."""
    try:
        return start()
    except unavailable as exc:
        if os.environ.get(required) == "required":
            raise
        pytest.skip(f"{what} tests: {exc}")


@pytest.fixture(scope="session", autouse=True)
def session_score_store(tmp_path_factory):
    """The score store of session and module fixtures that evaluate (`eval run`'s default), never the user's cache."""
    os.environ[SCORE_STORE] = str(tmp_path_factory.mktemp("score-store") / "scores.sqlite")
    yield
    os.environ.pop(SCORE_STORE, None)


@pytest.fixture(autouse=True)
def score_store(tmp_path_factory, monkeypatch) -> Path:
    """Each test's own default score store (made on first use): what one test scored is never another's."""
    path = tmp_path_factory.mktemp("score-store") / "scores.sqlite"
    monkeypatch.setenv(SCORE_STORE, str(path))
    return path


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server for the session, its password in `PGPASSWORD` as a user would give it.

    Skipped where PostgreSQL or psycopg is missing, unless BUILDER_TEST_POSTGRESQL=required (CI sets it).
    """
    server = started(PostgresServer.start, PostgresUnavailable, "PostgreSQL", "BUILDER_TEST_POSTGRESQL")
    os.environ["PGPASSWORD"] = server.password
    yield server
    os.environ.pop("PGPASSWORD", None)
    server.stop()


@pytest.fixture(scope="session")
def slurm():
    """A single-node Slurm for the session (slurmctld, slurmd, munged), `SLURM_CONF` set as on a login node.

    Skipped where Slurm or munge is missing, unless BUILDER_TEST_SLURM=required (CI sets it); a cluster that
    does not come up fails with its daemons' log tails.
    """
    cluster = started(SlurmCluster.start, SlurmUnavailable, "Slurm", "BUILDER_TEST_SLURM")
    os.environ.update(cluster.env)
    yield cluster
    for var in cluster.env:
        os.environ.pop(var, None)
    cluster.stop()


@pytest.fixture
def new_database(postgres):
    """Make PostgreSQL databases for one test (`new_database()`, or a copy of a template's); dropped after it."""
    made: list[str] = []

    def make(template: str | None = None) -> str:
        made.append(postgres.database(template))
        return made[-1]

    yield make
    for url in made:
        postgres.drop(url)


@pytest.fixture
def database(request) -> str:
    """The database the test's workspace is on: each in turn for a test marked `both_databases`, else
    SQLite (or `BUILDER_TEST_DATABASE=postgresql`, to run every such test on PostgreSQL)."""
    return getattr(request, "param", os.environ.get("BUILDER_TEST_DATABASE", "sqlite"))


@pytest.fixture
def ws(tmp_path: Path, database, request):
    url = request.getfixturevalue("new_database")() if database == "postgresql" else None
    w = init_workspace(tmp_path / "ws", database_url=url)
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
    base = dict(base_url=server.base_url, api_key="test-key", model="standin-translator", source="api",
                timeout_s=60.0, backoff_base_s=0.01, backoff_max_s=0.2, concurrency=8)
    base.update(kw)
    return LLMSettings(**base)


def with_llm(ws, server: StandinServer, work):
    """`await work(client)` with a client of the stand-in on the workspace's cache, closed after: one stage run."""
    client = LLMClient(LLMCache.of_workspace(ws), settings_for(server))

    async def go():
        try:
            return await work(client)
        finally:
            await client.aclose()

    return asyncio.run(go())


@pytest.fixture
def make_client(server):
    clients = []

    def make(ws, **kw) -> LLMClient:
        c = LLMClient(LLMCache.of_workspace(ws), settings_for(server, **kw))
        clients.append(c)
        return c

    return make


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """llama.cpp's OpenAI-compatible server serving SmolLM2-135M (installed by `make llama-cpp`), on a free port."""
    from builder.llm.llamacpp import LlamaServer

    with LlamaServer(log_path=tmp_path_factory.mktemp("llama") / "server.log") as srv:
        yield srv


@pytest.fixture(scope="module")
def label_studio(tmp_path_factory):
    """A real Label Studio for one test module (a module that restarts it keeps its own, with the folder)."""
    ws_dir = tmp_path_factory.mktemp("ls")
    conn = ls_server.serve(ws_dir, log=lambda *a: None)
    yield conn
    ls_server.stop(ws_dir)
