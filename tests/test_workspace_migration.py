"""A workspace made by an earlier builder opens in this one: its schema is brought up to date in place,
and review rows keyed by a Label Studio URL wait, intact, for the server that holds them."""

import sqlite3
from datetime import datetime, timedelta

import pytest
from sqlalchemy import inspect, select

from builder import reviews
from builder.flags import list_flags, record_given_up
from builder.workspace import schema as t
from builder.workspace.store import DB_FILE, WorkspaceError, init_workspace, open_workspace

# The review tables as schema version 3 created them (SQLAlchemy's DDL for SQLite at that version).
V3_REVIEW_TABLES = """
CREATE TABLE review_projects (
    stage VARCHAR(16) NOT NULL, lang VARCHAR(8) NOT NULL, project_id INTEGER NOT NULL, title TEXT NOT NULL,
    url TEXT NOT NULL, PRIMARY KEY (stage, lang));
CREATE TABLE review_annotations (
    annotation_id INTEGER NOT NULL, url TEXT NOT NULL, stage VARCHAR(16) NOT NULL, lang VARCHAR(8) NOT NULL,
    item_id VARCHAR(32) NOT NULL, proposal_id INTEGER, task_id INTEGER NOT NULL, decision VARCHAR(16), final_text TEXT,
    comment TEXT NOT NULL, reviewer TEXT NOT NULL, cancelled BOOLEAN NOT NULL, lead_time_s FLOAT, edit_distance INTEGER,
    created_at DATETIME NOT NULL, updated_at DATETIME NOT NULL, PRIMARY KEY (annotation_id, url),
    FOREIGN KEY(proposal_id) REFERENCES proposals (id));
CREATE INDEX ix_review_annotations_item_id ON review_annotations (item_id);
CREATE TABLE sentence_reviews (
    annotation_id INTEGER NOT NULL, url TEXT NOT NULL, pair_id VARCHAR(32) NOT NULL, lang VARCHAR(8) NOT NULL,
    version VARCHAR(16) NOT NULL, acceptable TEXT NOT NULL, unacceptable TEXT NOT NULL, PRIMARY KEY (annotation_id, url),
    FOREIGN KEY(pair_id) REFERENCES pairs (id));
CREATE INDEX ix_sentence_reviews_pair_id ON sentence_reviews (pair_id);
"""
BEFORE, AFTER = "http://127.0.0.1:41001", "http://127.0.0.1:41002"  # one server, before and after a restart
T0 = datetime(2026, 1, 5, 9, 0)


def _annotation(aid, url, item, minutes, decision="accept"):
    at = (T0 + timedelta(minutes=minutes)).isoformat(sep=" ")
    return (aid, url, "sentences", "de", item, None, 100 + aid, decision, "a\nb", "", "ana", 0, 2.0, 0, T0.isoformat(sep=" "), at)


def _schema_3_workspace(directory, pair_id):
    """A workspace as version 3 left it after a restart of its Label Studio: the project remembered under
    the new URL, annotation 1 recorded under both URLs (revised after the restart), annotation 2 only before."""
    init_workspace(directory).close()
    db = sqlite3.connect(directory / DB_FILE)
    with db:
        db.executescript("DROP TABLE review_projects; DROP TABLE review_annotations; DROP TABLE sentence_reviews;"
                         "DROP INDEX ix_sentence_pairs_lang;" + V3_REVIEW_TABLES)  # the per-language index came in version 8
        db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
        db.execute("INSERT INTO review_projects VALUES ('sentences', 'de', 7, '[sentences:de] German review', ?)", (AFTER,))
        db.executemany("INSERT INTO review_annotations VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [
            _annotation(1, BEFORE, pair_id, 0), _annotation(2, BEFORE, pair_id, 1, "reject"),
            _annotation(1, AFTER, pair_id, 5, "fix")])
        db.executemany("INSERT INTO sentence_reviews VALUES (?,?,?,?,?,?,?)", [
            (1, BEFORE, pair_id, "de", "v1", "a", "b"), (2, BEFORE, pair_id, "de", "v1", "a", "b"),
            (1, AFTER, pair_id, "de", "v1", "a", "fixed b")])
    db.close()


