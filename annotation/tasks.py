"""Stage-independent pieces of Label Studio tasks and annotations."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from typing import Any


def task_hash(data: dict) -> str:
    """Fingerprint of a task's data: an unchanged task is skipped on the next push, a changed one updated."""
    return hashlib.sha256(json.dumps(data, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:16]


def textarea(name: str, to: str, text: str) -> dict:
    """A prediction result that pre-fills a TextArea, so the curator edits a draft."""
    return {"from_name": name, "to_name": to, "type": "textarea", "value": {"text": [text]}}


def parse_annotation(ann: dict) -> dict:
    """The decision and every text field of one annotation, by control name."""
    fields: dict[str, Any] = {}
    for r in ann.get("result") or []:
        value = r.get("value") or {}
        if r.get("from_name") == "decision" and value.get("choices"):
            fields["decision"] = value["choices"][0]
        elif value.get("text") is not None:
            text = value["text"]
            fields[r["from_name"]] = "\n".join(text if isinstance(text, list) else [text]).strip()
    return fields


def revision(data: dict) -> Any:
    """What a task asks about: the proposal (a translation) or the version (a pair, a table) its item had when it
    was pushed. An item asked again after annotations gets a task of its own; tasks of one revision are copies."""
    return data.get("proposal_id", data.get("version"))


def one_task_per_item(tasks: Iterable[dict]) -> Iterator[tuple[dict, dict]]:
    """(task, annotation) for each annotation of a project's export, as if each item had one task per revision: the
    annotations on copies of an item's task (two pushes at once, before pushes were locked) are the oldest copy's, and
    of one curator's annotations on the copies only the latest counts, as when a curator revises an annotation. A task
    of another revision keeps its own annotations, superseded or not (a push cut short between importing a revision's
    task and closing the old one leaves both open)."""
    copies: dict[Any, list[dict]] = {}
    for task in sorted(tasks, key=lambda task: task["id"]):
        data = task.get("data") or {}
        copies.setdefault(task["id"] if "superseded_by" in data or "item_key" not in data
                          else (data["item_key"], revision(data)), []).append(task)
    for first, *others in copies.values():
        anns = [ann for task in (first, *others) for ann in task.get("annotations") or []]
        if others:
            latest = {}
            for ann in sorted(anns, key=lambda ann: ann.get("updated_at") or ann["created_at"]):
                latest[ann.get("completed_by")] = ann
            anns = list(latest.values())
        for ann in anns:
            yield first, ann
