"""Review against a real Label Studio server started by the test suite (its own environment)."""

import asyncio
import http.client
import http.server
import re
import threading
import urllib.parse

import pytest
from conftest import settings_for
from sqlalchemy import select
from typer.testing import CliRunner

from annotation import server as ls_server
from annotation.autoreview import accept_open_tasks, reviewer_account
from annotation.review import client, pull, push
from builder.cli import app
from builder.generate import generate, regenerate
from builder.languages import registry
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient
from builder.paths import sample_dir
from builder.releases import load
from builder.releases.publish import PublishRequest, publish
from builder.reviews import rejected_items, rejected_pairs, review_status, sentence_decisions
from builder.seeds import import_seeds
from builder.selection import Scope
from builder.translate import repropose, translate
from builder.workspace import schema as t
from builder.workspace.store import init_workspace, open_workspace

LANGS = ["fr", "es", "ca", "nl", "hu", "tr"]  # 6 x 193 = 1,158 tasks


@pytest.fixture(scope="module")
def label_studio(tmp_path_factory):
    ws_dir = tmp_path_factory.mktemp("ls")
    conn = ls_server.serve(ws_dir, log=lambda *a: None)
    yield ws_dir, conn
    ls_server.stop(ws_dir)


def _translate(ws, server, langs):
    c = LLMClient(LLMCache.of_workspace(ws), settings_for(server))

    async def go():
        try:
            await translate(ws, c, [registry()[x] for x in langs])
        finally:
            await c.aclose()
    asyncio.run(go())


def _tasks(conn, project_id):
    return list(client(conn).tasks.list(project=project_id, fields="all", page_size=1000))


def _annotate(conn, task_id, decision, text=None, comment="", cancelled=False):
    result = [{"from_name": "decision", "to_name": "english", "type": "choices", "value": {"choices": [decision]}}]
    if text is not None:
        result.append({"from_name": "translation", "to_name": "english", "type": "textarea", "value": {"text": [text]}})
    if comment:
        result.append({"from_name": "comment", "to_name": "english", "type": "textarea", "value": {"text": [comment]}})
    return client(conn).annotations.create(id=task_id, result=[] if cancelled else result, was_cancelled=cancelled,
                                           lead_time=12.5)


def _project(ws, lang):
    return ws.rows(select(t.review_projects).where(t.review_projects.c.lang == lang))[0]["project_id"]


