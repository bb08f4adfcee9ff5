"""Content addressing of requests: the same logical request has the same key on any machine."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def request_key(model: str, messages: list[dict], schema_name: str, schema: dict, temperature: float) -> str:
    logical = {
        "model": model,
        "messages": messages,
        "schema_name": schema_name,
        "schema": schema,
        "temperature": temperature,
    }
    return hashlib.sha256(canonical_json(logical).encode("utf-8")).hexdigest()


TEXT = "text"  # the schema name of plain-text requests in their cache key
DECODING = ("max_tokens", "seed")  # what a plain-text request's key adds to its messages


def text_request_key(model: str, messages: list[dict], decoding: dict, temperature: float) -> str:
    return request_key(model, messages, TEXT, decoding, temperature)


def key_from_wire(body: dict) -> str:
    """The key of a chat-completions body as our client sends it: structured (json_schema) or plain text."""
    temperature = body.get("temperature", 0.0)
    if "response_format" not in body:
        return text_request_key(body["model"], body["messages"], {k: body[k] for k in DECODING if k in body}, temperature)
    js = body["response_format"].get("json_schema") or {}
    return request_key(body["model"], body["messages"], js.get("name", ""), js.get("schema", {}), temperature)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
