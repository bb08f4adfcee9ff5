"""A workspace's Label Studio across restarts and copies, and what curators see on its screens (real server)."""

import asyncio
import json
import re
import shutil
import socket
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import settings_for
from sqlalchemy import select

from annotation import server as ls_server
from annotation.configs import config
from annotation.instructions import instructions
from annotation.review import client, ensure_project, pull, push, title
from builder.languages import declare, registry
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient
from builder.paths import sample_dir
from builder.review_stages import review_stage, stage_names
from builder.seeds import import_seeds
from builder.translate import translate
from builder.workspace import schema as t
from builder.workspace.store import init_workspace, open_workspace

QUIET = {"log": lambda *a: None}


@pytest.fixture(scope="module")
def ls_dir(tmp_path_factory):
    """The folder of a workspace whose Label Studio this module starts, restarts and copies."""
    ws_dir = tmp_path_factory.mktemp("identity") / "ws"
    ls_server.serve(ws_dir, **QUIET)
    yield ws_dir
    ls_server.stop(ws_dir, **QUIET)


def _translate(ws, server, lang):
    c = LLMClient(LLMCache.of_workspace(ws), settings_for(server))

    async def go():
        try:
            await translate(ws, c, [registry()[lang]])
        finally:
            await c.aclose()
    asyncio.run(go())


def _say(conn, task_id, decision, text=None):
    result = [{"from_name": "decision", "to_name": "english", "type": "choices", "value": {"choices": [decision]}}]
    if text:
        result.append({"from_name": "translation", "to_name": "english", "type": "textarea", "value": {"text": [text]}})
    client(conn).annotations.create(id=task_id, result=result)


def _tasks(conn, project_id):
    return {tk.data["item_id"]: tk for tk in client(conn).tasks.list(project=project_id, include="id,data", page_size=1000)}


def _another_port(url: str) -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not url.endswith(f":{port}"):
            return port


def test_after_a_restart_on_another_port_pull_finds_every_annotation_and_push_duplicates_nothing(
        sample_ws, server, ls_dir, monkeypatch):
    ws = sample_ws
    conn = ls_server.connect(ls_dir)
    _translate(ws, server, "nl")
    n = push(ws, conn, "nl").created
    pid = ws.rows(select(t.review_projects.c.project_id).where(t.review_projects.c.lang == "nl"))[0]["project_id"]
    tasks = _tasks(conn, pid)
    first, second, third = sorted(tasks)[:3]
    _say(conn, tasks[first].id, "accept")
    _say(conn, tasks[second].id, "corrected", "een betere vertaling")
    assert pull(ws, conn).new == 2
    external = ls_server.external_identity(conn.url, conn.token)

    ls_server.stop(ls_dir, **QUIET)
    again = ls_server.serve(ls_dir, port=_another_port(conn.url), **QUIET)
    assert again.url != conn.url and again.server == conn.server and again.server.startswith("local:")
    _say(again, tasks[third].id, "reject")
    s = pull(ws, again)
    assert (s.new, s.updated, s.unchanged) == (1, 0, 2)  # the two pulled before the restart are known
    keys = sorted((r["annotation_id"], r["server"]) for r in ws.rows(select(t.review_annotations)))
    assert len(keys) == 3 and {server for _, server in keys} == {again.server}
    words = {r["item_id"]: r["text"] for r in ws.rows(select(t.verified_words).where(t.verified_words.c.lang == "nl"))}
    assert words[second] == "een betere vertaling" and first in words and third not in words
    s = push(ws, again, "nl")
    assert (s.created, s.updated, s.unchanged) == (0, 0, n - 2)  # the two verified words are not asked again
    ls = client(again)
    assert [p.id for p in ls.projects.list() if p.title.startswith("[translation:nl]")] == [pid]
    assert len(_tasks(again, pid)) == n

    # A server given by LABEL_STUDIO_URL (not started by us) is known by its organization: the same on any port.
    assert ls_server.external_identity(again.url, again.token) == external and external.startswith("org:1@")
    monkeypatch.setenv("LABEL_STUDIO_URL", again.url + "/")
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", again.token)
    given = ls_server.connect(Path("/nonexistent"))
    assert (given.url, given.server) == (again.url, external)


def test_a_copied_workspace_starts_its_own_server_and_leaves_the_originals_running(server, ls_dir, tmp_path):
    original = ls_server.connect(ls_dir)
    ws = init_workspace(ls_dir)
    import_seeds(ws, sample_dir() / "seeds")
    _translate(ws, server, "ca")
    push(ws, original, "ca")
    pid = ws.rows(select(t.review_projects.c.project_id).where(t.review_projects.c.lang == "ca"))[0]["project_id"]
    tasks = _tasks(original, pid)
    first, second = sorted(tasks)[:2]
    _say(original, tasks[first].id, "accept")
    assert pull(ws, original).new == 1
    ws.close()

    copy = tmp_path / "copy"
    shutil.copytree(ls_dir, copy)
    said = []
    assert ls_server.stop(copy, log=said.append) is False  # the record it copied names the original's data
    assert str(ls_server.label_studio_data(ls_dir)) in said[0] and ls_server.connect(ls_dir).url == original.url
    with pytest.raises(ls_server.ServerError, match="no Label Studio"):
        ls_server.connect(copy, **QUIET)
    own = ls_server.serve(copy, **QUIET)
    try:
        assert own.url != original.url and own.server == original.server  # its own server, on a copy of the same data
        assert ls_server.connect(ls_dir).url == original.url
        copied = open_workspace(copy)
        s = pull(copied, own)
        assert (s.new, s.unchanged) == (0, 1)
        _say(own, tasks[second].id, "accept")
        assert pull(copied, own).new == 1
        copied.close()
        ws = open_workspace(ls_dir)
        assert pull(ws, original).new == 0  # the copy's curators annotated the copy's server only
        ws.close()
    finally:
        assert ls_server.stop(copy, **QUIET)
    assert ls_server.connect(ls_dir).url == original.url