def test_curator_loop_push_review_pull_repropose(sample_ws, server, label_studio):
    ws = sample_ws
    ws_dir, _ = label_studio
    conn = ls_server.connect(ws_dir)  # the current server: an earlier test may have restarted it
    _translate(ws, server, LANGS)
    created = sum(push(ws, conn, lang).created for lang in LANGS)
    assert created == 6 * 193
    again = [push(ws, conn, lang) for lang in LANGS]  # idempotent: nothing new, nothing duplicated
    assert sum(s.created + s.updated for s in again) == 0 and sum(s.unchanged for s in again) == created
    pid = _project(ws, "fr")
    tasks = {tk.data["item_id"]: tk for tk in _tasks(conn, pid)}
    assert len(tasks) == 193 and all(tk.predictions for tk in tasks.values())  # the LLM draft is prefilled
    ids = sorted(tasks)
    accept_id, correct_id, reject_id, skip_id = ids[:4]
    _annotate(conn, tasks[accept_id].id, "accept")
    corr = _annotate(conn, tasks[correct_id].id, "corrected", text="first fix")
    _annotate(conn, tasks[reject_id].id, "reject", comment="wrong sense: the sports bat")
    _annotate(conn, tasks[skip_id].id, "accept", cancelled=True)
    client(conn).annotations.update(id=corr.id, result=[
        {"from_name": "decision", "to_name": "english", "type": "choices", "value": {"choices": ["corrected"]}},
        {"from_name": "translation", "to_name": "english", "type": "textarea", "value": {"text": ["better fix"]}}])
    first = pull(ws, conn)
    assert first.new == 4 and first.verified == 2
    assert pull(ws, conn).new == 0 and pull(ws, conn).updated == 0  # pulling twice changes nothing
    words = {r["item_id"]: r for r in ws.rows(select(t.verified_words).where(t.verified_words.c.lang == "fr"))}
    draft = tasks[accept_id].data["draft"]
    assert words[accept_id]["text"] == draft and words[accept_id]["origin"] == "review"
    assert words[correct_id]["text"] == "better fix"  # the latest revision of an edited annotation wins
    assert reject_id not in words and skip_id not in words
    ann = {r["item_id"]: r for r in ws.rows(select(t.review_annotations))}
    assert ann[correct_id]["edit_distance"] > 0 and ann[accept_id]["edit_distance"] == 0
    assert ann[accept_id]["reviewer"] == ls_server.ADMIN_USER and ann[accept_id]["lead_time_s"] == 12.5
    assert ann[skip_id]["cancelled"] and ann[skip_id]["decision"] is None
    # The loop: the rejected item goes back to the LLM with the comment, and is pushed again as a new task.
    rejected = rejected_items(ws, "fr")
    assert set(rejected) == {reject_id}
    c = LLMClient(LLMCache.of_workspace(ws), settings_for(server))

    async def go():
        try:
            return await repropose(ws, c, registry()["fr"], rejected)
        finally:
            await c.aclose()
    assert asyncio.run(go()) == 1
    asked = [m["content"] for r in ws.rows(select(t.llm_cache.c.request)) for m in r["request"]["messages"]]
    assert any("wrong sense: the sports bat" in m for m in asked)
    s = push(ws, conn, "fr")
    assert (s.created, s.revised, s.updated) == (1, 1, 0)
    after = {tk.data["item_id"]: tk for tk in _tasks(conn, pid) if "superseded_by" not in tk.data}
    assert len(after) == 193 and after[reject_id].id != tasks[reject_id].id and not after[reject_id].annotations
    assert after[reject_id].data["revision"] == 2 and "revised" in after[reject_id].data["draft"]
    _annotate(conn, after[reject_id].id, "accept")
    pull(ws, conn)
    words = {r["item_id"]: r for r in ws.rows(select(t.verified_words).where(t.verified_words.c.lang == "fr"))}
    assert "revised" in words[reject_id]["text"]
    status = {(r["stage"], r["lang"]): r for r in review_status(ws)}
    fr = status[("translation", "fr")]
    assert (fr["accept"], fr["corrected"], fr["reject"]) == (2, 1, 0) and fr["reviewers"] == [ls_server.ADMIN_USER]


class HoldingProxy:
    """A loopback proxy in front of Label Studio: it forwards requests and answers as they are, and once the
    server has answered `imports` task imports it holds the next one, never forwarding it, until `release`;
    then it drops the connection, as a server that died mid-request does. `holding` is set while it holds."""

    def __init__(self, upstream: str, imports: int) -> None:
        self.upstream, self.imports = urllib.parse.urlsplit(upstream), imports
        self.answered = 0
        self.holding, self.release = threading.Event(), threading.Event()
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                importing = self.command == "POST" and re.search(r"/api/projects/\d+/import", self.path)
                if importing:
                    with proxy._lock:
                        hold = proxy.answered >= proxy.imports
                    if hold:
                        proxy.holding.set()
                        proxy.release.wait(timeout=120)
                        self.close_connection = True
                        return
                upstream = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=120)
                skip = {"host", "connection", "keep-alive", "transfer-encoding", "content-length"}
                upstream.request(self.command, self.path, body, {k: v for k, v in self.headers.items() if k.lower() not in skip})
                reply = upstream.getresponse()
                data = reply.read()
                upstream.close()
                self.send_response(reply.status)
                for k, v in reply.getheaders():
                    if k.lower() not in skip:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                if importing:
                    with proxy._lock:
                        proxy.answered += 1

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _forward

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()


