"""Stage-independent pieces of Label Studio tasks and annotations."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select

from builder.workspace import schema as t
from builder.workspace.store import Workspace


def task_hash(data: dict) -> str:
    """Fingerprint of a task's data: an unchanged task is skipped on the next push, a changed one updated."""
    return hashlib.sha256(json.dumps(data, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:16]


def when(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


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
            fields[r["from_name"]] = "\n".join((text if isinstance(text, list) else [text])).strip()
    return fields


def annotation_counts(ws: Workspace, stage: str, lang: str) -> dict:
    """Who annotated a stage's tasks in a language, how many annotations, how many were skipped."""
    a = t.review_annotations
    anns = ws.rows(select(a.c.reviewer, a.c.cancelled).where(a.c.lang == lang, a.c.stage == stage))
    return {"reviewers": sorted({r["reviewer"] for r in anns}), "annotations": len(anns),
            "skipped": sum(1 for r in anns if r["cancelled"])}
