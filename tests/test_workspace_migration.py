"""A workspace made by an earlier builder opens in this one: its schema is brought up to date in place; one from
before Label Studio server identities (version 3), whose review rows only their server could re-key, is refused."""

import sqlite3
from datetime import datetime, timedelta

import pytest
from sqlalchemy import inspect, select

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
def test_a_schema_3_workspace_is_refused_as_it_was(sample_ws, tmp_path, opening):
    """Its review rows are keyed by URL, which only the server that answered there could re-key: it is refused,
    saying what to do, and left as it was."""
    pair_id = sample_ws.rows(select(t.pairs.c.id).order_by(t.pairs.c.id).limit(1))[0]["id"]
    directory = tmp_path / "old"
    _schema_3_workspace(directory, pair_id)
    with pytest.raises(WorkspaceError, match=r"old has schema version 3, which keyed review rows by Label Studio's URL; "
                                             r"this builder migrates versions 4 to \d+: start a new workspace"):
        opening(directory)
    db = sqlite3.connect(directory / DB_FILE)
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() == [("3",)]
    assert db.execute("SELECT url FROM review_projects").fetchall() == [(AFTER,)]
    assert len(db.execute("SELECT * FROM review_annotations").fetchall()) == 3
    db.close()


@pytest.mark.parametrize("opening", [open_workspace, init_workspace])
def test_a_schema_7_workspace_is_migrated_in_place(tmp_path, opening):
    directory = tmp_path / "old"
    init_workspace(directory).close()
    db = sqlite3.connect(directory / DB_FILE)
    with db:  # as version 7 left it: before the indexes of version 8 and the column of version 10
        db.executescript("DROP INDEX ix_sentence_pairs_lang; DROP INDEX ix_review_annotations_lang_stage;"
                         "ALTER TABLE review_annotations DROP COLUMN withdrawn_at;"
                         "UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    db.close()
    ws = opening(directory)
    assert ws.rows(select(t.meta.c.value).where(t.meta.c.key == "schema_version"))[0]["value"] == str(t.SCHEMA_VERSION)
    assert "withdrawn_at" in {c["name"] for c in inspect(ws.engine).get_columns("review_annotations")}
    indexes = {(i["name"], tuple(i["column_names"])) for name in ("review_annotations", "sentence_pairs")
               for i in inspect(ws.engine).get_indexes(name)}
    assert {("ix_review_annotations_lang_stage", ("lang", "stage")), ("ix_sentence_pairs_lang", ("lang",))} <= indexes
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
