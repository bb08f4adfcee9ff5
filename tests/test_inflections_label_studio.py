"""Inflection-table review against a real Label Studio: push proposed forms, curators decide, pull verifies."""

import asyncio

from conftest import settings_for
from sqlalchemy import select
from test_m2c_workspace import _templates

from annotation import server as ls_server
from annotation.review import client, pull, push
from builder.languages import registry
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient
from builder.m2c.fills import needs, propose_forms
from builder.m2c.render import render_tests
from builder.m2c.tables import parse_forms
from builder.next_steps import review_steps
from builder.reviews import review_status
from builder.workspace import schema as t


def _annotate(conn, task_id, decision, forms=None, comment=""):
    result = [{"from_name": "decision", "to_name": "lemma", "type": "choices", "value": {"choices": [decision]}}]
    if forms is not None:
        result.append({"from_name": "forms", "to_name": "lemma", "type": "textarea", "value": {"text": [forms]}})
    if comment:
        result.append({"from_name": "comment", "to_name": "lemma", "type": "textarea", "value": {"text": [comment]}})
    return client(conn).annotations.create(id=task_id, result=result, lead_time=4.0)


def test_curators_verify_correct_and_reject_proposed_forms(ws, server, label_studio, tmp_path):
    conn = label_studio
    root = _templates(tmp_path)
    server.lexicon.inflections.update({("de", "Tisch", "SG.DAT"): "Tisch", ("de", "Tisch", "PL.DAT"): "Tischen",
                                       ("de", "Lampe", "SG.DAT"): "Lampe", ("de", "Lampe", "PL.DAT"): "Lampe"})

    async def fill():
        c = LLMClient(LLMCache.of_workspace(ws), settings_for(server))
        try:
            await propose_forms(ws, c, registry(ws)["de"], needs(ws, "de", root))
        finally:
            await c.aclose()

    asyncio.run(fill())
    assert [s.what.split(" (")[0] for s in review_steps(ws, "inflections", ["de"])] == ["3 inflections item(s) wait for curators"]
    first = push(ws, conn, "de", stage="inflections")
    assert (first.created, first.updated, first.unchanged) == (3, 0, 0)
    assert push(ws, conn, "de", stage="inflections").unchanged == 3  # idempotent
    pid = ws.rows(select(t.review_projects).where(t.review_projects.c.stage == "inflections"))[0]["project_id"]
    tasks = {tk.data["lemma"]: tk for tk in client(conn).tasks.list(project=pid, fields="all", page_size=100)}
    assert set(tasks) == {"Tisch", "Lampe", "Bett"} and all(tk.predictions for tk in tasks.values())
    assert parse_forms(tasks["Lampe"].data["draft"]) == {"SG.DAT": "Lampe", "PL.DAT": "Lampe"}

    _annotate(conn, tasks["Tisch"].id, "accept")
    _annotate(conn, tasks["Lampe"].id, "fix", forms="SG.DAT\tLampe\nPL.DAT\tLampen")
    _annotate(conn, tasks["Bett"].id, "reject", comment="synthetic forms")
    s = pull(ws, conn)
    assert s.new == 3 and s.forms == {"verified": 3, "corrected": 1, "rejected": 2}
    assert review_steps(ws, "inflections", ["de"]) == []  # every table decided: nothing waits
    forms = {(r["lemma"], r["features"]): r for r in ws.rows(select(t.lexicon_forms))}
    assert forms[("Lampe", "PL.DAT")]["form"] == "Lampen" and forms[("Lampe", "PL.DAT")]["proposed_form"] == "Lampe"
    assert forms[("Tisch", "PL.DAT")]["reviewer"] == ls_server.ADMIN_USER
    assert {r["status"] for k, r in forms.items() if k[0] == "Bett"} == {"rejected"}
    anns = ws.rows(select(t.review_annotations).where(t.review_annotations.c.stage == "inflections"))
    assert {a["decision"] for a in anns} == {"accept", "fix", "reject"} and all(a["lead_time_s"] == 4.0 for a in anns)
    status = {(r["stage"], r["lang"]): r for r in review_status(ws)}[("inflections", "de")]
    assert (status["pending"], status["accept"], status["fix"], status["reject"]) == (0, 1, 1, 1)
    again = pull(ws, conn)
    assert (again.new, again.updated, again.unchanged) == (0, 0, 3)

    r = render_tests(ws, "de", root=root)
    rows = ws.rows(select(t.m2c_tests))
    assert r.tests == len(rows) == 8 and all(row["verified"] for row in rows)
    assert {row["fills"]["place"]["lemma"] for row in rows} == {"Tisch", "Lampe"}
    assert any(row["answer"] == "Neben den Lampen." for row in rows)
