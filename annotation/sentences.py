"""Sentence-pair review: generated pairs go to curators, who accept, fix or reject them.

A task shows both sentences with the verified words marked, the words themselves and the English
pair; the two sentences are pre-filled as editable drafts. Decisions are recorded against the
version of the pair the curator saw (`builder.sentence_reviews`), so a regenerated pair is reviewed
afresh, and rejected pairs go back to generation with the curator's comment.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Connection as DBConnection

from annotation.tasks import annotation_counts, task_hash, textarea
from annotation.textdiff import edit_distance
from builder.languages import SOURCE_LANGUAGE
from builder.sentence_reviews import current_pairs, decisions
from builder.workspace import schema as t
from builder.workspace.store import Workspace

MARK = ("⟦", "⟧")  # around the verified word's span; plain text, so nothing can render as markup


def mark(sentence: str, span: list[int] | tuple[int, int] | None) -> str:
    if not span:
        return sentence
    start, end = span
    return f"{sentence[:start]}{MARK[0]}{sentence[start:end]}{MARK[1]}{sentence[end:]}"


def sentence_tasks(ws: Workspace, lang: str) -> list[dict]:
    """One task per generated pair in `lang` whose current sentences no curator has decided on."""
    if lang == SOURCE_LANGUAGE:
        return []  # English comes from COMPS itself
    decided = decisions(ws, lang)
    pairs = {r["id"]: r for r in ws.rows(select(t.pairs))}
    english = current_pairs(ws, SOURCE_LANGUAGE)
    words = {r["item_id"]: r["text"] for r in ws.rows(select(t.verified_words).where(t.verified_words.c.lang == lang))}
    models = {r["id"]: r["model"] for r in ws.rows(select(t.llm_calls.c.id, t.llm_calls.c.model))}
    tasks = []
    for pair_id, sp in sorted(current_pairs(ws, lang).items()):
        if pair_id in decided:
            continue
        pair = pairs[pair_id]
        en = english.get(pair_id)
        spans = sp["spans"]
        data = {
            "item_key": f"sentences:{lang}:{pair_id}", "item_id": pair_id, "negative_type": pair["negative_type"],
            "property": words.get(pair["property_id"], "—"), "acceptable_word": words.get(pair["acceptable_id"], "—"),
            "unacceptable_word": words.get(pair["unacceptable_id"], "—"),
            "english": f"{en['acceptable']} / {en['unacceptable']}" if en else "—",
            "acceptable": mark(sp["acceptable"], spans.get("acceptable_concept")),
            "unacceptable": mark(sp["unacceptable"], spans.get("unacceptable_concept")),
            "flag": sp["reason"] or "—", "version": sp["version"],
            "draft_acceptable": sp["acceptable"], "draft_unacceptable": sp["unacceptable"],
        }
        data["hash"] = task_hash(data)
        tasks.append({
            "data": data, "model": models.get(sp["llm_call_id"], "llm"),
            "prediction": [textarea("acceptable_fixed", "acceptable", sp["acceptable"]),
                           textarea("unacceptable_fixed", "unacceptable", sp["unacceptable"])],
        })
    return tasks


def record(c: DBConnection, url: str, lang: str, annotation_id: int, data: dict, fields: dict, *,
           first_pull: bool) -> dict:
    """Store the sentences an annotation left; return its `review_annotations` fields.

    The version the annotation was made on is fixed at its first pull: a later edit of the same
    annotation still belongs to the sentences the curator saw then.
    """
    s = t.sentence_reviews
    old = None if first_pull else c.execute(select(s).where(s.c.annotation_id == annotation_id, s.c.url == url)).first()
    version = old.version if old else data["version"]
    draft = (data["draft_acceptable"], data["draft_unacceptable"])
    final = (fields.get("acceptable_fixed") or draft[0], fields.get("unacceptable_fixed") or draft[1])
    values = dict(pair_id=data["item_id"], lang=lang, version=version, acceptable=final[0],
                  unacceptable=final[1])
    if old:
        c.execute(s.update().where(s.c.annotation_id == annotation_id, s.c.url == url).values(**values))
    else:
        c.execute(s.insert().values(annotation_id=annotation_id, url=url, **values))
    return dict(item_id=data["item_id"], proposal_id=None, final_text=f"{final[0]}\n{final[1]}",
                edit_distance=edit_distance(draft[0], final[0]) + edit_distance(draft[1], final[1]))


def rejected_pairs(ws: Workspace, lang: str) -> dict[str, str]:
    """pair id -> the curator's comment, for pairs whose current sentences were rejected."""
    return {pid: d.comment for pid, d in decisions(ws, lang).items() if d.decision == "reject"}


def sentence_status(ws: Workspace, lang: str) -> dict:
    """Pending, accepted, fixed and rejected pairs and who reviewed them."""
    decided = decisions(ws, lang)
    total = len(current_pairs(ws, lang))
    counts = {d: sum(1 for r in decided.values() if r.decision == d) for d in ("accept", "fix", "reject")}
    return {"pending": total - len(decided), **counts, **annotation_counts(ws, "sentences", lang)}
