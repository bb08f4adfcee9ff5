"""Every disagreement reaches adjudication, in a real Label Studio, driven as curators and a maintainer would:
a second curator who disagrees after an item was verified takes it out of "verified", `builder review pull`
says so and names the command that pushes it for adjudication, the adjudicator sees each curator's version
and takes one; an annotation deleted in Label Studio stops counting; an item asked again gets a fresh task
while the old one keeps its annotations, closed; task lists tell their rows apart."""

import json
import re
import urllib.request

import pytest
from conftest import with_llm
from curating import current_tasks, say, versions
from sqlalchemy import select
from typer.testing import CliRunner

from annotation import server as ls_server
from annotation.autoreview import reviewer_account
from annotation.review import client, push, stage_tasks, task_data
from builder.cli import app
from builder.generate import generate, regenerate
from builder.languages import registry
from builder.reviews import rejected_items, rejected_pairs, review_project, sentence_decisions
from builder.selection import Scope, verified
from builder.translate import repropose, translate
from builder.workspace import schema as t

cli = CliRunner()




@pytest.fixture
def maintainer(sample_ws, label_studio, monkeypatch):
    """The workspace, and its connection to the module's Label Studio as the CLI makes it (from the environment)."""
    monkeypatch.setenv("LABEL_STUDIO_URL", label_studio.url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", label_studio.token)
    monkeypatch.setenv("BUILDER_WORKSPACE", str(sample_ws.directory))  # commands run as printed, inside the workspace
    return sample_ws, ls_server.connect(sample_ws.directory)


def _builder(*args: str) -> str:
    run = cli.invoke(app, list(args))
    assert run.exit_code == 0, run.output
    return run.output


def _follow(output: str, what: str) -> str:
    """Run the `builder …` command that `output` names for `what`, as the maintainer would copy it."""
    m = re.search(rf"{what}.*?`builder ([^`]+)`", output, re.S)
    assert m, output
    return _builder(*m.group(1).split())


def _labeling_columns(conn, project_id) -> list[str]:
    """The data columns Label Studio's task list shows beside the labeling screen, in its order."""
    req = urllib.request.Request(f"{conn.url}/api/dm/columns?project={project_id}",
                                 headers={"Authorization": f"Token {conn.token}"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        columns = json.loads(resp.read())["columns"]
    return [c["id"] for c in columns if c.get("parent") == "data" and c["visibility_defaults"]["labeling"]]


def test_a_translation_corrected_after_verification_is_withdrawn_and_adjudicated(maintainer, server):
    ws, conn = maintainer
    with_llm(ws, server, lambda c: translate(ws, c, [registry()["el"]]))
    push(ws, conn, "el")
    tasks = current_tasks(conn, ws, "translation", "el")
    labels = [tk.data["task"] for tk in tasks.values()]
    assert len(set(labels)) == len(labels) == len(tasks)  # the task list tells its rows apart
    item = sorted(tasks)[0]
    task = tasks[item]
    draft = task.data["draft"]
    assert all(part in task.data["task"] for part in (task.data["english"], item, "Greek", "revision 1"))
    assert _labeling_columns(conn, review_project(ws, "translation", "el", conn.server).project_id)[0] == "task"
    a, b, adjudicator = (reviewer_account(conn, name) for name in ("cur-a", "cur-b", "adjudicator"))

    say(conn, task, a, "english", "accept", translation=draft)
    assert "disagree" not in _builder("review", "pull")
    assert verified(ws, "el")[item]["reviewer"] == "cur-a@builder.local"
    # A second curator corrects the verified word: it is no longer verified, and the pull says what to do.
    say(conn, task, b, "english", "corrected", translation="ανεμιστήρας")
    out = _builder("review", "pull")
    assert "1 new disagreement" in out and item not in verified(ws, "el")
    assert "1 verified word withdrawn" in out
    assert "created 1" in _follow(out, "disagreement")
    (adj,) = current_tasks(conn, ws, "adjudication", "el").values()
    assert versions(adj) == {"cur-a@builder.local (accept)": [draft], "cur-b@builder.local (corrected)": ["ανεμιστήρας"]}
    assert "cur-b@builder.local: corrected 'ανεμιστήρας'" in adj.data["opinions"] and adj.data["item_id"] == item
    # A third curator joins in before the adjudicator: the same task, now offering three versions.
    say(conn, task, reviewer_account(conn, "cur-c"), "english", "corrected", translation="ανεμιστήρας οροφής")
    assert "new disagreement" not in _builder("review", "pull")  # the disagreement is not new
    assert "updated 1" in _builder("review", "push", "--stage", "adjudication", "--lang", "el")
    (adj,) = current_tasks(conn, ws, "adjudication", "el").values()
    assert sorted(versions(adj).values()) == [[draft], ["ανεμιστήρας"], ["ανεμιστήρας οροφής"]]
    # The adjudicator takes the second curator's version.
    theirs = next(p for p in adj.predictions if p.model_version.startswith("cur-b"))
    say(conn, adj, adjudicator, "english", "corrected", results=theirs.result)
    assert "disagree" not in _builder("review", "pull")
    word = verified(ws, "el")[item]
    assert (word["text"], word["reviewer"]) == ("ανεμιστήρας", "adjudicator@builder.local (adjudicated)")
    assert "unchanged 0" in _builder("review", "push", "--stage", "adjudication", "--lang", "el")  # settled: no task wanted


def test_a_deleted_annotation_stops_counting_and_an_item_asked_again_gets_a_fresh_task(maintainer, server):
    ws, conn = maintainer
    with_llm(ws, server, lambda c: translate(ws, c, [registry()["es"]]))
    push(ws, conn, "es")
    tasks = current_tasks(conn, ws, "translation", "es")
    keep, gone, again = sorted(tasks)[:3]
    a = reviewer_account(conn, "cur-a")
    say(conn, tasks[keep], a, "english", "accept", translation=tasks[keep].data["draft"])
    deleted = say(conn, tasks[gone], a, "english", "accept", translation=tasks[gone].data["draft"])
    old = say(conn, tasks[again], a, "english", "reject", comment="wrong sense: the sports bat")
    _builder("review", "pull")
    assert {keep, gone} <= set(verified(ws, "es")) and set(rejected_items(ws, "es")) == {again}

    client(conn).annotations.delete(id=deleted.id)
    out = _builder("review", "pull")
    assert "1 deleted in Label Studio" in out and gone not in verified(ws, "es") and keep in verified(ws, "es")
    row = ws.rows(select(t.review_annotations).where(t.review_annotations.c.annotation_id == deleted.id))[0]
    assert row["withdrawn_at"] is not None and row["decision"] == "accept"  # its lineage stays

    # The rejected word is proposed again: a new task for the new revision; the old one keeps its annotation, closed.
    assert with_llm(ws, server, lambda c: repropose(ws, c, registry()["es"], rejected_items(ws, "es"))) == 1
    s = push(ws, conn, "es")
    assert (s.created, s.revised, s.updated) == (1, 1, 0)
    fresh = current_tasks(conn, ws, "translation", "es")[again]
    assert fresh.id != tasks[again].id and not fresh.annotations and fresh.data["revision"] == 2
    assert "revision 2" in fresh.data["task"] and "revised" in fresh.predictions[-1].result[0]["value"]["text"][0]
    before = client(conn).tasks.get(id=tasks[again].id)
    assert before.data["superseded_by"] == fresh.id and "superseded" in before.data["task"] and before.is_labeled
    assert [an["id"] for an in before.annotations] == [old.id]
    assert push(ws, conn, "es").created == 0 and len(current_tasks(conn, ws, "translation", "es")) == len(tasks)
    say(conn, fresh, a, "english", "accept", translation=fresh.data["draft"])
    _builder("review", "pull")
    assert "revised" in verified(ws, "es")[again]["text"]


def test_a_push_cut_short_before_closing_the_old_task_loses_no_decision_on_the_new_revision(maintainer, server):
    ws, conn = maintainer
    with_llm(ws, server, lambda c: translate(ws, c, [registry()["fr"]], scope=Scope.parse(ws, "can fly")))
    push(ws, conn, "fr")
    tasks = current_tasks(conn, ws, "translation", "fr")
    item = sorted(tasks)[0]
    a = reviewer_account(conn, "cur-a")
    say(conn, tasks[item], a, "english", "reject", comment="wrong sense")
    _builder("review", "pull")
    assert with_llm(ws, server, lambda c: repropose(ws, c, registry()["fr"], rejected_items(ws, "fr"))) == 1
    # The push imports the new revision's task and dies before it closes the old one: both are open.
    (asked,) = [tk for tk in stage_tasks(ws, "fr", "translation") if tk.item_id == item]
    pid = review_project(ws, "translation", "fr", conn.server).project_id
    (fresh,) = client(conn).projects.import_tasks(id=pid, request=[{"data": task_data(asked)}], return_task_ids=True).task_ids
    say(conn, client(conn).tasks.get(id=fresh), a, "english", "accept", translation=asked.data["draft"])
    _builder("review", "pull")
    word = verified(ws, "fr")[item]  # the decision on revision 2 counts for revision 2, not for the old task's
    assert "revised" in word["text"] and word["proposal_id"] == asked.data["proposal_id"]
    assert push(ws, conn, "fr").created == 0  # verified: nothing more to ask


def test_a_sentence_pair_fixed_after_verification_is_held_and_adjudicated_a_deleted_accept_is_withdrawn_and_a_rewrite_gets_a_fresh_task(
        maintainer, server):
    ws, conn = maintainer
    n = with_llm(ws, server, lambda c: generate(ws, c, [registry(ws)["de"]], scope=Scope.parse(ws, "is used for heating food")))
    assert n.generated["de"] >= 3
    push(ws, conn, "de", stage="sentences")
    tasks = current_tasks(conn, ws, "sentences", "de")
    labels = [tk.data["task"] for tk in tasks.values()]
    assert len(set(labels)) == len(labels) == len(tasks)
    assert _labeling_columns(conn, review_project(ws, "sentences", "de", conn.server).project_id)[0] == "task"
    pair, again, gone = sorted(tasks)[:3]
    assert pair in tasks[pair].data["task"] and tasks[pair].data["unacceptable_word"] in tasks[pair].data["task"]
    a, b, adjudicator = (reviewer_account(conn, name) for name in ("cur-a", "cur-b", "adjudicator"))
    drafts = {"acceptable_fixed": tasks[pair].data["draft_acceptable"], "unacceptable_fixed": tasks[pair].data["draft_unacceptable"]}
    say(conn, tasks[pair], a, "acceptable", "accept", **drafts)
    say(conn, tasks[again], a, "acceptable", "reject", comment="the property reads as a question")
    deleted = say(conn, tasks[gone], a, "acceptable", "accept", acceptable_fixed=tasks[gone].data["draft_acceptable"],
                   unacceptable_fixed=tasks[gone].data["draft_unacceptable"])
    _builder("review", "pull")
    assert sentence_decisions(ws, "de")[pair].reviewer == "cur-a@builder.local" and gone in sentence_decisions(ws, "de")
    client(conn).annotations.delete(id=deleted.id)
    assert "1 deleted in Label Studio" in _builder("review", "pull") and gone not in sentence_decisions(ws, "de")

    fixed = "Ein Wasserkocher wird zum Erhitzen von Speisen benutzt."
    say(conn, tasks[pair], b, "acceptable", "fix", **{**drafts, "unacceptable_fixed": fixed})
    out = _builder("review", "pull")
    assert "1 new disagreement" in out and pair not in sentence_decisions(ws, "de")  # held out of releases
    assert "created 1" in _follow(out, "disagreement")
    (adj,) = current_tasks(conn, ws, "adjudicate-pairs", "de").values()
    assert versions(adj) == {"cur-a@builder.local (accept)": list(drafts.values()),
                              "cur-b@builder.local (fix)": [drafts["acceptable_fixed"], fixed]}
    theirs = next(p for p in adj.predictions if p.model_version.startswith("cur-b"))
    say(conn, adj, adjudicator, "acceptable", "fix", results=theirs.result)
    _builder("review", "pull")
    settled = sentence_decisions(ws, "de")[pair]
    assert (settled.decision, settled.unacceptable, settled.reviewer) == ("fix", fixed, "adjudicator@builder.local (adjudicated)")

    # The rejected pair is written again: a fresh task; the old one keeps the rejection, closed.
    assert with_llm(ws, server, lambda c: regenerate(ws, c, registry(ws)["de"], rejected_pairs(ws, "de"))).generated["de"] == 1
    s = push(ws, conn, "de", stage="sentences")
    assert (s.created, s.revised) == (1, 1)
    fresh = current_tasks(conn, ws, "sentences", "de")[again]
    before = client(conn).tasks.get(id=tasks[again].id)
    assert fresh.id != before.id and not fresh.annotations and fresh.data["version"] != before.data["version"]
    assert before.data["superseded_by"] == fresh.id and before.is_labeled and len(before.annotations) == 1
