"""The workspace store on SQLite and on a real PostgreSQL server: a database URL belongs to the folder
that recorded it, never carries a password, and nothing else on the machine picks it up."""

import json

import pytest
from sqlalchemy import inspect, select, text
from together import at_once
from typer.testing import CliRunner

from builder.cli import app
from builder.llm.cache import LLMCache, Worker
from builder.paths import sample_dir
from builder.seeds import import_seeds
from builder.workspace import schema as t
from builder.workspace.store import SERVER_FILE, WorkspaceError, init_workspace, now, open_workspace

pytest_plugins = ["release_fixtures"]


@pytest.mark.postgresql
def test_a_database_url_belongs_to_the_folder_that_recorded_it(new_database, tmp_path):
    url = new_database()
    team = init_workspace(tmp_path / "team", database_url=url)
    import_seeds(team, sample_dir() / "seeds")
    team.close()
    assert json.loads((tmp_path / "team" / SERVER_FILE).read_text()) == {"database_url": url.replace("postgresql://", "postgresql+psycopg://")}
    assert not (tmp_path / "team" / "workspace.sqlite").exists()

    reopened = open_workspace(tmp_path / "team")
    assert reopened.engine.dialect.name == "postgresql" and reopened.count(t.concepts) > 100
    # A folder without the URL on the same machine is a workspace of its own, and so is an evaluation's cache.
    own = init_workspace(tmp_path / "own")
    assert own.engine.dialect.name == "sqlite" and own.count(t.concepts) == 0
    cache = LLMCache.open(tmp_path / "eval" / "llm-cache.sqlite")
    assert cache.engine.dialect.name == "sqlite" and (tmp_path / "eval" / "llm-cache.sqlite").is_file()
    # Another folder given the same URL (a second machine of the team) is the same workspace.
    colleague = init_workspace(tmp_path / "colleague", database_url=url)
    assert colleague.count(t.concepts) == reopened.count(t.concepts)
    assert colleague.identity == reopened.identity != own.identity
    for handle in (reopened, own, colleague):
        handle.close()
    cache.close()


def test_a_password_in_the_url_is_refused_and_never_written(tmp_path):
    secret = "s3cret-Pa55"
    for url in (f"postgresql://builder:{secret}@127.0.0.1:5432/xbench", f"postgresql://builder@127.0.0.1/xbench?password={secret}"):
        with pytest.raises(WorkspaceError, match="PGPASSWORD") as err:
            init_workspace(tmp_path / "ws", database_url=url)
        assert secret not in str(err.value)
        res = CliRunner().invoke(app, ["init", str(tmp_path / "ws"), "--database-url", url])
        assert res.exit_code == 1 and "PGPASSWORD" in res.output and secret not in res.output
    assert not (tmp_path / "ws" / SERVER_FILE).exists()
    with pytest.raises(WorkspaceError, match="must be PostgreSQL"):
        init_workspace(tmp_path / "ws", database_url="mysql://builder@127.0.0.1/xbench")


@pytest.mark.postgresql
def test_the_password_comes_from_the_environment(new_database, tmp_path, monkeypatch):
    url = new_database()
    runner = CliRunner()
    done = runner.invoke(app, ["init", str(tmp_path / "ws"), "--database-url", url])
    assert done.exit_code == 0 and "postgresql+psycopg://builder@127.0.0.1" in done.output, done.output
    monkeypatch.delenv("PGPASSWORD")
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    with pytest.raises(WorkspaceError, match="cannot reach the database of workspace") as err:
        open_workspace(tmp_path / "ws")
    assert "127.0.0.1" in str(err.value)
    res = runner.invoke(app, ["status", "-w", str(tmp_path / "ws")])
    assert res.exit_code == 1 and "cannot reach the database" in res.output


@pytest.mark.postgresql
def test_a_folder_keeps_its_database(new_database, tmp_path):
    init_workspace(tmp_path / "lite").close()
    with pytest.raises(WorkspaceError, match="holds a SQLite workspace"):
        init_workspace(tmp_path / "lite", database_url=new_database())
    init_workspace(tmp_path / "server", database_url=(url := new_database())).close()
    init_workspace(tmp_path / "server", database_url=url).close()  # idempotent
    with pytest.raises(WorkspaceError, match="already uses the database"):
        init_workspace(tmp_path / "server", database_url=new_database())


@pytest.mark.both_databases
def test_an_older_schema_is_migrated_on_open(ws):
    with ws.transaction() as conn:
        t.llm_claims.drop(conn)
        conn.execute(t.meta.delete().where(t.meta.c.key == "workspace_id"))  # made before workspaces had an identity
        conn.execute(t.meta.update().where(t.meta.c.key == "schema_version").values(value="4"))
    ws.close()
    again = open_workspace(ws.directory)
    assert again.rows(select(t.meta.c.value).where(t.meta.c.key == "schema_version")) == [{"value": str(t.SCHEMA_VERSION)}]
    assert LLMCache.of_workspace(again).claim("k", Worker.current(), 60)
    identity = again.identity
    again.close()
    assert len(identity) == 32 and open_workspace(ws.directory).identity == identity  # made once, by the migration


