"""A review stage is one record: registered here and nowhere else, a new stage (a gloss of each concept's
proposed word) is pushed to a real Label Studio, annotated there as curators do, pulled back, decided,
counted in the review status and the next steps, and its disagreements go to its own adjudication."""

import dataclasses

import pytest
from conftest import with_llm
from curating import current_tasks, say, versions
from sqlalchemy import func, select

from annotation.autoreview import reviewer_account
from annotation.review import client, pull, push
from builder import review_stages, reviews
from builder.errors import InputError
from builder.languages import registry
from builder.next_steps import next_steps
from builder.review_stages import Box, Instructions, ReviewStage, Screen, Task, Text, register
from builder.reviews import TranslationEdit
from builder.translate import translate
from builder.workspace import schema as t


def gloss_tasks(ws, lang):
    """One task per concept's latest proposal: the word and its English concept, and a box for a gloss."""
    english = {r["id"]: r["english"] for r in ws.rows(select(t.concepts))}
    return [Task(data={"task": f"{english[item]} · {p['text']}", "item_key": f"gloss:{lang}:{item}", "item_id": item,
                       "proposal_id": p["id"], "word": p["text"], "english": english[item]},
                 model="llm", drafts={"gloss": p["text"]})  # the proposal, which a decision is made on
            for item, p in sorted(reviews.latest_proposals(ws, lang).items()) if item in english]


GLOSS = ReviewStage(
    name="gloss", adjudication="adjudicate-gloss", made_on="proposal", tasks=gloss_tasks, textual=("apt",),
    edit=lambda data, fields: TranslationEdit(proposal_id=data["proposal_id"], text=fields.get("gloss") or None),
    pending=lambda ws, lang, settled: len(gloss_tasks(ws, lang)) - settled,
    waiting=lambda ws, lang: {task.item_id for task in gloss_tasks(ws, lang)} - set(reviews.settled(ws, lang, "gloss")[0]),
    versions=lambda opinion: {"gloss": opinion.final_text},
    decisions={"apt": "the gloss says what the word means", "off": "the word means something else"},
    screen=Screen(what="Gloss in", to="word", facts=(("English", "english"),), note="A short gloss in English",
                  versions_note="A short gloss in English (one curator's to start with)",
                  body=(Text("Word", "word"), Box("gloss", "word"))),
    instructions=Instructions(heading="Glosses in {lang}", intro="Each task is one word and a gloss of it.",
                              check="the gloss fits the {lang} word", comment="Comment (why it is off)",
                              adjudicated="glosses in {lang}"))


def gloss_steps(ws) -> dict[str, tuple[str, str]]:
    """The next steps (`builder status`) of the gloss stage and its adjudication in French: stage -> (what, command)."""
    return {step.stage: (step.what, step.command) for step in next_steps(ws, ["fr"])
            if step.stage in ("gloss", "adjudicate-gloss")}


