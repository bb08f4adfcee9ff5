"""Inflection-table review in Label Studio: curators verify the forms the LLM proposed for templates.

One task per lemma with proposed forms, the draft prefilled as editable lines `BUNDLE<TAB>form`.
Push and pull follow the translation review: projects and tasks are found again by our keys, a
repeated push skips unchanged tasks and updates changed ones, a pull records every annotation with
its reviewer and turns decisions into verified (or corrected, or rejected) lexicon forms.
"""

from __future__ import annotations

import re


from sqlalchemy import select

from annotation.tasks import annotation_counts, task_hash, textarea
from annotation.textdiff import edit_distance
from builder.m2c.fills import Need
from builder.m2c.lexicon import verify_fills
from builder.workspace import schema as t
from builder.workspace.store import Workspace

STAGE = "inflections"
_LINE = re.compile(r"^\s*(\S+)\s+(.+?)\s*$")


def inflection_tasks(ws: Workspace, lang: str) -> list[dict]:
    rows = ws.rows(select(t.lexicon_forms).where(t.lexicon_forms.c.lang == lang, t.lexicon_forms.c.status == "proposed")
                   .order_by(t.lexicon_forms.c.lemma, t.lexicon_forms.c.features))
    models = {r["id"]: r["model"] for r in ws.rows(select(t.llm_calls.c.id, t.llm_calls.c.model))}
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


def annotation_fields(data: dict, fields: dict) -> dict:
    """The `review_annotations` fields of an inflection annotation: the forms as the curator left them."""
    final = fields.get("forms") or data["draft"]
    return dict(item_id=data["item_id"], proposal_id=None, final_text=final, edit_distance=edit_distance(data["draft"], final))


def apply(ws: Workspace, lang: str, decided: list[dict], counts: dict[str, int]) -> None:
    """Turn new or changed decisions into verified, corrected or rejected forms; the latest per lemma wins.

    `decided` holds `review_annotations` rows plus the task's `lemma`. Forms a curator wrote that
    cannot be read are counted as `invalid` and not applied.
    """
    for row in sorted(decided, key=lambda r: r["updated_at"]):
        try:
            fixes = parse_forms(row["final_text"]) if row["decision"] == "fix" else None
            s = verify_fills(ws, lang, row["lemma"], reviewer=row["reviewer"], decision=row["decision"], forms=fixes,
                             comment=row["comment"])
        except ValueError:
            counts["invalid"] = counts.get("invalid", 0) + 1
            continue
        for key in ("verified", "corrected", "rejected"):
            counts[key] = counts.get(key, 0) + getattr(s, key)


def inflection_status(ws: Workspace, lang: str) -> dict:
    """Lemmas waiting for review, the latest decision per lemma, and who reviewed."""
    a = t.review_annotations
    anns = ws.rows(select(a).where(a.c.lang == lang, a.c.stage == STAGE).order_by(a.c.updated_at))
    latest = {r["item_id"]: r["decision"] for r in anns if r["decision"]}
    counts = {d: sum(1 for v in latest.values() if v == d) for d in ("accept", "fix", "reject")}
    return {"pending": len(inflection_tasks(ws, lang)), **counts, **annotation_counts(ws, STAGE, lang)}
