"""The JSON schema sent with a structured request: strict-compatible and portable.

Strict structured outputs need every field required and no extra properties. Servers differ in what
else they accept: llama.cpp, vLLM, Azure's older API versions and gateways reject or ignore `$ref`,
`minLength`, `pattern`, `format` and the like. The wire schema therefore inlines references and keeps
only the keywords every major server accepts (`KEYWORDS`); constraints such as non-empty strings
stay in the pydantic models, which check each reply on our side, and a reply that breaks them is
asked again through the client's re-ask loop.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from pydantic import BaseModel

KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf",
                      "description"})


def strict_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A fresh copy each call; the derivation itself is done once per model."""
    return copy.deepcopy(_strict(model))


@cache
def _strict(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(value) for value in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return walk(defs[node["$ref"].rsplit("/", 1)[-1]])
        out = {key: walk(value) for key, value in node.items() if key in KEYWORDS and key != "properties"}
        if "properties" in node:
            out["properties"] = {name: walk(value) for name, value in node["properties"].items()}
            out["required"] = list(node["properties"])
            out["additionalProperties"] = False
        return out

    return walk(schema)