def test_each_workspace_has_an_identity_of_its_own_made_once(tmp_path):
    opened = [init_workspace(tmp_path / "a"), init_workspace(tmp_path / "a"), open_workspace(tmp_path / "a"),
              init_workspace(tmp_path / "b")]
    try:
        assert len({w.identity for w in opened[:3]}) == 1 and opened[3].identity != opened[0].identity
    finally:
        for w in opened:
            w.close()


@pytest.mark.parametrize("collecting", [True, False])
def test_rows_come_back_as_dicts_and_the_collector_as_it_was(ws, collecting):
    import gc

    was = gc.isenabled()
    (gc.enable if collecting else gc.disable)()
    try:
        rows = ws.rows(select(t.languages.c.code.label("lang"), t.languages.c.code).where(t.languages.c.code == "xx"))
        assert rows == [] and gc.isenabled() is collecting
        with ws.transaction() as c:
            c.execute(t.languages.insert().values(code="xx", data={"code": "xx", "name": "X"}, added_at=now()))
        assert ws.rows(select(t.languages.c.code.label("lang"), t.languages.c.data).where(t.languages.c.code == "xx")) == [
            {"lang": "xx", "data": {"code": "xx", "name": "X"}}]
        assert gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.both_databases
def test_writers_replacing_one_row_at_once_all_succeed_and_one_row_stays(demo_ws):
    """A language declared, a waiver given and a review project remembered by eight processes at the same moment (the
    writes that replace a row): none fails on the row's key, one whole row stays, one writer's."""
    from builder.releases.waivers import list_waivers, waive
    from builder.reviews import ReviewProject, remember_project, review_projects

    pair = demo_ws.rows(select(t.sentence_pairs.c.pair_id, t.sentence_pairs.c.lang).limit(1))[0]
    writes = {
        "language": lambda n: demo_ws.add_language({"code": "xx", "name": f"Language {n}"}),
        "waiver": lambda n: waive(demo_ws, "pair", pair["pair_id"], pair["lang"], reason=f"reason {n}", by=f"curator {n}"),
        "project": lambda n: remember_project(demo_ws, ReviewProject(stage="translation", lang="xx", project_id=n,
                                                                     title=f"project {n}", server=f"local:{n}")),
    }
    workers = 8
    failures = [exc for write in writes.values() for exc in at_once(workers, write)]
    assert not failures, failures[:3]
    [language] = [d for d in demo_ws.added_languages() if d["code"] == "xx"]
    [waiver] = [w for w in list_waivers(demo_ws) if w["item_id"] == pair["pair_id"]]
    [project] = [p for p in review_projects(demo_ws) if p.lang == "xx"]
    assert language in [{"code": "xx", "name": f"Language {n}"} for n in range(workers)]
    assert (waiver["reason"], waiver["waived_by"]) in [(f"reason {n}", f"curator {n}") for n in range(workers)]
    assert (project.title, project.server) == (f"project {project.project_id}", f"local:{project.project_id}")


@pytest.mark.both_databases
def test_workers_opening_an_older_workspace_at_once_migrate_it_once_and_all_open_it(ws):
    """Six workers of a newer builder start together on a workspace of schema 7 (no index on sentence pairs' language,
    no llm_calls.max_tokens): one migrates it, the others wait and find it done; none fails on a column or an index."""
    with ws.transaction() as conn:
        conn.execute(text("DROP INDEX ix_sentence_pairs_lang"))
        conn.execute(text("ALTER TABLE llm_calls DROP COLUMN max_tokens"))
        conn.execute(t.meta.update().where(t.meta.c.key == "schema_version").values(value="7"))
    opened = []
    assert not at_once(6, lambda n: opened.append(open_workspace(ws.directory)))
    try:
        assert len(opened) == 6
        assert ws.rows(select(t.meta.c.value).where(t.meta.c.key == "schema_version")) == [{"value": str(t.SCHEMA_VERSION)}]
        found = inspect(ws.engine)
        assert "max_tokens" in {c["name"] for c in found.get_columns("llm_calls")}
        assert "ix_sentence_pairs_lang" in {i["name"] for i in found.get_indexes("sentence_pairs")}
    finally:
        for handle in opened:
            handle.close()


def test_evaluations_opening_one_new_llm_cache_file_at_once_all_open_it(tmp_path):
    """Runs with an endpoint sharing a results folder open its cache file (`OUT/llm-cache.sqlite`) together, new."""
    opened = []
    assert not at_once(6, lambda n: opened.append(LLMCache.open(tmp_path / "out" / "llm-cache.sqlite")))
    for cache in opened:
        assert cache.endpoints() == []
        cache.close()