def test_server_killed_mid_push_then_next_push_completes_without_duplicates(sample_ws, server, label_studio):
    ws = sample_ws
    ws_dir, _ = label_studio
    conn = ls_server.connect(ws_dir)  # the current server: an earlier test may have restarted it
    _translate(ws, server, ["ko"])
    proxy = HoldingProxy(conn.url, imports=2)  # the server takes two chunks of ten, then dies with the third in flight
    errors = []

    def pushing():
        try:
            push(ws, ls_server.Connection(proxy.url, conn.token, conn.server), "ko", chunk=10)
        except Exception as exc:  # noqa: BLE001 - the server is killed under it
            errors.append(exc)

    th = threading.Thread(target=pushing)
    th.start()
    try:
        assert proxy.holding.wait(timeout=300), "the push never reached its third chunk"
        ls_server.stop(ws_dir)  # kill it mid-push
    finally:
        proxy.close()
        th.join(timeout=120)
    assert errors and proxy.answered == 2
    pid = ws.rows(select(t.review_projects).where(t.review_projects.c.lang == "ko"))[0]["project_id"]
    conn2 = ls_server.serve(ws_dir, log=lambda *a: None)
    assert len(_tasks(conn2, pid)) == 20  # exactly the two chunks the server answered
    s = push(ws, conn2, "ko")
    keys = [tk.data["item_key"] for tk in _tasks(conn2, pid)]
    assert len(keys) == len(set(keys)) == 193  # none lost, none duplicated
    assert (s.created, s.unchanged) == (193 - 20, 20)


@pytest.mark.both_databases
def test_two_pushes_at_once_import_each_task_once_and_old_duplicates_count_once(sample_ws, server, label_studio):
    """Two pushes of one project at once (each on a workspace opened anew, as a process of its own would): one imports
    the 193 tasks, the other waits and finds them. Copies of tasks an earlier unlocked push made: the next push removes
    the copies no curator annotated; a pull counts one annotation per curator and item, on the item's oldest task."""
    ws = sample_ws
    ws_dir, _ = label_studio
    conn = ls_server.connect(ws_dir)  # the current server: an earlier test may have restarted it
    _translate(ws, server, ["ru"])
    together = threading.Barrier(2, timeout=120)
    summaries, errors = [], []

    def pushing():
        own = open_workspace(ws.directory)
        try:
            together.wait()
            summaries.append(push(own, conn, "ru", chunk=20))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=pushing) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=600)
    pid = _project(ws, "ru")
    ls = client(conn)
    try:
        assert not errors, errors
        assert sorted((s.created, s.unchanged) for s in summaries) == [(0, 193), (193, 0)]
        assert [p.id for p in ls.projects.list() if (p.title or "").startswith("[translation:ru]")] == [pid]
        tasks = {tk.data["item_id"]: tk for tk in _tasks(conn, pid)}
        assert len(tasks) == len(_tasks(conn, pid)) == 193

        # Copies of three tasks, as two unlocked pushes made them; the curator works through both copies of one.
        twice, on_copy, untouched = sorted(tasks)[:3]
        ls.projects.import_tasks(id=pid, request=[{"data": tasks[i].data} for i in (twice, on_copy, untouched)])
        copy = {tk.data["item_id"]: tk.id for tk in _tasks(conn, pid) if tk.id != tasks[tk.data["item_id"]].id}
        _annotate(conn, tasks[twice].id, "reject", comment="first look")
        _annotate(conn, copy[twice], "accept")
        _annotate(conn, copy[on_copy], "accept")
        s = push(ws, conn, "ru")
        assert (s.duplicates_removed, s.created, s.unchanged) == (1, 0, 193)
        assert sorted(tk.id for tk in _tasks(conn, pid)) == sorted([tk.id for tk in tasks.values()] + [copy[twice], copy[on_copy]])
        pull(ws, conn)
        ra = t.review_annotations
        got = ws.rows(select(ra.c.item_id, ra.c.task_id, ra.c.decision).where(ra.c.lang == "ru"))
        assert sorted((r["item_id"], r["task_id"], r["decision"]) for r in got) == sorted(
            [(twice, tasks[twice].id, "accept"), (on_copy, tasks[on_copy].id, "accept")])
    finally:
        ls.projects.delete(id=pid)  # the next database's run pushes to the same server


def test_non_loopback_bind_needs_the_flag_and_the_token_is_never_logged(label_studio, tmp_path):
    ws_dir, _ = label_studio
    conn = ls_server.connect(ws_dir)  # the current server: an earlier test may have restarted it
    with pytest.raises(ls_server.ServerError, match="not a loopback address"):
        ls_server.serve(tmp_path, host="0.0.0.0")
    log = (ls_server.state_dir(ws_dir) / "server.log").read_text(errors="replace")
    assert conn.token not in log and conn.token not in repr(conn)
    mode = (ls_server.state_dir(ws_dir) / "token").stat().st_mode & 0o777
    assert mode == 0o600


