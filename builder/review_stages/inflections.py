"""Inflection-table review: curators verify the forms the LLM proposed for templates.

One task per lemma with proposed forms, the draft prefilled as editable lines `BUNDLE<TAB>form`
(`builder.m2c.tables`). The review owner (`builder.reviews`) settles each table's decision on the
version of the table its curators saw and turns it into verified (or corrected, or rejected) lexicon forms.
"""

from __future__ import annotations

from builder import reviews
from builder.languages import registry
from builder.review_stages import VERSIONS_NOTE, Box, Instructions, ReviewStage, Screen, Task, call_models, register
from builder.reviews import FormsEdit, current_tables
from builder.workspace.store import Workspace


def inflection_tasks(ws: Workspace, lang: str) -> list[Task]:
    """One task per lemma whose proposed forms wait for review."""
    models = call_models(ws, lang)
    name = registry(ws)[lang].name
    tasks = []
    for item_id, table in current_tables(ws, lang).items():
        forms = table["forms"]
        bundles = ", ".join(f["features"] for f in forms)
        data = {"task": f"{table['lemma']} ({bundles}) · {name} · table {table['version'][:6]}",
                "item_key": f"inflections:{lang}:{item_id}", "item_id": item_id, "lemma": table["lemma"],
                "bundles": bundles, "draft": table["draft"], "version": table["version"]}
        tasks.append(Task(data=data, model=models.get(forms[0]["llm_call_id"], "llm"), drafts={"forms": data["draft"]}))
    return tasks


def edit(data: dict, fields: dict) -> FormsEdit:
    """An inflection annotation's part: the lemma, the draft its task showed, the table the curator left."""
    return FormsEdit(lemma=data["lemma"], draft=data["draft"], text=fields.get("forms") or None)


register(ReviewStage(
    name="inflections", adjudication="adjudicate-forms", made_on="table", tasks=inflection_tasks, edit=edit,
    pending=lambda ws, lang, settled: len(current_tables(ws, lang)),  # a decided table leaves the waiting ones
    waiting=current_tables,  # proposed by `templates fill` before a project exists
    released_in="m2c", decide=reviews.decide_tables, textual=("accept", "fix"), versions=lambda opinion: {"forms": opinion.final_text},
    decisions={
        "accept": "every form in the table is right",
        "fix": "you corrected lines of the table; they are what gets verified",
        "reject": "the forms are wrong; say why in the comment",
    },
    screen=Screen(
        what="Inflection table in", to="lemma", facts=(("Lemma", "lemma"), ("Feature bundles", "bundles")),
        note="One line per bundle: FEATURES, a tab, the form",
        versions_note=f"One line per bundle: FEATURES, a tab, the form ({VERSIONS_NOTE})",
        body=(Box("forms", "lemma", rows=8),)),
    instructions=Instructions(
        heading="Inflection tables in {lang}", adjudicated="inflection tables in {lang}",
        intro="Each task is one lemma and the forms the LLM proposed for the feature bundles an M2C template needs, "
              "one line per bundle: the bundle, a tab, the form.",
        check="each form is the {lang} form of the lemma for its bundle (<code>PL.DAT</code>: plural dative); keep one "
              "line per bundle and the bundle as written. Only forms you accept or fix ever reach a released test.",
        comment="Comment (kept with the forms: say why you fix or reject)"),
))
