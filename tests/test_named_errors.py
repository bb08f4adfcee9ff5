"""Failures of what the platform talks to or reads name it and say what to do: a Label Studio that died mid-push, a
damaged workspace database, damaged git objects in a release store, a truncated model file."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import started
from postgres import PostgresServer, PostgresUnavailable
from sqlalchemy import select, text
from test_review_label_studio import HoldingProxy, _translate
from typer.testing import CliRunner

from annotation.review import push
from annotation.server import Connection
from builder.cli import app
from builder.default_model import gguf_path
from builder.paths import sample_dir
from builder.releases.store import ReleaseStore, ReleaseStoreError
from builder.seeds import import_seeds
from builder.workspace import schema as t
from builder.workspace.store import WorkspaceError, init_workspace, open_workspace
from evaluate.model_files import ModelFileError, check_file
from evaluate.models import load_model

RESTART = ("if it stopped or crashed, start it again (`builder review serve`; a team's server, its admin) and run the "
           "command again, which skips what the server already holds")


def test_a_label_studio_that_dies_mid_push_is_named_with_what_to_do(sample_ws, server, label_studio, monkeypatch):
    _translate(sample_ws, server, ["fr"])
    proxy = HoldingProxy(label_studio.url, imports=0)  # answers everything but the first import, which it drops
    proxy.release.set()
    try:
        with pytest.raises(Exception) as info:
            push(sample_ws, Connection(proxy.url, label_studio.token, label_studio.server), "fr")
        assert str(info.value) == (f"Label Studio at {proxy.url} did not answer (RemoteProtocolError: Server disconnected "
                                   f"without sending a response.): {RESTART}")
        # The same through the command line, against a server given by URL: one line.
        monkeypatch.setenv("LABEL_STUDIO_URL", proxy.url)
        monkeypatch.setenv("LABEL_STUDIO_API_KEY", label_studio.token)
        res = CliRunner().invoke(app, ["review", "push", "--lang", "fr", "-w", str(sample_ws.directory)])
    finally:
        proxy.close()
    assert res.exit_code == 1 and res.output.count("\n") == 1
    assert res.output.startswith(f"error: Label Studio at {proxy.url} did not answer (") and res.output.endswith(f"{RESTART}\n")


def test_a_damaged_workspace_database_is_named_with_what_to_do(tmp_path):
    ws = init_workspace(tmp_path / "ws")
    import_seeds(ws, sample_dir() / "seeds")
    ws.close()
    db = tmp_path / "ws" / "workspace.sqlite"
    data = bytearray(db.read_bytes())
    for at in range(8192, len(data) - 4096, 4096):  # every page but the first two: the schema still reads
        data[at: at + 64] = b"\xff" * 64
    db.write_bytes(bytes(data))
    fix = f"restore it from a backup, or recover what is readable with `sqlite3 {db.resolve()} .recover"
    with pytest.raises(WorkspaceError) as info:
        open_workspace(tmp_path / "ws").rows(select(t.concepts))
    assert str(info.value).startswith(f"the workspace database {db.resolve()} is damaged (database disk image is malformed): {fix}")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "workspace.sqlite").write_bytes(b"not a database" * 100)
    res = CliRunner().invoke(app, ["status", "-w", str(tmp_path / "other")])
    shown = (tmp_path / "other" / "workspace.sqlite").resolve()
    assert res.exit_code == 1 and res.output.count("\n") == 1
    assert res.output.startswith(f"error: the workspace database {shown} is damaged (file is not a database): restore it")


@pytest.mark.postgresql
def test_damaged_data_on_a_postgresql_workspace_is_named_with_what_to_do(tmp_path, monkeypatch):
    """A heap page overwritten on disk: PostgreSQL refuses it (XX001, data_corrupted) and the error names the server."""
    # Its own server, since it is stopped to damage a file and started again.
    server = started(PostgresServer.start, PostgresUnavailable, "PostgreSQL", "BUILDER_TEST_POSTGRESQL")
    monkeypatch.setenv("PGPASSWORD", server.password)
    try:
        url = server.database()
        ws = init_workspace(tmp_path / "ws", database_url=url)
        import_seeds(ws, sample_dir() / "seeds")
        with ws.engine.connect() as conn:
            relation = conn.execute(text("SELECT pg_relation_filepath('concepts')")).scalar_one()
        ws.close()

        def damage(data: Path) -> None:
            with (data / relation).open("r+b") as heap:
                heap.write(b"\xff" * 24)  # the first page's header: its bounds no longer make sense

        server.restart(damage)  # so the page is read from disk
        with pytest.raises(WorkspaceError) as info:
            open_workspace(tmp_path / "ws").rows(select(t.concepts))
        shown = url.replace("postgresql://", "postgresql+psycopg://")  # as the workspace connects: with its driver
        assert str(info.value).startswith(f"the workspace database {shown} reports damaged data (invalid page in block 0 of "
                                          f"relation {relation})")
        assert str(info.value).endswith("ask its administrator to restore it from a backup (or REINDEX a damaged index)")
        res = CliRunner().invoke(app, ["status", "-w", str(tmp_path / "ws")])
        assert res.exit_code == 1 and res.output == f"error: {info.value}\n", res.output
    finally:
        server.stop()


def test_damaged_git_objects_name_the_version_and_what_to_do(tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    (files / "a.txt").write_text("hello\n")
    (files / "release.json").write_text("{}\n")
    store = ReleaseStore(tmp_path / "store")
    with store.lock():
        store.tag(store.commit(files, "1.0.0", "first", tmp_path / "index"), "1.0.0", "first")
    blob = store.files("1.0.0")["a.txt"]
    obj = store.root / ".git" / "objects" / blob[:2] / blob[2:]
    obj.chmod(0o644)
    obj.write_bytes(b"garbage")
    with pytest.raises(ReleaseStoreError) as info:
        store.read("1.0.0", ["a.txt"])
    assert str(info.value) == (f"version 1.0.0 in {store.root} cannot be read: git objects are damaged (error: unable to "
                               f"unpack {blob} header): restore the store from a backup or another copy of it "
                               f"(`git -C {store.root} fsck` lists what is damaged)")
    res = CliRunner().invoke(app, ["releases", "verify", "1.0.0", "--from", str(store.root)])
    assert res.exit_code == 1 and res.output == f"error: {info.value}\n"


def test_a_truncated_model_file_is_named_with_the_likely_cause(tmp_path):
    whole = gguf_path()
    cut = tmp_path / "model.gguf"
    with whole.open("rb") as src, cut.open("wb") as dst:
        dst.write(src.read(20_000_000))
    with pytest.raises(ModelFileError) as info:
        load_model(cut)
    assert str(info.value) == (f"{cut} is truncated: 20,000,000 bytes where its header promises {whole.stat().st_size:,}, "
                               "likely an interrupted download or copy; download or copy it again (and remove the partial file)")
    check_file(whole)  # the whole file passes
    # A safetensors model folder cut short: named before transformers reads a byte of it.
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path / "tiny"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=32)).save_pretrained(folder)
    weights = folder / "model.safetensors"
    full = weights.stat().st_size
    with weights.open("r+b") as f:
        f.truncate(full - 1000)
    with pytest.raises(ModelFileError, match=rf"^{weights} is truncated: {full - 1000:,} bytes where its header promises {full:,}"):
        load_model(folder)
    weights.write_bytes(b"<html>Too many requests</html>")
    with pytest.raises(ModelFileError, match=rf"^{weights} is corrupt \(30 bytes; its header is unreadable: .*download or copy it again$"):
        load_model(folder)