def test_several_curators_agreement_and_adjudication(sample_ws, server, label_studio):
    ws = sample_ws
    ws_dir, _ = label_studio
    conn = ls_server.connect(ws_dir)  # the current server: an earlier test may have restarted it
    _translate(ws, server, ["el"])
    push(ws, conn, "el", overlap=2, overlap_share=1.0)
    pid = _project(ws, "el")
    project = client(conn).projects.get(id=pid)
    assert (project.maximum_annotations, project.overlap_cohort_percentage) == (2, 100)
    ls = client(conn)
    b = ls.users.create(username="curator-b", email="curator-b@builder.local", password="pw-curator-b-1")
    c = ls.users.create(username="curator-c", email="curator-c@builder.local", password="pw-curator-c-1")
    tasks = {tk.data["item_id"]: tk for tk in _tasks(conn, pid)}
    agree_id, disagree_id, same_fix_id = sorted(tasks)[:3]

    def say(user, item, decision, text=None):
        result = [{"from_name": "decision", "to_name": "english", "type": "choices", "value": {"choices": [decision]}}]
        if text:
            result.append({"from_name": "translation", "to_name": "english", "type": "textarea", "value": {"text": [text]}})
        ls.annotations.create(id=tasks[item].id, result=result, completed_by=user.id)

    say(b, agree_id, "accept"), say(c, agree_id, "accept")
    say(b, disagree_id, "accept"), say(c, disagree_id, "corrected", "ανεμιστήρας")
    say(b, same_fix_id, "corrected", "τοστιέρα"), say(c, same_fix_id, "corrected", "τοστιέρα")
    pull(ws, conn)
    words = {r["item_id"]: r for r in ws.rows(select(t.verified_words).where(t.verified_words.c.lang == "el"))}
    assert words[agree_id]["reviewer"] == "curator-b@builder.local, curator-c@builder.local"
    assert words[same_fix_id]["text"] == "τοστιέρα" and disagree_id not in words
    status = {(r["stage"], r["lang"]): r for r in review_status(ws)}[("translation", "el")]
    agr = status["agreement"]
    assert status["disagreements"] == 1 and agr["items"] == 3 and agr["observed"] == pytest.approx(2 / 3)
    assert agr["text_pairs"] == 3 and agr["exact_match"] == pytest.approx(2 / 3) and agr["alpha"] is not None
    # The disagreement goes to an adjudication project; the adjudicator's decision wins and is recorded.
    s = push(ws, conn, "el", stage="adjudication")
    assert s.created == 1 and push(ws, conn, "el", stage="adjudication").unchanged == 1
    adj_pid = ws.rows(select(t.review_projects).where(t.review_projects.c.stage == "adjudication"))[0]["project_id"]
    (adj_task,) = _tasks(conn, adj_pid)
    assert "curator-c@builder.local: corrected 'ανεμιστήρας'" in adj_task.data["opinions"]
    ls.annotations.create(id=adj_task.id, result=[
        {"from_name": "decision", "to_name": "english", "type": "choices", "value": {"choices": ["corrected"]}},
        {"from_name": "translation", "to_name": "english", "type": "textarea", "value": {"text": ["ανεμιστήρας οροφής"]}}])
    pull(ws, conn)
    word = ws.rows(select(t.verified_words).where(t.verified_words.c.lang == "el", t.verified_words.c.item_id == disagree_id))[0]
    assert word["text"] == "ανεμιστήρας οροφής" and word["reviewer"] == f"{ls_server.ADMIN_USER} (adjudicated)"
    review = ws.rows(select(t.reviews).where(t.reviews.c.id == word["review_id"]))[0]
    assert review["decision"] == "corrected" and "(adjudicated)" in review["reviewer"]


def _generate(ws, server, lang, props="is used for heating food,can fly"):
    c = LLMClient(LLMCache.of_workspace(ws), settings_for(server))

    async def go():
        try:
            return await generate(ws, c, [registry(ws)[lang]], scope=Scope.parse(ws, props))
        finally:
            await c.aclose()
    return asyncio.run(go())