def test_a_record_is_trusted_only_when_its_process_serves_this_workspace(ls_dir):
    conn = ls_server.connect(ls_dir)
    path = ls_server.state_dir(ls_dir) / "server.json"
    record = json.loads(path.read_text())
    other = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        # Written before records named their data directory (an upgrade while the server ran): the process shows it.
        path.write_text(json.dumps({"url": record["url"], "pid": record["pid"]}))
        assert ls_server.connect(ls_dir, **QUIET).url == conn.url
        # A live pid that is not this workspace's Label Studio (a pid reused after a reboot), with a healthy
        # server on the recorded port: neither is this workspace's, so neither is used or stopped.
        path.write_text(json.dumps({**record, "pid": other.pid}))
        with pytest.raises(ls_server.ServerError, match="no Label Studio"):
            ls_server.connect(ls_dir, **QUIET)
        path.write_text(json.dumps({**record, "pid": other.pid}))
        assert ls_server.stop(ls_dir, **QUIET) is False and other.poll() is None and not path.exists()
    finally:
        other.kill()
        other.wait()
        path.write_text(json.dumps(record))
    assert ls_server.connect(ls_dir).url == conn.url


def _preceding(config: str, tag: str, name: str) -> ET.Element:
    """The element right before the control `name` in the labeling config."""
    for parent in ET.fromstring(config).iter():
        children = list(parent)
        for before, el in zip(children, children[1:]):
            if el.tag == tag and el.get("name") == name:
                return before
    raise AssertionError(f"no {tag} {name!r}")


@pytest.mark.parametrize("stage", sorted(stage_names()))
def test_each_screen_names_the_decision_and_labels_the_comment(stage):
    lang = registry()["he"]
    screen = config(stage, lang)
    header = _preceding(screen, "Choices", "decision")
    assert (header.tag, header.get("value")) == ("Header", "Decision")
    choices = {c.get("value"): c.get("html") for c in ET.fromstring(screen).iter("Choice")}
    meanings = review_stage(stage).decisions
    assert list(choices) == list(meanings)
    assert all(meanings[d] in label and d in label for d, label in choices.items())
    label = _preceding(screen, "TextArea", "comment")
    assert label.tag == "Header" and label.get("value").startswith("Comment (")
    text = instructions(stage, lang)
    assert "Hebrew (he)" in text and "right to left" in text
    assert all(meaning in text for meaning in meanings.values())


def test_the_curator_guide_says_what_each_decision_means_as_the_screens_do():
    guide = (Path(__file__).resolve().parent.parent / "docs" / "curators.md").read_text()
    for stage in stage_names():
        for decision, meaning in review_stage(stage).decisions.items():
            assert f"**{decision}**: {meaning}" in guide, (stage, decision)
        assert review_stage(stage).instructions.comment in guide, stage


def test_every_project_carries_its_instructions_and_gets_them_back_in_place(sample_ws, ls_dir):
    ws, conn = sample_ws, ls_server.connect(ls_dir)
    ls = client(conn)
    pids = {stage: ensure_project(ws, ls, conn, stage, "ar") for stage in stage_names()}
    for stage, pid in pids.items():
        project = ls.projects.get(id=pid)
        assert project.expert_instruction == instructions(stage, registry()["ar"]) and project.show_instruction
        assert project.label_config == config(stage, registry()["ar"])
    # A project made before instructions existed, with an annotation on it, is brought up to date in place.
    pid = pids["translation"]
    old_config = config("translation", registry()["ar"]).replace('<Header size="5" value="Decision"/>', "")
    ls.projects.update(id=pid, expert_instruction="", show_instruction=False, label_config=old_config)
    data = {field: "—" for field in re.findall(r"\$(\w+)", old_config)}
    task = ls.projects.import_tasks(id=pid, request=[{"data": data}], return_task_ids=True).task_ids[0]
    _say(conn, task, "accept")
    assert ensure_project(ws, ls, conn, "translation", "ar") == pid
    project = ls.projects.get(id=pid)
    assert project.show_instruction and "Decision" in project.label_config and "<b>Check</b>" in project.expert_instruction
    assert [a.result[0]["value"]["choices"] for a in ls.annotations.list(id=task)] == [["accept"]]


def test_a_language_whose_names_hold_markup_reaches_every_screen_and_title_as_written(sample_ws, ls_dir):
    """Every value in a labeling config is escaped: a name with & " < > makes no screen invalid, and Label Studio
    gives back the heading, the title and the instructions with the name as written."""
    ws, conn = sample_ws, ls_server.connect(ls_dir)
    name = 'Serbo-Croatian & "Bosnian" <sh>'
    declare(ws, code="sh", name=name, native_name='srpskohrvatski <&> "bosanski"', typology="inflectional",
            family="Indo-European", script="Latn")
    lang = registry(ws)["sh"]
    ls = client(conn)
    for stage in stage_names():
        project = ls.projects.get(id=ensure_project(ws, ls, conn, stage, "sh"))
        heading = ET.fromstring(project.label_config).find("Header").get("value")
        assert f"{name} (sh)" in heading, heading
        assert project.label_config == config(stage, lang)
        mark = f" (ws {ws.identity[:8]})"  # the name is cut where the title is long, never the workspace's mark
        assert project.title == title(stage, lang, ws.identity) == f"[{stage}:sh] {name}"[:50 - len(mark)].rstrip() + mark
        assert project.expert_instruction == instructions(stage, lang)
        assert "Serbo-Croatian &amp; &quot;Bosnian&quot; &lt;sh&gt;" in project.expert_instruction