def test_a_stage_registered_in_one_place_is_pushed_annotated_pulled_and_adjudicated(sample_ws, server, label_studio,
                                                                                     monkeypatch):
    ws, conn = sample_ws, label_studio
    with_llm(ws, server, lambda c: translate(ws, c, [registry(ws)["fr"]]))
    with pytest.raises(InputError, match="unknown review stage 'gloss'"):
        push(ws, conn, "fr", stage="gloss")
    # Registered for this test only: the shipped stages stay as they are for the others.
    monkeypatch.setattr(review_stages, "_REGISTRY", {s.name: s for s in review_stages.stages()})
    register(GLOSS)

    n = len(gloss_tasks(ws, "fr"))
    # Its items wait for curators before it has a project: the next step pushes them.
    (what, cmd), = gloss_steps(ws).values()
    assert what.startswith(f"{n} gloss item(s) wait for curators") and "review push --stage gloss --lang fr" in cmd
    assert n >= 3 and push(ws, conn, "fr", stage="gloss").created == n
    project = reviews.review_project(ws, "gloss", "fr", conn.server)
    shown = client(conn).projects.get(id=project.project_id)
    assert project.title.startswith("[gloss:fr] French") and "Gloss in French (fr)" in shown.label_config
    assert '<Choice value="apt"' in shown.label_config and "the word means something else" in shown.label_config
    assert "Glosses in French (fr)" in shown.expert_instruction
    tasks = current_tasks(conn, ws, "gloss", "fr")
    first, second, third = sorted(tasks)[:3]
    assert [r["value"]["text"] for r in tasks[first].predictions[0].result] == [[tasks[first].data["word"]]]

    a, b = reviewer_account(conn, "gloss-a"), reviewer_account(conn, "gloss-b")
    say(conn, tasks[first], a, "word", "apt", gloss="a thing")
    say(conn, tasks[second], a, "word", "off", comment="a false friend")
    say(conn, tasks[third], a, "word", "apt"), say(conn, tasks[third], b, "word", "off")
    s = pull(ws, conn)
    assert (s.new, s.disagreements) == (4, {("gloss", "fr"): 1})

    curators, adjudicated = reviews.opinions(ws, "fr", "gloss")
    assert adjudicated == {}
    assert [(o.reviewer, o.decision, o.final_text) for o in curators[first]] == \
        [("gloss-a@builder.local", "apt", "a thing")]
    assert [(o.decision, o.comment) for o in curators[second]] == [("off", "a false friend")]
    row = {(r["stage"], r["lang"]): r for r in reviews.review_status(ws)}[("gloss", "fr")]
    assert (row["apt"], row["off"], row["disagreements"], row["pending"]) == (1, 1, 1, n - 3)
    assert row["reviewers"] == ["gloss-a@builder.local", "gloss-b@builder.local"]
    rows = ws.scalar(select(func.count()).select_from(t.review_annotations).where(t.review_annotations.c.stage == "gloss"))
    assert rows == 4
    steps = gloss_steps(ws)  # two decided, one disputed: that one waits for the adjudicator alone
    assert steps["gloss"][0].startswith(f"{n - 3} gloss item(s) wait for curators")
    assert steps["adjudicate-gloss"][0].startswith("1 gloss item(s) whose curators disagree wait for an adjudicator")
    assert "review push --stage adjudicate-gloss --lang fr" in steps["adjudicate-gloss"][1]

    # The disagreement goes to the stage's own adjudication, with each curator's version, and the adjudicator settles it.
    assert push(ws, conn, "fr", stage="adjudicate-gloss").created == 1
    (task,) = current_tasks(conn, ws, "adjudicate-gloss", "fr").values()
    assert task.data["item_id"] == third and "gloss-b@builder.local: off" in task.data["opinions"]
    assert versions(task) == {"gloss-a@builder.local (apt)": [tasks[third].data["word"]]}
    say(conn, task, reviewer_account(conn, "gloss-judge"), "word", "off")
    assert pull(ws, conn).new == 1
    assert reviews.disagreements(ws, "fr", "gloss") == {}
    row = {(r["stage"], r["lang"]): r for r in reviews.review_status(ws)}[("gloss", "fr")]
    assert (row["apt"], row["off"], row["adjudicated"], row["pending"]) == (1, 1, 1, n - 3)
    assert {stage: what for stage, (what, _) in gloss_steps(ws).items()} == {
        "gloss": f"{n - 3} gloss item(s) wait for curators (new and changed ones go to Label Studio)"}


@pytest.mark.parametrize(("name", "adjudication"), [("translation", "adjudicate-gloss"), ("gloss", "adjudicate-pairs"),
                                                    ("glosses-of-words", "adjudicate-glosses")])
def test_a_stage_whose_name_is_taken_or_does_not_fit_the_stage_columns_is_refused(monkeypatch, name, adjudication):
    monkeypatch.setattr(review_stages, "_REGISTRY", {s.name: s for s in review_stages.stages()})
    shipped = review_stages.stage_names()
    with pytest.raises(ValueError, match=f"review stage {name}: name '.+' is taken or not 1 to 16 characters"):
        register(dataclasses.replace(GLOSS, name=name, adjudication=adjudication))
    assert review_stages.stage_names() == shipped