def test_sentence_pairs_accept_fix_reject_then_regenerated_and_reviewed_again(sample_ws, server, label_studio):
    ws = sample_ws
    ws_dir, _ = label_studio
    conn = ls_server.connect(ws_dir)
    n = _generate(ws, server, "de").generated["de"]  # German words are verified expert seeds
    assert push(ws, conn, "de", stage="sentences").created == n
    assert push(ws, conn, "de", stage="sentences").unchanged == n  # idempotent
    pid = ws.rows(select(t.review_projects).where(t.review_projects.c.stage == "sentences"))[0]["project_id"]
    tasks = {tk.data["item_id"]: tk for tk in _tasks(conn, pid)}
    assert len(tasks) == n
    accept_id, fix_id, reject_id, skip_id = sorted(tasks)[:4]
    first = tasks[accept_id]
    # The verified words are marked in the shown sentences; the drafts are prefilled unmarked.
    assert "⟦" in first.data["acceptable"] and first.data["acceptable"].replace("⟦", "").replace("⟧", "") == \
        first.data["draft_acceptable"]
    assert {r["from_name"] for r in first.predictions[0].result} == {"acceptable_fixed", "unacceptable_fixed"}

    def say(task, decision, fixed=None, comment="", cancelled=False):
        result = [{"from_name": "decision", "to_name": "acceptable", "type": "choices", "value": {"choices": [decision]}}]
        if fixed:
            result.append({"from_name": "unacceptable_fixed", "to_name": "unacceptable", "type": "textarea",
                           "value": {"text": [fixed]}})
        if comment:
            result.append({"from_name": "comment", "to_name": "acceptable", "type": "textarea", "value": {"text": [comment]}})
        client(conn).annotations.create(id=task.id, result=[] if cancelled else result, was_cancelled=cancelled)

    say(tasks[accept_id], "accept")
    draft = tasks[fix_id].data["draft_unacceptable"]  # the concept, then the property: the fix changes the concept
    say(tasks[fix_id], "fix", fixed="Ein Wasserkocher " + draft[draft.index(tasks[fix_id].data["property"]):])
    say(tasks[reject_id], "reject", comment="the property reads as a question")
    say(tasks[skip_id], "accept", cancelled=True)
    pull(ws, conn)
    assert pull(ws, conn).new == 0
    got = sentence_decisions(ws, "de")
    assert set(got) == {accept_id, fix_id, reject_id}
    assert (got[accept_id].acceptable, got[accept_id].unacceptable) == (
        tasks[accept_id].data["draft_acceptable"], tasks[accept_id].data["draft_unacceptable"])
    assert got[fix_id].decision == "fix" and got[fix_id].unacceptable.startswith("Ein Wasserkocher")
    assert got[fix_id].acceptable == tasks[fix_id].data["draft_acceptable"]
    status = {(r["stage"], r["lang"]): r for r in review_status(ws)}[("sentences", "de")]
    assert (status["pending"], status["accept"], status["fix"], status["reject"], status["skipped"]) == (n - 3, 1, 1, 1, 1)
    # A release takes the fixed sentences as fixed and holds the rejected pair back.
    res = publish(ws, PublishRequest(target=ws.directory / "releases", version="0.1.0", langs=["de"],
                                     exclude_unverified=True))
    rows = {r["pair_id"]: r for r in load(ws.directory / "releases", "0.1.0", "de")}
    assert reject_id not in rows and len(rows) == n - 1 and res.counts
    assert rows[fix_id]["unacceptable_sentence"] == got[fix_id].unacceptable and rows[fix_id]["corrected"]
    assert rows[accept_id]["acceptable_sentence"] == got[accept_id].acceptable
    # Rejected pairs go back to generation with the comment; the rewrite is reviewed again in a new task.
    assert rejected_pairs(ws, "de") == {reject_id: "the property reads as a question"}
    c = LLMClient(LLMCache.of_workspace(ws), settings_for(server))

    async def again():
        try:
            return await regenerate(ws, c, registry(ws)["de"], rejected_pairs(ws, "de"))
        finally:
            await c.aclose()
    assert asyncio.run(again()).generated["de"] == 1
    asked = [m["content"] for r in ws.rows(select(t.llm_cache.c.request)) for m in r["request"]["messages"]]
    assert any("the property reads as a question" in m for m in asked)
    assert reject_id not in sentence_decisions(ws, "de") and rejected_pairs(ws, "de") == {}
    s = push(ws, conn, "de", stage="sentences")
    assert (s.created, s.revised, s.updated) == (1, 1, 0)
    after = {tk.data["item_id"]: tk for tk in _tasks(conn, pid) if "superseded_by" not in tk.data}
    assert len(after) == n and after[reject_id].id != tasks[reject_id].id
    assert after[reject_id].data["draft_acceptable"].endswith(", in fact.")
    say(after[reject_id], "accept")
    pull(ws, conn)
    final = sentence_decisions(ws, "de")[reject_id]
    assert final.decision == "accept" and final.unacceptable.endswith(", in fact.")


