"""Three curators on sentence pairs and on inflection tables in a real Label Studio: agreement, a
disagreement that holds its item back, and an adjudication recorded under its adjudicator's name."""


import pytest
from conftest import with_llm
from sqlalchemy import select
from test_m2c_workspace import _templates

from annotation.autoreview import reviewer_account
from annotation.review import client, pull, push
from builder.generate import generate
from builder.languages import registry
from builder.m2c.fills import needs, propose_forms
from builder.releases import load
from builder.releases.publish import PublishRequest, publish
from builder.review_stages import review_stage
from builder.reviews import disagreements, review_status, sentence_decisions
from builder.selection import Scope
from builder.workspace import schema as t

CURATORS = ("cur-a", "cur-b", "cur-c")




def _tasks(conn, ws, stage):
    pid = ws.rows(select(t.review_projects).where(t.review_projects.c.stage == stage))[0]["project_id"]
    return {tk.data["item_id"]: tk for tk in client(conn).tasks.list(project=pid, fields="all", page_size=1000)}


def _say(conn, task, user, to, decision, **texts):
    result = [{"from_name": "decision", "to_name": to, "type": "choices", "value": {"choices": [decision]}}]
    result += [{"from_name": name, "to_name": to, "type": "textarea", "value": {"text": [text]}} for name, text in texts.items()]
    client(conn).annotations.create(id=task.id, result=result, completed_by=user)


def _status(ws, stage, lang):
    return {(r["stage"], r["lang"]): r for r in review_status(ws)}[(stage, lang)]


def test_three_curators_on_sentence_pairs(sample_ws, server, label_studio):
    ws, conn = sample_ws, label_studio
    n = with_llm(ws, server, lambda c: generate(ws, c, [registry(ws)["de"]],
                                            scope=Scope.parse(ws, "is used for heating food"))).generated["de"]
    push(ws, conn, "de", stage="sentences", overlap=3, overlap_share=1.0)
    tasks = _tasks(conn, ws, "sentences")
    assert len(tasks) == n >= 3
    a, b, c = (reviewer_account(conn, name) for name in CURATORS)
    agree_id, fix_id, split_id = sorted(tasks)[:3]
    fixed = "Ein Wasserkocher wird zum Erwärmen von Speisen verwendet."  # a fix of the concept: still a minimal pair
    for user in (a, b, c):
        _say(conn, tasks[agree_id], user, "acceptable", "accept")
        _say(conn, tasks[fix_id], user, "acceptable", "fix", unacceptable_fixed=fixed)
    _say(conn, tasks[split_id], a, "acceptable", "accept"), _say(conn, tasks[split_id], b, "acceptable", "accept")
    _say(conn, tasks[split_id], c, "acceptable", "reject")
    pull(ws, conn)

    decided = sentence_decisions(ws, "de")
    together = ", ".join(f"{name}@builder.local" for name in CURATORS)
    assert decided[agree_id].reviewer == decided[fix_id].reviewer == together
    assert decided[fix_id].decision == "fix" and decided[fix_id].unacceptable == fixed
    assert split_id not in decided and set(disagreements(ws, "de", "sentences")) == {split_id}
    row = _status(ws, "sentences", "de")
    agr = row["agreement"]
    assert (row["disagreements"], row["adjudicated"], row["accept"], row["fix"], row["pending"]) == (1, 0, 1, 1, n - 3)
    # 9 curator pairs on decisions, 7 agree; the texts of accept and fix: 3 + 3 + 1 pairs, all the same.
    assert agr["items"] == 3 and agr["observed"] == pytest.approx(7 / 9) and agr["alpha"] is not None
    assert (agr["text_pairs"], agr["exact_match"]) == (7, 1.0)
    # The disagreement holds the pair back from a release until an adjudicator decides it.
    publish(ws, PublishRequest(target=ws.directory / "releases", version="0.1.0", langs=["de"], exclude_unverified=True))
    released = {r["pair_id"] for r in load(ws.directory / "releases", "0.1.0", "de")}
    assert split_id not in released and {agree_id, fix_id} <= released

    stage = review_stage("sentences").adjudication
    assert push(ws, conn, "de", stage=stage).created == 1 and push(ws, conn, "de", stage=stage).unchanged == 1
    (adj_task,) = _tasks(conn, ws, stage).values()
    assert adj_task.data["item_id"] == split_id and "cur-c@builder.local: reject" in adj_task.data["opinions"]
    judge = reviewer_account(conn, "adjudicator")
    _say(conn, adj_task, judge, "acceptable", "fix", unacceptable_fixed=fixed)
    pull(ws, conn)
    settled = sentence_decisions(ws, "de")[split_id]
    assert (settled.decision, settled.unacceptable, settled.reviewer) == ("fix", fixed, "adjudicator@builder.local (adjudicated)")
    assert disagreements(ws, "de", "sentences") == {}
    row = _status(ws, "sentences", "de")
    assert (row["disagreements"], row["adjudicated"], row["pending"]) == (0, 1, n - 3)
    assert (_status(ws, stage, "de")["pending"], _status(ws, stage, "de")["fix"]) == (0, 1)
    publish(ws, PublishRequest(target=ws.directory / "releases", version="0.1.1", langs=["de"], exclude_unverified=True))
    rows = {r["pair_id"]: r for r in load(ws.directory / "releases", "0.1.1", "de")}
    assert rows[split_id]["unacceptable_sentence"] == fixed and rows[split_id]["corrected"]


