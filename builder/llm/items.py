"""Reading a reply that answers several items at once, and saying what is wrong with it.

A batch reply is one JSON object whose single field lists the items, each with an `id`. Every item
asked for is either good (it validates against the item model) or has a problem of one of five
kinds, which is what a follow-up request says and what a flag keeps when the loop gives up:

- `missing`: the reply has no item with this id;
- `wrong id`: the reply has no item with this id but answers ids that were never asked (the model
  most likely garbled this one's);
- `invalid`: the item fails the item model or the stage's own check, with that check's message;
- `unreadable`: the reply as a whole is not such a JSON object;
- `failed`: no reply came, for a reason the server gave (a request beyond the model's context, a
  batch line that failed): nothing to ask again in the same conversation.

A reply is read as JSON as it is, or else from the first fenced block or outermost braces in it: a
server asked for JSON only in the prompt may wrap it in prose or a Markdown fence.

Pure functions, so the classification can be read and tested on its own.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError

V = TypeVar("V")
ProblemKind = Literal["missing", "wrong id", "invalid", "unreadable", "failed"]
_LABELS = {"missing": "missing from the reply", "wrong id": "wrong id", "invalid": "failed validation",
           "unreadable": "unreadable reply", "failed": "request failed"}
_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


@dataclass(frozen=True)
class Rejected:
    """A stage's check refusing an item that the item model accepted; `reason` goes back to the model."""

    reason: str


@dataclass(frozen=True)
class ItemProblem:
    kind: ProblemKind
    detail: str = ""

    @property
    def reason(self) -> str:
        """The kind in words, then the detail: what a follow-up says and a flag keeps."""
        return _LABELS[self.kind] + (f": {self.detail}" if self.detail else "")


# A stage's check of one reply: the items that validated, by id -> each one's accepted value or why not.
BatchCheck = Callable[[Mapping[str, Any]], Mapping[str, Any]]


def per_item(check: Callable[[Any], V | Rejected]) -> BatchCheck:
    """A check that looks at one item at a time, as a check of the whole reply."""
    return lambda items: {item_id: check(item) for item_id, item in items.items()}


def accept_all(items: Mapping[str, Any]) -> Mapping[str, Any]:
    """The default check: an item that validates against the item model is the accepted value."""
    return dict(items)


def item_list(schema: type[BaseModel]) -> tuple[str, type[BaseModel]]:
    """The name of a batch schema's one field and the model of the items it lists."""
    fields = list(schema.model_fields.items())
    if len(fields) == 1:
        name, info = fields[0]
        args = typing.get_args(info.annotation)
        if typing.get_origin(info.annotation) is list and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
            if "id" in args[0].model_fields:
                return name, args[0]
    raise TypeError(f"{schema.__name__} is not a batch schema: one field listing items that each have an `id`")


def read_items(text: str, schema: type[BaseModel], asked: Collection[str], known: Collection[str]
               ) -> tuple[dict[str, BaseModel], dict[str, ItemProblem]]:
    """The good items among those `asked`, and a problem for every other asked id.

    `known` are all ids of the original request: an answer for one of them that was not asked again
    (already accepted) is ignored; an answer for any other id is a wrong id.
    """
    field, model = item_list(schema)
    try:
        raw = json_reply(text)
        if not isinstance(raw, dict) or field not in raw:
            raise ValueError(f"expected a JSON object with the field {field!r}")
        if not isinstance(raw[field], list):
            raise ValueError(f"{field!r} is not a list")
    except json.JSONDecodeError as exc:
        return {}, dict.fromkeys(asked, ItemProblem("unreadable", f"not valid JSON ({exc.msg} at column {exc.colno})"))
    except ValueError as exc:
        return {}, dict.fromkeys(asked, ItemProblem("unreadable", str(exc)))
    good: dict[str, BaseModel] = {}
    invalid: dict[str, str] = {}
    unasked: list[str] = []
    for n, entry in enumerate(raw[field]):
        item_id = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(item_id, str) or not item_id:
            unasked.append(f"item #{n + 1} without an id")
            continue
        if item_id not in asked:
            if item_id not in known:
                unasked.append(item_id)
            continue
        if item_id in good:
            continue
        try:
            good[item_id] = model.model_validate(entry)
        except ValidationError as exc:
            invalid.setdefault(item_id, validation_message(exc))
    absent = ItemProblem("wrong id", f"the reply answered {', '.join(unasked)}, which {'was' if len(unasked) == 1 else 'were'} "
                         "not asked") if unasked else ItemProblem("missing")
    problems = {i: ItemProblem("invalid", invalid[i]) if i in invalid else absent for i in asked if i not in good}
    return good, problems


def json_reply(text: str) -> Any:
    """The JSON value of a reply: the text itself, or the JSON inside its first fence or outermost braces."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        fenced = _FENCED.search(text)
        start, end = text.find("{"), text.rfind("}")
        for inner in (fenced.group(1) if fenced else None, text[start:end + 1] if 0 <= start < end else None):
            if inner and inner.strip() != text.strip():
                try:
                    return json.loads(inner)
                except json.JSONDecodeError:
                    pass
        raise


def validation_message(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()[:10])


def followup_message(problems: Mapping[str, ItemProblem], field: str, instruction: str = "") -> str:
    """The follow-up request: each item still wanted with what was wrong, and how to reply."""
    lines = "\n".join(f"- {item_id}: {p.reason}" for item_id, p in problems.items())
    return (f"These items were missing or invalid:\n{lines}\n{instruction + ' ' if instruction else ''}"
            f'Reply again with a JSON object {{"{field}": [...]}} holding only those items.')


def earlier_message(reasons: Mapping[str, str]) -> str:
    """What a run's first request adds for items an earlier run gave up on: each with why, so the model avoids it."""
    lines = "\n".join(f"- {item_id}: {reason}" for item_id, reason in reasons.items())
    return f"\n\nAn earlier answer for these items could not be used:\n{lines}\nAvoid the same mistake this time."


@dataclass
class ItemsOutcome(Generic[V]):
    """What the loop ended with: the accepted values (already stored), and the items given up on."""

    accepted: dict[str, V]
    flags: dict[str, ItemProblem]
    last_call_id: str | None = None  # the call whose reply was read last (lineage for flagged records)
    deferred: bool = False  # a dry run or a batch took the request: nothing was read yet

    @property
    def reasons(self) -> dict[str, str]:
        """Why each item given up on was flagged, by item id."""
        return {item_id: problem.reason for item_id, problem in self.flags.items()}
