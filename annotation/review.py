"""Push proposals to Label Studio for review and pull curators' decisions back with lineage.

Projects are found again by our key (`[stage:lang]` in the title) and tasks by our item key in
`task.data`, listed from the server before every push: a push repeated after a crash or a server
restart skips what is there, updates changed proposals in place (annotations stay), and imports
only what is missing. Pulling maps every annotation back to the proposal it was made on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from label_studio_sdk import LabelStudio
from sqlalchemy import select

from annotation import inflections, sentences
from annotation.agreement import agreement
from annotation.configs import CONFIGS, TRANSLATION_DECISIONS
from annotation.server import Connection
from annotation.tasks import parse_annotation, task_hash, textarea, when
from annotation.textdiff import edit_distance
from builder.languages import SEED_LANGUAGES, registry
from builder.records import VerifiedWord
from builder.verify import latest_proposals
from builder.workspace import schema as t
from builder.workspace.store import Workspace, now

CHUNK = 500


@dataclass
class PushSummary:
    created: int = 0
    updated: int = 0
    unchanged: int = 0


@dataclass
class PullSummary:
    new: int = 0
    updated: int = 0
    unchanged: int = 0
    verified: int = 0
    rejected: int = 0
    by_decision: dict[str, int] = field(default_factory=dict)
    forms: dict[str, int] = field(default_factory=dict)  # inflection forms verified, corrected, rejected, invalid


def client(conn: Connection) -> LabelStudio:
    return LabelStudio(base_url=conn.url, api_key=conn.token)


def title(stage: str, lang: str) -> str:
    return f"[{stage}:{lang}] {registry()[lang].name if lang in registry() else lang} review"[:50]


def ensure_project(ws: Workspace, ls: LabelStudio, conn: Connection, stage: str, lang: str) -> int:
    """The project for (stage, lang): remembered, else found by our key on the server, else created."""
    key = f"[{stage}:{lang}]"
    rows = ws.rows(select(t.review_projects).where(t.review_projects.c.stage == stage, t.review_projects.c.lang == lang,
                                                   t.review_projects.c.url == conn.url))
    if rows:
        try:
            ls.projects.get(id=rows[0]["project_id"])
            return rows[0]["project_id"]
        except Exception:  # noqa: BLE001 - gone from the server: find or create below
            pass
    found = [p for p in ls.projects.list() if (p.title or "").startswith(key)]
    if found:
        pid = min(p.id for p in found)
    else:
        lang_rec = registry(ws)[lang]
        pid = ls.projects.create(title=title(stage, lang), label_config=CONFIGS[stage](lang_rec),
                                 description=f"builder review project {key}").id
    with ws.transaction() as c:
        c.execute(t.review_projects.delete().where(t.review_projects.c.stage == stage, t.review_projects.c.lang == lang))
        c.execute(t.review_projects.insert().values(stage=stage, lang=lang, project_id=pid, title=title(stage, lang), url=conn.url))
    return pid


# -- translation tasks -------------------------------------------------------------------------------


def translation_tasks(ws: Workspace, lang: str) -> list[dict]:
    """One task per item whose latest proposal is not verified yet."""
    latest = latest_proposals(ws, lang)
    done = {r["item_id"] for r in ws.rows(select(t.verified_words.c.item_id).where(t.verified_words.c.lang == lang))}
    english = {r["id"]: (r["english"], r.get("category")) for r in ws.rows(select(t.concepts))}
    english |= {r["id"]: (r["english"], None) for r in ws.rows(select(t.properties))}
    seeds: dict[tuple[str, str], str] = {}
    for r in ws.rows(select(t.seed_translations).where(t.seed_translations.c.lang.in_(SEED_LANGUAGES))):
        seeds.setdefault((r["item_id"], r["lang"]), r["text"])
    models = {r["id"]: r["model"] for r in ws.rows(select(t.llm_calls.c.id, t.llm_calls.c.model))}
    tasks = []
    for item_id, p in sorted(latest.items()):
        if item_id in done:
            continue
        en, cat = english[item_id]
        data = {
            "item_key": f"translation:{lang}:{item_id}", "item_id": item_id, "kind": p["kind"], "english": en,
            "seed_de": seeds.get((item_id, "de"), "—"), "seed_zh": seeds.get((item_id, "zh"), "—"),
            "category": cat or "—", "alternatives": "; ".join(p["alternatives"]) or "—", "note": p["note"] or "—",
            "proposal_id": p["id"], "revision": p["revision"], "draft": p["text"],
        }
        data["hash"] = task_hash(data)
        tasks.append({"data": data, "model": models.get(p["llm_call_id"], "llm"),
                      "prediction": [textarea("translation", "english", p["text"])]})
    return tasks


def existing_tasks(ls: LabelStudio, project_id: int) -> dict[str, tuple[int, str]]:
    out = {}
    for task in ls.tasks.list(project=project_id, include="id,data", page_size=1000):  # 5x faster than all fields
        data = task.data or {}
        if "item_key" in data:
            out.setdefault(data["item_key"], (task.id, data.get("hash", "")))
    return out


def stage_tasks(ws: Workspace, lang: str, stage: str) -> list[dict]:
    """The tasks a stage wants reviewed now: each `{data, model, prediction}`, keyed by `data.item_key`."""
    if stage == "translation":
        return translation_tasks(ws, lang)
    if stage == "adjudication":
        return adjudication_tasks(ws, lang)
    if stage == "sentences":
        return sentences.sentence_tasks(ws, lang)
    if stage == "inflections":
        return inflections.inflection_tasks(ws, lang)
    raise ValueError(f"unknown review stage {stage!r}: translation, adjudication, sentences or inflections")


def push(ws: Workspace, conn: Connection, lang: str, *, stage: str = "translation", limit: int | None = None,
         chunk: int = CHUNK, overlap: int = 1, overlap_share: float = 0.0) -> PushSummary:
    """Push review tasks; `overlap_share` of them go to `overlap` curators each (Label Studio's overlap)."""
    tasks = stage_tasks(ws, lang, stage)[: limit or None]
    ls = client(conn)
    pid = ensure_project(ws, ls, conn, stage, lang)
    if overlap > 1:
        ls.projects.update(id=pid, maximum_annotations=overlap, overlap_cohort_percentage=round(overlap_share * 100))
    have = existing_tasks(ls, pid)
    summary = PushSummary()
    new = []
    for task in tasks:
        data = task["data"]
        if data["item_key"] not in have:
            new.append(task)
        elif have[data["item_key"]][1] == data["hash"]:
            summary.unchanged += 1
        else:  # a re-proposal: same task, new draft; the annotations on it stay
            task_id = have[data["item_key"]][0]
            ls.tasks.update(id=str(task_id), data=data)
            ls.predictions.create(task=task_id, result=task["prediction"], model_version=task["model"])
            summary.updated += 1
    for i in range(0, len(new), chunk):
        batch = new[i : i + chunk]
        ls.projects.import_tasks(
            id=pid,
            request=[{"data": x["data"], "predictions": [{"model_version": x["model"], "result": x["prediction"]}]}
                     for x in batch],
            return_task_ids=True,
        )
        summary.created += len(batch)
    return summary


# -- pulling -----------------------------------------------------------------------------------------


PULLED_STAGES = ("translation", "adjudication", "sentences", "inflections")  # translation before its adjudication


def pull(ws: Workspace, conn: Connection) -> PullSummary:
    ls = client(conn)
    users = {u.id: (u.email or u.username or str(u.id)) for u in ls.users.list()}
    summary = PullSummary()
    projects = sorted(ws.rows(select(t.review_projects).where(t.review_projects.c.url == conn.url,
                                                              t.review_projects.c.stage.in_(PULLED_STAGES))),
                      key=lambda p: PULLED_STAGES.index(p["stage"]))
    known = {r["annotation_id"]: r for r in ws.rows(select(t.review_annotations).where(t.review_annotations.c.url == conn.url))}
    langs: dict[str, set[str]] = {}
    forms_decided: dict[str, list[dict]] = {}
    for proj in projects:
        lang, stage = proj["lang"], proj["stage"]
        langs.setdefault(lang, set()).add(stage)
        exported = ls.projects.exports.as_json(proj["project_id"])
        with ws.transaction() as c:
            for task in exported:
                for ann in task.get("annotations") or []:
                    updated = when(ann.get("updated_at") or ann["created_at"])
                    old = known.get(ann["id"])
                    if old and when(old["updated_at"]) == updated:
                        summary.unchanged += 1
                        continue
                    fields = parse_annotation(ann)
                    cancelled = bool(ann.get("was_cancelled"))
                    row = dict(
                        stage=stage, lang=lang, task_id=task["id"], decision=None if cancelled else fields.get("decision"),
                        comment=fields.get("comment", ""), reviewer=users.get(ann.get("completed_by"), str(ann.get("completed_by"))),
                        cancelled=cancelled, lead_time_s=ann.get("lead_time"), created_at=when(ann["created_at"]), updated_at=updated,
                    )
                    if stage == "sentences":
                        row |= sentences.record(c, conn.url, lang, ann["id"], task["data"], fields, first_pull=old is None)
                    elif stage == "inflections":
                        row |= inflections.annotation_fields(task["data"], fields)
                        if row["decision"]:
                            forms_decided.setdefault(lang, []).append({**row, "lemma": task["data"]["lemma"]})
                    else:
                        row |= _translation_fields(c, task["data"], fields, old)
                    if old:
                        c.execute(t.review_annotations.update().where(t.review_annotations.c.annotation_id == ann["id"],
                                                                      t.review_annotations.c.url == conn.url).values(**row))
                        summary.updated += 1
                    else:
                        c.execute(t.review_annotations.insert().values(annotation_id=ann["id"], url=conn.url, **row))
                        summary.new += 1
    for lang, stages in langs.items():
        if stages & {"translation", "adjudication"}:
            _apply(ws, lang, summary)
    for lang, decided in forms_decided.items():
        inflections.apply(ws, lang, decided, summary.forms)
    return summary


def _translation_fields(c, data: dict, fields: dict, old: dict | None) -> dict:
    # An annotation made before a re-proposal keeps the proposal it was made on.
    proposal_id = old["proposal_id"] if old else data["proposal_id"]
    draft = ws_draft(c, proposal_id)
    final = fields.get("translation") or draft
    return dict(item_id=data["item_id"], proposal_id=proposal_id, final_text=final, edit_distance=edit_distance(draft, final))


def ws_draft(c, proposal_id: int) -> str:
    return c.execute(select(t.proposals.c.text).where(t.proposals.c.id == proposal_id)).scalar_one()


def opinions(ws: Workspace, lang: str) -> dict[str, dict[str, list[dict]]]:
    """stage -> item -> each curator's latest decided annotation on the item's latest proposal."""
    latest = latest_proposals(ws, lang)
    anns = ws.rows(select(t.review_annotations).where(t.review_annotations.c.lang == lang,
                                                      t.review_annotations.c.stage.in_(("translation", "adjudication")),
                                                      t.review_annotations.c.cancelled.is_(False),
                                                      t.review_annotations.c.decision.is_not(None))
                   .order_by(t.review_annotations.c.updated_at))
    per: dict[str, dict[str, dict[str, dict]]] = {"translation": {}, "adjudication": {}}
    for a in anns:
        if latest.get(a["item_id"], {}).get("id") == a["proposal_id"]:
            per[a["stage"]].setdefault(a["item_id"], {})[a["reviewer"]] = a  # a curator's latest revision wins
    return {stage: {item: list(by.values()) for item, by in items.items()} for stage, items in per.items()}


def _agree(anns: list[dict]) -> bool:
    return len({(a["decision"], a["final_text"] if a["decision"] in ("accept", "corrected") else "") for a in anns}) == 1


def disagreements(ws: Workspace, lang: str) -> dict[str, list[dict]]:
    """Items whose curators disagree and that no one has adjudicated yet."""
    ops = opinions(ws, lang)
    return {item: anns for item, anns in ops["translation"].items()
            if len(anns) > 1 and not _agree(anns) and item not in ops["adjudication"]}


def _apply(ws: Workspace, lang: str, summary: PullSummary) -> None:
    """Turn decisions on each item's latest proposal into reviews and verified words.

    One curator decides alone; several must agree (decision and text), otherwise the item waits for
    adjudication, whose decision wins and records who adjudicated.
    """
    latest = latest_proposals(ws, lang)
    ops = opinions(ws, lang)
    decided: dict[str, tuple[dict, str]] = {}
    for item, anns in ops["translation"].items():
        if _agree(anns):
            decided[item] = (anns[-1], ", ".join(sorted(a["reviewer"] for a in anns)))
    for item, anns in ops["adjudication"].items():
        decided[item] = (anns[-1], f"{anns[-1]['reviewer']} (adjudicated)")
    verified = {r["item_id"]: r for r in ws.rows(select(t.verified_words).where(t.verified_words.c.lang == lang))}
    ts = now()
    with ws.transaction() as c:
        for item_id, (a, reviewer) in decided.items():
            summary.by_decision[a["decision"]] = summary.by_decision.get(a["decision"], 0) + 1
            existing = c.execute(select(t.reviews).where(t.reviews.c.proposal_id == a["proposal_id"],
                                                         t.reviews.c.channel == "label-studio")).first()
            values = dict(proposal_id=a["proposal_id"], decision=a["decision"], final_text=a["final_text"],
                          reviewer=reviewer, comment=a["comment"], channel="label-studio", created_at=a["updated_at"])
            if existing is None:
                review_id = c.execute(t.reviews.insert().values(**values)).inserted_primary_key[0]
            else:
                review_id = existing.id
                c.execute(t.reviews.update().where(t.reviews.c.id == review_id).values(**values))
            if a["decision"] in ("accept", "corrected"):
                old = verified.get(item_id)
                if old and old["origin"] != "review":
                    continue
                word = VerifiedWord(item_id=item_id, kind=latest[item_id]["kind"], lang=lang, text=a["final_text"],
                                    origin="review", reviewer=reviewer, proposal_id=a["proposal_id"], review_id=review_id)
                if old is None:
                    c.execute(t.verified_words.insert().values(**word.model_dump(), verified_at=ts))
                    summary.verified += 1
                elif old["text"] != word.text or old["review_id"] != review_id or old["reviewer"] != reviewer:
                    c.execute(t.verified_words.update().where(t.verified_words.c.item_id == item_id, t.verified_words.c.lang == lang)
                              .values(**word.model_dump(), verified_at=ts))
            else:
                summary.rejected += 1


def adjudication_tasks(ws: Workspace, lang: str) -> list[dict]:
    """A task per disagreement: the translation task plus what each curator said."""
    base = {tk["data"]["item_id"]: tk for tk in translation_tasks(ws, lang)}
    tasks = []
    for item, anns in sorted(disagreements(ws, lang).items()):
        if item not in base:
            continue
        data = dict(base[item]["data"])
        data["item_key"] = f"adjudication:{lang}:{item}"
        data["opinions"] = " | ".join(f"{a['reviewer']}: {a['decision']} '{a['final_text']}'"
                                      + (f" ({a['comment']})" if a["comment"] else "") for a in anns)
        data.pop("hash", None)
        data["hash"] = task_hash(data)
        tasks.append({**base[item], "data": data})
    return tasks


def rejected_items(ws: Workspace, lang: str) -> dict[str, dict]:
    """Items whose latest proposal a curator rejected or marked ambiguous: item id -> review and proposal."""
    latest = latest_proposals(ws, lang)
    by_proposal = {p["id"]: item_id for item_id, p in latest.items()}
    out = {}
    for r in ws.rows(select(t.reviews).where(t.reviews.c.channel == "label-studio",
                                             t.reviews.c.decision.in_(("reject", "ambiguous")))):
        if r["proposal_id"] in by_proposal:
            item_id = by_proposal[r["proposal_id"]]
            out[item_id] = {**r, "proposal": latest[item_id]}
    return out


def review_status(ws: Workspace) -> list[dict]:
    """Per stage and language: pending, accepted, corrected, rejected, ambiguous, reviewers."""
    out = []
    for proj in ws.rows(select(t.review_projects).order_by(t.review_projects.c.stage, t.review_projects.c.lang)):
        lang, stage = proj["lang"], proj["stage"]
        if stage in ("sentences", "inflections"):
            status = sentences.sentence_status if stage == "sentences" else inflections.inflection_status
            out.append({"stage": stage, "lang": lang, **status(ws, lang)})
            continue
        latest = latest_proposals(ws, lang)
        anns = ws.rows(select(t.review_annotations).where(t.review_annotations.c.lang == lang, t.review_annotations.c.stage == stage)
                       .order_by(t.review_annotations.c.updated_at))
        ops = opinions(ws, lang)
        decided = {}
        for item, item_anns in ops[stage].items():
            if stage == "adjudication" or _agree(item_anns):
                decided[item] = item_anns[-1]["decision"]
        counts = {d: sum(1 for v in decided.values() if v == d) for d in TRANSLATION_DECISIONS}
        pending = len(disagreements(ws, lang)) if stage == "adjudication" else len(latest) - len(decided)
        row = {"stage": stage, "lang": lang, "pending": pending, **counts,
               "reviewers": sorted({a["reviewer"] for a in anns}), "annotations": len(anns),
               "skipped": sum(1 for a in anns if a["cancelled"])}
        if stage == "translation":
            agr = agreement({i: [a["decision"] for a in v] for i, v in ops["translation"].items()},
                            {i: [a["final_text"] for a in v if a["decision"] in ("accept", "corrected")]
                             for i, v in ops["translation"].items()})
            row |= {"disagreements": len(disagreements(ws, lang)), "agreement": agr.model_dump()}
        out.append(row)
    return out