@pytest.mark.parametrize("opening", [open_workspace, init_workspace])
def test_a_schema_3_workspace_is_migrated_in_place_and_its_rows_wait_for_their_server(sample_ws, tmp_path, opening):
    pair_id = sample_ws.rows(select(t.pairs.c.id).order_by(t.pairs.c.id).limit(1))[0]["id"]
    directory = tmp_path / "old"
    _schema_3_workspace(directory, pair_id)
    ws = opening(directory)
    assert ws.rows(select(t.meta.c.value).where(t.meta.c.key == "schema_version"))[0]["value"] == str(t.SCHEMA_VERSION)
    for table in ("review_projects", "review_annotations", "sentence_reviews"):
        columns = {c["name"] for c in inspect(ws.engine).get_columns(table)}
        assert "server" in columns and "url" not in columns, table
    indexes = {(i["name"], tuple(i["column_names"])) for name in ("review_annotations", "sentence_pairs")
               for i in inspect(ws.engine).get_indexes(name)}
    assert {("ix_review_annotations_lang_stage", ("lang", "stage")), ("ix_sentence_pairs_lang", ("lang",))} <= indexes
    keys = sorted((r["annotation_id"], r["server"]) for r in ws.rows(select(t.review_annotations)))
    assert keys == [(1, f"url:{BEFORE}"), (1, f"url:{AFTER}"), (2, f"url:{BEFORE}")]
    old = {r.server: r for r in reviews.recorded_by_url(ws)}
    assert set(old) == {f"url:{BEFORE}", f"url:{AFTER}"}
    assert [p.project_id for p in old[f"url:{AFTER}"].projects] == [7] and old[f"url:{BEFORE}"].projects == []
    assert old[f"url:{BEFORE}"].annotation == (2, 102)  # the latest annotation recorded under that URL, on its task
    ws.close()
    ws = open_workspace(directory)  # opening again changes nothing
    assert sorted(r["server"] for r in ws.rows(select(t.review_annotations))) == \
        [f"url:{BEFORE}", f"url:{BEFORE}", f"url:{AFTER}"]

    # The server that holds them gives them its identity; an annotation held twice stays once, as revised last.
    server = "local:feedc0de"
    for url in (BEFORE, AFTER):
        reviews.adopt_server(ws, f"url:{url}", server)
    rows = {r["annotation_id"]: r for r in ws.rows(select(t.review_annotations))}
    assert {(aid, r["server"], r["decision"]) for aid, r in rows.items()} == {(1, server, "fix"), (2, server, "reject")}
    assert {(r["annotation_id"], r["unacceptable"]) for r in ws.rows(select(t.sentence_reviews))} == {(1, "fixed b"), (2, "b")}
    assert [(p.project_id, p.server) for p in reviews.review_projects(ws)] == [(7, server)]
    assert reviews.recorded_by_url(ws) == []
    ws.close()


def test_a_workspace_newer_than_this_builder_is_refused(tmp_path):
    init_workspace(tmp_path / "ws").close()
    db = sqlite3.connect(tmp_path / "ws" / DB_FILE)
    with db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(t.SCHEMA_VERSION + 1),))
    db.close()
    with pytest.raises(WorkspaceError, match="newer than this builder"):
        open_workspace(tmp_path / "ws")
    with pytest.raises(WorkspaceError, match="newer than this builder"):
        init_workspace(tmp_path / "ws")


def test_a_flag_from_before_flags_were_counted_counts_as_given_up_once(tmp_path):
    directory = tmp_path / "old"
    init_workspace(directory).close()
    db = sqlite3.connect(directory / DB_FILE)
    with db:  # the flags table as schema version 8 created it
        db.executescript("DROP TABLE flags; CREATE TABLE flags (stage VARCHAR(16) NOT NULL, item_id VARCHAR(32) NOT NULL, "
                         "lang VARCHAR(8) NOT NULL, reason TEXT NOT NULL, created_at DATETIME NOT NULL, "
                         "PRIMARY KEY (stage, item_id, lang));")
        db.execute("INSERT INTO flags VALUES ('translate', 'c_1', 'fr', 'missing from the reply', ?)", (T0.isoformat(sep=" "),))
        db.execute("UPDATE meta SET value = '8' WHERE key = 'schema_version'")
    db.close()
    ws = open_workspace(directory)
    [flag] = list_flags(ws)
    assert (flag.attempts, flag.exhausted) == (1, False)
    with ws.transaction() as conn:
        record_given_up(conn, "translate", "fr", {"c_1": "wrong id"})
    assert [(f.attempts, f.reason) for f in list_flags(ws)] == [(2, "wrong id")]
    ws.close()
