"""Review stages: each stage one record (`ReviewStage`) in one registry, as lm-evaluation-harness registers a task.

A record says everything about a stage: the decisions its curators choose from and what each means, which of
them leave a text, what a decision is made on (`made_on`: an item's latest proposal, a pair's sentences, a
lemma's table), the tasks it asks now (`tasks`: typed `Task` rows), the screen curators see (`Screen`) and
their instructions (`Instructions`), how an annotation's edits are read (`edit`), what a settled decision does
(`decide`), how many items wait (`pending`) and, for a stage whose items wait before it has a project, which
(`waiting`: `builder status` asks for a push of them). Its adjudication stage (the adjudicator settles its curators'
disagreements) comes with it. `builder.reviews` records and settles decisions and `annotation` shows tasks
and reads annotations, each from the record alone: a stage is one `register(ReviewStage(...))` call, in a
module of this package named in `MODULES` (the stages shipped) or anywhere else (a test's).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field
from sqlalchemy import select

from builder.errors import InputError
from builder.llm.served import model_label
from builder.records import Record
from builder.workspace import schema as t
from builder.workspace.store import Workspace

__all__ = [
    "EDIT_FIELD", "MODULES", "VERSIONS_NOTE", "Box", "Instructions", "MadeOn", "ReviewStage", "Screen", "Task", "Text",
    "Version", "base_stage", "call_models", "inflections", "judge", "register", "review_stage", "sentences",
    "stage_names", "stages", "translation",
]

MODULES = ("builder.review_stages.translation", "builder.review_stages.sentences", "builder.review_stages.inflections",
           "builder.review_stages.judge")
STAGE_NAME_LENGTH = 16  # the `stage` columns of the review tables

# What a decision is made on, and so which edit an annotation carries (`builder.reviews.Annotation`): the item's
# latest proposal (`TranslationEdit`), the version of a pair's sentences (`SentenceEdit`), or of a lemma's proposed
# table (`FormsEdit`).
# Over the boxes of an adjudication: what they start with.
VERSIONS_NOTE = ("one curator's version to start with; each curator's is a tab at the top, named by the curator, whose ⋮ "
                 "menu has Duplicate Annotation to start from it")
MadeOn = Literal["proposal", "pair", "table"]
EDIT_FIELD = {"proposal": "translation", "pair": "sentences", "table": "forms"}


@dataclass(frozen=True)
class Text:
    """An item's text under its own header, in the language's direction (a sentence)."""

    label: str
    name: str  # the task data column it shows


@dataclass(frozen=True)
class Box:
    """An editable box the curator's text goes in, about the shown text `to`."""

    name: str
    to: str
    rows: int = 1


@dataclass(frozen=True)
class Screen:
    """What a curator sees: `{what} {language}` and its `detail` as the heading; `facts` (label, data column) beside
    the item; a `note` over the `body` (texts and boxes, in the language's direction); the decision about `to`."""

    what: str
    facts: tuple[tuple[str, str], ...]
    body: tuple[Text | Box, ...]
    to: str
    detail: str = ""
    note: str = ""
    note_size: int = 5
    versions_note: str = ""  # the note of its adjudication (where the boxes start from)

    def box(self, name: str) -> Box:
        return next(part for part in self.body if isinstance(part, Box) and part.name == name)


@dataclass(frozen=True)
class Instructions:
    """What a project's instructions say (curators read English; "{lang}" stands for the language)."""

    heading: str  # "{lang}": the language's name and code
    intro: str  # what a task is
    check: str  # what to check ("{lang}": the language's name)
    comment: str  # the comment box's label
    adjudicated: str  # what its adjudication is of ("translations into {lang}")


class Version(Record):
    """One curator's text of a disputed item, offered to the adjudicator (`name (decision)` of those who left it)."""

    model_version: str
    drafts: dict[str, str]


class Task(Record):
    """A task a stage asks: the data it shows (with `item_key` and `item_id`), the drafts that pre-fill its boxes
    (box name -> text) under the model that wrote them, and, for an adjudication, each curator's version instead."""

    data: dict[str, Any]
    model: str
    drafts: dict[str, str] = Field(default_factory=dict)
    versions: tuple[Version, ...] = ()

    @property
    def item_key(self) -> str:
        return self.data["item_key"]

    @property
    def item_id(self) -> str:
        return self.data["item_id"]


