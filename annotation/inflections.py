"""Inflection-table review in Label Studio: curators verify the forms the LLM proposed for templates.

One task per lemma with proposed forms, the draft prefilled as editable lines `BUNDLE<TAB>form`.
Push and pull follow the translation review: projects and tasks are found again by our keys, a
repeated push skips unchanged tasks and updates changed ones, a pull hands every annotation to the
review owner (`builder.reviews`), which turns decisions into verified (or corrected, or rejected)
lexicon forms.
"""

from __future__ import annotations

import re

from annotation.tasks import call_models, task_hash, textarea
from builder.m2c.fills import Need
from builder.m2c.lexicon import list_forms
from builder.reviews import FormsEdit
from builder.workspace.store import Workspace

STAGE = "inflections"
_LINE = re.compile(r"^\s*(\S+)\s+(.+?)\s*$")


def inflection_tasks(ws: Workspace, lang: str) -> list[dict]:
    rows = list_forms(ws, lang, status="proposed")
    models = call_models(ws, lang)
    by_lemma: dict[str, list[dict]] = {}
    for r in rows:
        by_lemma.setdefault(r["lemma"], []).append(r)
    tasks = []
    for lemma, forms in by_lemma.items():
        item_id = Need(lang, lemma, "", ()).id
        data = {"item_key": f"{STAGE}:{lang}:{item_id}", "item_id": item_id, "lemma": lemma,
                "bundles": ", ".join(f["features"] for f in forms),
                "draft": "\n".join(f"{f['features']}\t{f['form']}" for f in forms)}
        data["hash"] = task_hash(data)
        tasks.append({"data": data, "model": models.get(forms[0]["llm_call_id"], "llm"),
                      "prediction": [textarea("forms", "lemma", data["draft"])]})
    return tasks


def parse_forms(text: str) -> dict[str, str]:
    """`BUNDLE<whitespace>form` lines -> {bundle: form}; a line without a form is an error."""
    out = {}
    for no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        m = _LINE.match(line)
        if not m:
            raise ValueError(f"line {no} {line!r}: write the bundle, a tab, then the form")
        out[m.group(1)] = m.group(2)
    return out


def edit(data: dict, fields: dict) -> FormsEdit:
    """An inflection annotation's part: the lemma, the draft its task showed, the table the curator left."""
    text = fields.get("forms") or None
    try:
        forms = parse_forms(text or data["draft"])
    except ValueError:
        forms = None
    return FormsEdit(lemma=data["lemma"], draft=data["draft"], text=text, forms=forms)
