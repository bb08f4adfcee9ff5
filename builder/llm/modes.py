"""Structured-output modes, strongest first, and how a server says it lacks one.

- `json_schema`: strict structured outputs (`response_format: {"type": "json_schema", …}`), as the
  OpenAI API, Azure, vLLM and Ollama accept;
- `json_object`: JSON mode with the schema beside it (`{"type": "json_object", "schema": …}`), which
  llama.cpp's server turns into a grammar and other servers read as plain JSON mode;
- `prompt`: no response format at all; the schema is described in the prompt and the reply's JSON
  is read out of whatever text surrounds it.

In the two weaker modes the schema is also written into the system message, so that the model sees
the shape even where the server ignores the schema. The client finds the strongest mode a server accepts once per
endpoint and model (`builder.llm.client`), before it sends any request of a run.
"""

from __future__ import annotations

from typing import Any, Literal

import openai

from builder.llm.endpoint import server_message
from builder.llm.keys import canonical_json

Mode = Literal["json_schema", "json_object", "prompt"]
MODES: tuple[Mode, ...] = ("json_schema", "json_object", "prompt")

_HINT = "Reply with one JSON object that validates against this JSON schema, and nothing else:\n"

# A server that lacks a response format says so with 400 (OpenAI-compatible servers), 422 (FastAPI
# validation) or 500 (llama-cpp-python: "Input should be 'text' or 'json_object'"), naming the field.
_REFUSAL_STATUS = (400, 422, 500, 501)
_REFUSAL_WORDS = ("response_format", "json_schema", "'json_object'", "structured output")


def response_format(mode: Mode, name: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    if mode == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


def wire_messages(mode: Mode, messages: list[dict[str, str]], schema: dict[str, Any]) -> list[dict[str, str]]:
    """The messages as sent: in the weaker modes the schema is appended to the system message."""
    if mode == "json_schema":
        return messages
    hint = _HINT + canonical_json(schema)
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": messages[0]["content"].rstrip() + "\n\n" + hint}, *messages[1:]]
    return [{"role": "system", "content": hint}, *messages]


def mode_of(body: dict[str, Any]) -> Mode:
    """The mode a request body was sent in."""
    fmt = body.get("response_format")
    return fmt["type"] if fmt else "prompt"


def weaker(mode: Mode) -> Mode:
    """The next mode to try after `mode` was refused (`prompt` needs nothing of the server)."""
    return MODES[min(MODES.index(mode) + 1, len(MODES) - 1)]


def refusal(exc: Exception) -> str | None:
    """The server's words when `exc` says it does not support the response format asked; else None."""
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in _REFUSAL_STATUS:
        return None
    words = server_message(exc)
    return f"HTTP {exc.status_code}: {words}" if any(word in words.lower() for word in _REFUSAL_WORDS) else None