def test_scripted_curator_accepts_each_open_task_once_under_its_own_name(sample_ws, server, label_studio):
    ws = sample_ws
    ws_dir, _ = label_studio
    conn = ls_server.connect(ws_dir)
    _translate(ws, server, ["he"])
    n = push(ws, conn, "he").created
    assert accept_open_tasks(ws, conn, "translation", "he", "demo-curator") == n
    assert accept_open_tasks(ws, conn, "translation", "he", "demo-curator") == 0  # nothing annotated twice
    assert pull(ws, conn).verified == n
    words = ws.rows(select(t.verified_words).where(t.verified_words.c.lang == "he"))
    drafts = {tk.data["item_id"]: tk.data["draft"] for tk in _tasks(conn, _project(ws, "he"))}
    assert len(words) == n and all(w["reviewer"] == "demo-curator@builder.local" for w in words)
    assert all(w["text"] == drafts[w["item_id"]] for w in words)


def test_control_characters_a_curator_pastes_are_taken_out_and_told_at_pull(sample_ws, server, label_studio, monkeypatch):
    """A correction or comment typed into Label Studio is the curator's: taken, less the characters no text may hold
    (a paste from a terminal or a PDF brings them), each removal told on the pull with the task and the curator."""
    ws = sample_ws
    ws_dir, _ = label_studio
    conn = ls_server.connect(ws_dir)
    monkeypatch.setattr(ls_server, "connect", lambda *a, **k: conn)  # the command pulls from the tests' server
    _translate(ws, server, ["uk"])
    push(ws, conn, "uk")
    tasks = {tk.data["item_id"]: tk for tk in _tasks(conn, _project(ws, "uk"))}
    fixed_id, rejected_id = sorted(tasks)[:2]
    _annotate(conn, tasks[fixed_id].id, "corrected", text="тостер\x1b[0m\x07")
    _annotate(conn, tasks[rejected_id].id, "reject", comment="wrong\x08 sense")
    res = CliRunner().invoke(app, ["review", "pull", "-w", str(ws.directory)])
    assert res.exit_code == 0, res.output
    who = ls_server.ADMIN_USER
    assert (f"translation uk, task {tasks[fixed_id].id} ({who}): translation held U+0007 (a control character), "
            f"U+001B (a control character), removed") in res.output
    assert f"translation uk, task {tasks[rejected_id].id} ({who}): comment held U+0008 (a control character), removed" in res.output
    words = {r["item_id"]: r["text"] for r in ws.rows(select(t.verified_words).where(t.verified_words.c.lang == "uk"))}
    assert words[fixed_id] == "тостер[0m"
    ann = {r["item_id"]: r for r in ws.rows(select(t.review_annotations))}
    assert ann[rejected_id]["comment"] == "wrong sense" and ann[rejected_id]["decision"] == "reject"
    again = CliRunner().invoke(app, ["review", "pull", "-w", str(ws.directory)])
    assert "0 new, 0 updated" in again.output  # taken once: the same annotation is not new on the next pull


