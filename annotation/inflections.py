"""Inflection-table review in Label Studio: curators verify the forms the LLM proposed for templates.

One task per lemma with proposed forms, the draft prefilled as editable lines `BUNDLE<TAB>form`.
Push and pull follow the translation review: projects and tasks are found again by our keys, a
repeated push skips unchanged tasks and updates changed ones, a pull records every annotation with
its reviewer and turns decisions into verified (or corrected, or rejected) lexicon forms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import select

from annotation.review import CHUNK, PushSummary, _hash, _when, client, ensure_project, existing_tasks, parse_annotation
from annotation.server import Connection
from annotation.textdiff import edit_distance
from builder.inflect import Need
from builder.lexicon import verify_fills
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
        data["hash"] = _hash(data)
        tasks.append({"data": data, "model": models.get(forms[0]["llm_call_id"], "llm")})
    return tasks


def _prediction(draft: str) -> list[dict]:
    return [{"from_name": "forms", "to_name": "lemma", "type": "textarea", "value": {"text": [draft]}}]


def push(ws: Workspace, conn: Connection, lang: str, *, limit: int | None = None, chunk: int = CHUNK) -> PushSummary:
    ls = client(conn)
    pid = ensure_project(ws, ls, conn, STAGE, lang)
    have = existing_tasks(ls, pid)
    summary = PushSummary()
    new = []
    for task in inflection_tasks(ws, lang)[: limit or None]:
        data = task["data"]
        if data["item_key"] not in have:
            new.append(task)
        elif have[data["item_key"]][1] == data["hash"]:
            summary.unchanged += 1
        else:  # re-proposed forms: same task, new draft
            task_id = have[data["item_key"]][0]
            ls.tasks.update(id=str(task_id), data=data)
            ls.predictions.create(task=task_id, result=_prediction(data["draft"]), model_version=task["model"])
            summary.updated += 1
    for i in range(0, len(new), chunk):
        batch = new[i : i + chunk]
        ls.projects.import_tasks(id=pid, request=[
            {"data": x["data"], "predictions": [{"model_version": x["model"], "result": _prediction(x["data"]["draft"])}]}
            for x in batch], return_task_ids=True)
        summary.created += len(batch)
    return summary


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


@dataclass
class InflectionPullSummary:
    new: int = 0
    updated: int = 0
    unchanged: int = 0
    verified: int = 0
    corrected: int = 0
    rejected: int = 0
    invalid: int = 0  # annotations whose forms could not be read (recorded, not applied)


def pull(ws: Workspace, conn: Connection) -> InflectionPullSummary:
    ls = client(conn)
    users = {u.id: (u.email or u.username or str(u.id)) for u in ls.users.list()}
    summary = InflectionPullSummary()
    projects = ws.rows(select(t.review_projects).where(t.review_projects.c.url == conn.url, t.review_projects.c.stage == STAGE))
    known = {r["annotation_id"]: r for r in ws.rows(select(t.review_annotations).where(
        t.review_annotations.c.url == conn.url, t.review_annotations.c.stage == STAGE))}
    for proj in projects:
        lang = proj["lang"]
        decisions = []
        with ws.transaction() as c:
            for task in ls.projects.exports.as_json(proj["project_id"]):
                data = task["data"]
                for ann in task.get("annotations") or []:
                    updated = _when(ann.get("updated_at") or ann["created_at"])
                    old = known.get(ann["id"])
                    if old and _when(old["updated_at"]) == updated:
                        summary.unchanged += 1
                        continue
                    fields = parse_annotation(ann)
                    final = _text(ann, "forms") or data["draft"]
                    cancelled = bool(ann.get("was_cancelled"))
                    row = dict(stage=STAGE, lang=lang, item_id=data["item_id"], proposal_id=None, task_id=task["id"],
                               decision=None if cancelled else fields.get("decision"), final_text=final,
                               comment=fields.get("comment", ""), reviewer=users.get(ann.get("completed_by"), str(ann.get("completed_by"))),
                               cancelled=cancelled, lead_time_s=ann.get("lead_time"), edit_distance=edit_distance(data["draft"], final),
                               created_at=_when(ann["created_at"]), updated_at=updated)
                    if old:
                        c.execute(t.review_annotations.update().where(t.review_annotations.c.annotation_id == ann["id"],
                                                                      t.review_annotations.c.url == conn.url).values(**row))
                        summary.updated += 1
                    else:
                        c.execute(t.review_annotations.insert().values(annotation_id=ann["id"], url=conn.url, **row))
                        summary.new += 1
                    if row["decision"]:
                        decisions.append((updated, data["lemma"], row))
        for _, lemma, row in sorted(decisions, key=lambda d: d[0]):  # the latest decision on a lemma wins
            try:
                fixes = parse_forms(row["final_text"]) if row["decision"] == "fix" else None
                s = verify_fills(ws, lang, lemma, reviewer=row["reviewer"], decision=row["decision"], forms=fixes,
                                 comment=row["comment"])
            except ValueError:
                summary.invalid += 1
                continue
            summary.verified += s.verified
            summary.corrected += s.corrected
            summary.rejected += s.rejected
    return summary


def _text(ann: dict, name: str) -> str | None:
    for r in ann.get("result") or []:
        if r.get("from_name") == name and (r.get("value") or {}).get("text") is not None:
            text = r["value"]["text"]
            return "\n".join(text if isinstance(text, list) else [text]).strip()
    return None