def test_three_curators_on_inflection_tables(ws, server, label_studio, tmp_path):
    conn = label_studio
    server.lexicon.inflections.update({("de", "Tisch", "SG.DAT"): "Tisch", ("de", "Tisch", "PL.DAT"): "Tischen",
                                       ("de", "Lampe", "SG.DAT"): "Lampe", ("de", "Lampe", "PL.DAT"): "Lampe"})
    with_llm(ws, server, lambda c: propose_forms(ws, c, registry(ws)["de"], needs(ws, "de", _templates(tmp_path))))
    push(ws, conn, "de", stage="inflections", overlap=3, overlap_share=1.0)
    tasks = {tk.data["lemma"]: tk for tk in _tasks(conn, ws, "inflections").values()}
    assert set(tasks) == {"Tisch", "Lampe", "Bett"}
    a, b, c = (reviewer_account(conn, name) for name in CURATORS)
    lampen = "SG.DAT\tLampe\nPL.DAT\tLampen"
    for user in (a, b, c):
        _say(conn, tasks["Tisch"], user, "lemma", "accept")
        _say(conn, tasks["Lampe"], user, "lemma", "fix", forms=lampen)
    _say(conn, tasks["Bett"], a, "lemma", "accept")
    _say(conn, tasks["Bett"], b, "lemma", "fix", forms=tasks["Bett"].data["draft"].replace("\t", "\tdem "))
    _say(conn, tasks["Bett"], c, "lemma", "reject")
    pull(ws, conn)

    forms = {(r["lemma"], r["features"]): r for r in ws.rows(select(t.lexicon_forms))}
    together = ", ".join(f"{name}@builder.local" for name in CURATORS)
    assert forms[("Tisch", "PL.DAT")]["status"] == "verified" and forms[("Tisch", "PL.DAT")]["reviewer"] == together
    assert forms[("Lampe", "PL.DAT")]["form"] == "Lampen" and forms[("Lampe", "PL.DAT")]["reviewer"] == together
    assert {r["status"] for (lemma, _), r in forms.items() if lemma == "Bett"} == {"proposed"}  # held for adjudication
    row = _status(ws, "inflections", "de")
    agr = row["agreement"]
    assert (row["disagreements"], row["adjudicated"], row["accept"], row["fix"], row["pending"]) == (1, 0, 1, 1, 0)
    # 9 curator pairs on decisions, 6 agree; tables left by accept and fix: 3 + 3 + 1 pairs, the last differing.
    assert agr["items"] == 3 and agr["observed"] == pytest.approx(6 / 9) and agr["alpha"] is not None
    assert agr["text_pairs"] == 7 and agr["exact_match"] == pytest.approx(6 / 7) and agr["chrf"] < 100

    stage = review_stage("inflections").adjudication
    assert push(ws, conn, "de", stage=stage).created == 1
    (adj_task,) = _tasks(conn, ws, stage).values()
    assert adj_task.data["lemma"] == "Bett" and "cur-c@builder.local: reject" in adj_task.data["opinions"]
    _say(conn, adj_task, reviewer_account(conn, "adjudicator"), "lemma", "reject", comment="not a word for a place")
    s = pull(ws, conn)
    assert s.forms["rejected"] == 2
    bett = [r for r in ws.rows(select(t.lexicon_forms)) if r["lemma"] == "Bett"]
    assert {r["status"] for r in bett} == {"rejected"}
    assert {r["reviewer"] for r in bett} == {"adjudicator@builder.local (adjudicated)"}
    assert {r["comment"] for r in bett} == {"not a word for a place"}
    row = _status(ws, "inflections", "de")
    assert (row["disagreements"], row["adjudicated"], row["pending"]) == (0, 1, 0)
    assert _status(ws, stage, "de")["reject"] == 1