def test_two_workspaces_on_one_server_each_keep_their_own_project_and_decisions(sample_ws, server, label_studio,
                                                                              tmp_path, monkeypatch):
    """Two teams' workspaces push French translations to one Label Studio: each gets a project of its own (the same
    readable title, each with its workspace's mark), finds it again, and pulls only its curators' decisions. A task
    of the other workspace's that reaches a project (as two workspaces of an earlier version sharing one left them)
    is ignored and told on the pull, never recorded."""
    ours = sample_ws
    theirs = init_workspace(tmp_path / "theirs")
    import_seeds(theirs, sample_dir() / "seeds")
    ws_dir, _ = label_studio
    conn = ls_server.connect(ws_dir)
    monkeypatch.setattr(ls_server, "connect", lambda *a, **k: conn)  # the command pulls from the tests' server
    _translate(ours, server, ["fr"])
    _translate(theirs, server, ["es"])  # their French proposals get other ids than ours
    _translate(theirs, server, ["fr"])
    try:
        made = {w: push(w, conn, "fr").created for w in (ours, theirs)}
        assert made == {ours: 193, theirs: 193}
        pid = {w: _project(w, "fr") for w in (ours, theirs)}
        assert pid[ours] != pid[theirs]
        ls = client(conn)
        titles = {p.id: p.title for p in ls.projects.list()}
        for w in (ours, theirs):
            assert titles[pid[w]] == f"[translation:fr] French review (ws {w.identity[:8]})"
            assert push(w, conn, "fr").unchanged == 193  # each finds its own again
        # A workspace that forgot its project finds it by its key, not the other's; one that remembers the other's
        # (two workspaces of an earlier version took one project) leaves it to the workspace whose mark it bears.
        with theirs.transaction() as c:
            c.execute(t.review_projects.delete())
        assert push(theirs, conn, "fr").unchanged == 193 and _project(theirs, "fr") == pid[theirs]
        with theirs.transaction() as c:
            c.execute(t.review_projects.update().values(project_id=pid[ours]))
        assert push(theirs, conn, "fr").unchanged == 193 and _project(theirs, "fr") == pid[theirs]
        assert ls.projects.get(id=pid[ours]).title.endswith(f"(ws {ours.identity[:8]})")

        # A curator of each team decides the same word in their own project.
        tasks = {w: {tk.data["item_id"]: tk for tk in _tasks(conn, pid[w])} for w in (ours, theirs)}
        item = sorted(tasks[ours])[0]
        ana, bo = reviewer_account(conn, "ana"), reviewer_account(conn, "bo")
        decide = {"from_name": "decision", "to_name": "english", "type": "choices"}
        ls.annotations.create(id=tasks[ours][item].id, completed_by=ana, result=[{**decide, "value": {"choices": ["accept"]}}])
        ls.annotations.create(id=tasks[theirs][item].id, completed_by=bo, result=[
            {**decide, "value": {"choices": ["reject"]}},
            {"from_name": "comment", "to_name": "english", "type": "textarea", "value": {"text": ["wrong sense"]}}])
        # Their task, copied into our project with its annotation, and a task made by hand there (no item key).
        by_hand = {k: v for k, v in tasks[ours][item].data.items() if k not in ("item_key", "item_id")}
        foreign = ls.projects.import_tasks(id=pid[ours], request=[{"data": tasks[theirs][item].data}, {"data": by_hand}],
                                           return_task_ids=True).task_ids
        for task_id in foreign:
            ls.annotations.create(id=task_id, completed_by=bo, result=[{**decide, "value": {"choices": ["accept"]}}])

        res = CliRunner().invoke(app, ["review", "pull", "--verbose", "-w", str(ours.directory)])
        assert res.exit_code == 0, res.output
        assert "translation fr: ignored 2 tasks this workspace did not push" in res.output
        assert "  translation fr French: 1 new, 0 updated, 0 deleted; accept 1\n" in res.output
        assert f"    {item}: accept by ana@builder.local (new)" in res.output
        theirs_pulled = pull(theirs, conn)
        assert (theirs_pulled.new, theirs_pulled.ignored) == (1, {})
        for w, decision, reviewer, project in ((ours, "accept", "ana", pid[ours]), (theirs, "reject", "bo", pid[theirs])):
            (row,) = w.rows(select(t.review_annotations))
            assert (row["item_id"], row["decision"], row["reviewer"]) == (item, decision, f"{reviewer}@builder.local")
            assert row["task_id"] == tasks[w][item].id and row["task_id"] in {tk.id for tk in _tasks(conn, project)}
        assert [r["item_id"] for r in ours.rows(select(t.verified_words).where(t.verified_words.c.lang == "fr",
                                                                            t.verified_words.c.origin == "review"))] == [item]
        assert set(rejected_items(theirs, "fr")) == {item} and rejected_items(ours, "fr") == {}
    finally:
        theirs.close()
