"""Secrets stay where they belong: a full run with every secret set leaves none of them in any file, log or child process.

The run is the loop a maintainer drives through the CLI: translate, Label Studio serve / push / (curators) / pull,
generate, publish, and an evaluation of a toy model on the release. The LLM endpoint is the stand-in over real HTTP
behind a base URL with a user and password, Label Studio a real server started by `builder review serve`.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
from sqlalchemy import select
from typer.testing import CliRunner

from annotation import server as ls_server
from annotation.autoreview import accept_open_tasks
from builder.child_env import child_env
from builder.cli import app
from builder.workspace import schema as t
from evaluate.data import load_release_pairs
from evaluate.toy import judgement_corpus, train_toy

KEY = "sk-OPENAI-secret-0a1b2c"
HF = "hf_HUBsecret3d4e5f"
TEAM_KEY = "ls-TEAMsecret6a7b8c"
USER, PASSWORD = "curator", "URLsecret9d0e1f"
PROPS = "can fly,has feathers"


def secrets_in(data: bytes) -> list[str]:
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode())
    return [s.decode() for s in (KEY.encode(), HF.encode(), TEAM_KEY.encode(), PASSWORD.encode(), basic) if s in data]


def contents(path: Path) -> bytes:
    """A file's bytes, and what a compressed format holds besides (parquet's values)."""
    data = path.read_bytes()
    if path.suffix == ".parquet":
        data += json.dumps(pq.read_table(path).to_pylist(), default=str).encode()
    return data


def git_objects(store: Path) -> bytes:
    """Every object of a git repository, decompressed (what its packed and loose files hold)."""
    return subprocess.run(["git", "-C", str(store), "cat-file", "--batch-all-objects", "--batch"], capture_output=True,
                          check=True).stdout


def session_environments(leader: int) -> dict[int, bytes]:
    """/proc/<pid>/environ of every process in the session `leader` started (Label Studio and its workers)."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[3]) == leader:
                found[int(proc.name)] = (proc / "environ").read_bytes()
        except OSError:
            continue
    return found


def test_a_full_run_with_every_secret_set_leaves_none_in_files_logs_or_child_processes(
        sample_ws, server, tmp_path, monkeypatch, caplog):
    ws, runner, logs = sample_ws, CliRunner(), []
    server.api_key = KEY
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url.replace("http://", f"http://{USER}:{PASSWORD}@"))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("HF_TOKEN", HF)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", TEAM_KEY)  # a team server's key, with no LABEL_STUDIO_URL: not used here
    monkeypatch.setenv("BUILDER_LLM_MODEL", "standin-translator")
    caplog.set_level(logging.INFO)
    for name in ("openai", "httpx", "httpx2", "httpcore", "label_studio_sdk"):  # the HTTP clients, down to each request
        caplog.set_level(logging.DEBUG, logger=name)

    def cli(*args: str) -> str:
        res = runner.invoke(app, [*args, "-w", str(ws.directory)])
        logs.append(res.output)
        assert res.exit_code == 0, res.output
        return res.output

    cli("translate", "--lang", "fr", "--properties", PROPS)  # the key went as a Bearer token: the server wants it
    cli("review", "serve")
    try:
        conn = ls_server.connect(ws.directory)
        assert conn.token != TEAM_KEY and (ls_server.state_dir(ws.directory) / "token").read_text() != TEAM_KEY
        leader = json.loads((ls_server.state_dir(ws.directory) / "server.json").read_text())["pid"]
        environments = session_environments(leader)
        assert leader in environments
        assert {pid: secrets_in(env) for pid, env in environments.items()} == {pid: [] for pid in environments}
        assert b"LABEL_STUDIO_USER_TOKEN=" + conn.token.encode() in environments[leader]  # what it was given instead
        cli("review", "push", "--lang", "fr")
        accept_open_tasks(ws, conn, "translation", "fr", "curator-fr")
        cli("review", "pull")
        # Without OPENAI_API_KEY, the URL's user and password go as HTTP Basic auth.
        server.basic_auth = (USER, PASSWORD)
        monkeypatch.delenv("OPENAI_API_KEY")
        cli("generate", "--lang", "en,fr", "--properties", PROPS)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        cli("review", "push", "--lang", "fr", "--stage", "sentences")
        accept_open_tasks(ws, conn, "sentences", "fr", "curator-fr")
        cli("review", "pull")
        cli("publish", "--version", "0.1.0", "--lang", "en,fr", "--exclude-unverified")
    finally:
        cli("review", "stop")
    store = ws.directory / "releases"
    pairs, _ = load_release_pairs(store, "0.1.0")
    toy = train_toy(judgement_corpus(pairs), tmp_path / "toy", steps=20)
    results = tmp_path / "results"
    run = runner.invoke(app, ["eval", "run", "--release", str(store), "--version", "0.1.0", "--model", str(toy),
                              "--methods", "direct", "--batch-size", "16", "--out", str(results)])
    logs.append(run.output)
    assert run.exit_code == 0, run.output

    files = [p for root in (ws.directory, results) for p in root.rglob("*") if p.is_file()]
    assert ws.directory / "label-studio" / "data" / "label_studio.sqlite3" in files
    assert ws.directory / "label-studio" / "server.log" in files and (results / "results.parquet") in files
    found = {str(p): secrets_in(contents(p)) for p in files}
    found["release store objects"] = secrets_in(git_objects(store))
    found["workspace tables"] = secrets_in(json.dumps([ws.rows(select(table)) for table in t.metadata.sorted_tables],
                                                      default=str).encode())
    found["command output"] = secrets_in("\n".join(logs).encode())
    found["log records"] = secrets_in(caplog.text.encode())
    assert {where: hit for where, hit in found.items() if hit} == {}
    assert len(logs) == 10 and caplog.records  # every command's output, and the HTTP client's log, were searched


def test_a_child_process_gets_the_names_it_needs_and_none_of_our_secrets(monkeypatch):
    for name, value in (("OPENAI_API_KEY", KEY), ("HF_TOKEN", HF), ("LABEL_STUDIO_API_KEY", TEAM_KEY),
                        ("PGPASSWORD", PASSWORD), ("LC_ALL", "C.UTF-8"), ("PIP_INDEX_URL", "http://mirror.invalid/simple")):
        monkeypatch.setenv(name, value)
    env = child_env(GIT_INDEX_FILE="/tmp/index")
    assert env["PATH"] == os.environ["PATH"] and env["LC_ALL"] == "C.UTF-8" and env["GIT_INDEX_FILE"] == "/tmp/index"
    assert secrets_in(json.dumps(env).encode()) == [] and "PIP_INDEX_URL" not in env
    assert child_env(also=("PIP_",))["PIP_INDEX_URL"] == "http://mirror.invalid/simple"
    shown = subprocess.run(["env"], env=env, capture_output=True, text=True, check=True).stdout
    assert secrets_in(shown.encode()) == []