@dataclass(frozen=True)
class ReviewStage:
    """One review stage; see the module's docstring. Hooks take the workspace and the language."""

    name: str
    adjudication: str  # the stage whose adjudicator settles this one's disagreements
    decisions: dict[str, str]  # decision -> what choosing it means (screens, instructions and the curator guide say it)
    made_on: MadeOn
    tasks: Callable[[Workspace, str], list[Task]]  # the items waiting for a curator, one task each
    edit: Callable[[dict, dict], Record]  # (task data, the annotation's texts by box name) -> its edit record
    screen: Screen
    instructions: Instructions
    pending: Callable[[Workspace, str, int], int]  # items waiting for a decision, given how many are settled
    textual: tuple[str, ...] = ()  # decisions that leave a text: curators who take one agree only on the same text
    # What a settled decision does: (ws, lang, items with a new, changed or withdrawn annotation, the pull's summary)
    # -> the items whose curators disagree; None: decisions are recorded and settled, nothing else follows.
    decide: Callable[..., set[str]] | None = None
    every_pull: bool = False  # decided at every pull in each language with a project, not only where annotations moved
    versions: Callable[[Any], dict[str, str]] | None = None  # a curator's `reviews.Opinion` -> the boxes' texts it left
    # The items waiting for a curator in a language whether or not the stage has a project there (the next steps ask
    # for a push of those no curators dispute); None: those its project counts `pending`, once it has one.
    waiting: Callable[[Workspace, str], Collection[str]] | None = None
    released_in: Literal["pairs", "m2c"] | None = None  # the released rows it decides: their card reports its agreement

    def leaves_text(self, decision: str | None) -> bool:
        """Whether `decision` keeps a text of the curator's: a version of the item an adjudicator may take."""
        return decision in self.textual

    def names(self) -> tuple[str, str]:
        return self.name, self.adjudication


_REGISTRY: dict[str, ReviewStage] = {}
# (the registry it was read from, stages in order, every stage and adjudication name -> its stage): a lookup per
# annotation of a pull must not import and sort each time.
_read: tuple[dict, tuple[ReviewStage, ...], dict[str, ReviewStage]] | None = None


def register(stage: ReviewStage) -> ReviewStage:
    """Add a stage (its adjudication comes with it); a name another stage (or its adjudication) has is refused."""
    global _read
    if _REGISTRY.get(stage.name) == stage:
        return stage
    taken = {name for other in _REGISTRY.values() for name in other.names()}
    for name in stage.names():
        if name in taken or not 0 < len(name) <= STAGE_NAME_LENGTH or stage.name == stage.adjudication:
            raise ValueError(f"review stage {stage.name}: name {name!r} is taken or not 1 to {STAGE_NAME_LENGTH} characters")
    missing = [d for d in stage.textual if d not in stage.decisions]
    if missing:
        raise ValueError(f"review stage {stage.name}: textual decisions {missing} are not among its decisions")
    _REGISTRY[stage.name] = stage
    _read = None
    return stage


def _registered() -> tuple[tuple[ReviewStage, ...], dict[str, ReviewStage]]:
    global _read
    if _read is None or _read[0] is not _REGISTRY:
        for module in MODULES:
            importlib.import_module(module)
        rank = {m: i for i, m in enumerate(MODULES)}  # in MODULES order, whatever was imported first
        ordered = tuple(sorted(_REGISTRY.values(), key=lambda stage: rank.get(stage.tasks.__module__, len(rank))))
        _read = (_REGISTRY, ordered, {name: stage for stage in ordered for name in stage.names()})
    return _read[1], _read[2]


def stages() -> tuple[ReviewStage, ...]:
    """Every reviewed stage, the shipped ones first in `MODULES` order."""
    return _registered()[0]


def stage_names() -> tuple[str, ...]:
    """Every stage a project may serve: each reviewed stage, then its adjudication."""
    return tuple(_registered()[1])


def review_stage(name: str) -> ReviewStage:
    """The stage `name` decides the items of: itself, or the stage its adjudication settles."""
    found = _registered()[1].get(name)
    if found is None:
        raise InputError(f"unknown review stage {name!r}: {', '.join(stage_names())}")
    return found


def base_stage(name: str) -> str:
    """The stage whose items `name` decides: itself, or the stage an adjudication stage settles."""
    return review_stage(name).name


def call_models(ws: Workspace, lang: str) -> dict[str, str]:
    """LLM call id -> model, for the calls made for `lang`: a task names the model whose draft it shows.
    (Only that language's calls: in a workspace of many languages, the others' would be most of the table.)"""
    calls = t.llm_calls
    return {r["id"]: model_label(r["model"]) for r in ws.rows(select(calls.c.id, calls.c.model).where(calls.c.lang == lang))}
