"""Inflection-table review in Label Studio: curators verify the forms the LLM proposed for templates.

One task per lemma with proposed forms, the draft prefilled as editable lines `BUNDLE<TAB>form`
(`builder.m2c.tables`). Push and pull follow the translation review: projects and tasks are found
again by our keys, a repeated push skips unchanged tasks and updates changed ones, a pull hands every
annotation to the review owner (`builder.reviews`), which settles each table's decision on the
version of the table its curators saw and turns it into verified (or corrected, or rejected) lexicon forms.
"""

from __future__ import annotations

from annotation.tasks import call_models, task_hash, textarea
from builder.languages import registry
from builder.reviews import FormsEdit, current_tables
from builder.workspace.store import Workspace

STAGE = "inflections"


def inflection_tasks(ws: Workspace, lang: str) -> list[dict]:
    models = call_models(ws, lang)
    name = registry(ws)[lang].name
    tasks = []
    for item_id, table in current_tables(ws, lang).items():
        forms = table["forms"]
        bundles = ", ".join(f["features"] for f in forms)
        data = {"task": f"{table['lemma']} ({bundles}) · {name} · table {table['version'][:6]}",
                "item_key": f"{STAGE}:{lang}:{item_id}", "item_id": item_id, "lemma": table["lemma"],
                "bundles": bundles, "draft": table["draft"], "version": table["version"]}
        data["hash"] = task_hash(data)
        tasks.append({"data": data, "model": models.get(forms[0]["llm_call_id"], "llm"),
                      "prediction": [textarea("forms", "lemma", data["draft"])]})
    return tasks


def edit(data: dict, fields: dict) -> FormsEdit:
    """An inflection annotation's part: the lemma, the draft its task showed, the table the curator left."""
    return FormsEdit(lemma=data["lemma"], draft=data["draft"], text=fields.get("forms") or None)
