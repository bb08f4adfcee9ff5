"""Typed records that flow between stages, and their deterministic ids.

Ids are derived from the English source alone (never from row order, time or machine), so the same
seed data yields the same ids everywhere and a pair's id is shared by all of its languages.
"""

from __future__ import annotations

import hashlib
import unicodedata
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from builder.inputs import NAME_CHARS, text_problem, visible

NegativeType = Literal["taxonomic", "overlap", "co-occurrence", "random"]
NEGATIVE_TYPES: tuple[str, ...] = ("taxonomic", "overlap", "co-occurrence", "random")
ItemKind = Literal["concept", "property"]
Typology = Literal["analytic", "inflectional", "agglutinative"]
PromptVariant = Literal["paper", "corrected"]  # which of a language's meta prompts an evaluation asks
PROMPT_VARIANTS: tuple[str, ...] = ("paper", "corrected")


def english_key(text: str) -> str:
    """The form of English source text that ids derive from and names are matched on: NFC, invisible characters
    dropped (`inputs.visible`), trimmed, single spaces, lower case."""
    return " ".join(visible(unicodedata.normalize("NFC", text)).split()).casefold()


def _digest(*parts: str) -> str:
    return hashlib.blake2b("\x1f".join(parts).encode("utf-8"), digest_size=6).hexdigest()


def concept_id(english: str) -> str:
    return "c_" + _digest("concept", english_key(english))


def property_id(english: str) -> str:
    return "p_" + _digest("property", english_key(english))


def pair_id(property_: str, acceptable: str, unacceptable: str) -> str:
    return "x_" + _digest("pair", property_id(property_), concept_id(acceptable), concept_id(unacceptable))


def group_id(property_: str, acceptable: str) -> str:
    """A concept-property: the acceptable sentence shared by all negatives of one positive."""
    return "g_" + _digest("group", property_id(property_), concept_id(acceptable))


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Language(Record):
    code: str = Field(pattern=r"^[a-z]{2,3}$")
    name: str = Field(min_length=1)
    native_name: str | None = None
    typology: Typology
    family: str = Field(min_length=1)
    script: str = Field(pattern=r"^[A-Z][a-z]{3}$")
    direction: Literal["ltr", "rtl"] = "ltr"
    spaced: bool = True
    meta_prompt: str | None = None  # the paper's Figure 8 prompt, byte for byte where the paper has one
    # The meta prompt with the paper's mistakes corrected (a yes/no question, broken agreement, Latin punctuation in
    # a script with its own); None where the paper's prompt is right, and where a release declares none.
    corrected_meta_prompt: str | None = None
    generation_notes: str = ""
    builtin: bool = True

    @field_validator("name", "native_name", "family", "meta_prompt", "corrected_meta_prompt", "generation_notes")
    @classmethod
    def _text(cls, v: str | None, info: ValidationInfo) -> str | None:
        """No control characters, and a sane length (`builder.inputs`): a declaration is stored and released."""
        short = info.field_name in ("name", "native_name", "family")
        problem = None if v is None else text_problem(v, limit=NAME_CHARS if short else None)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("meta_prompt", "corrected_meta_prompt")
    @classmethod
    def _placeholders(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None:
            missing = [p for p in ("{property}", "{word1}", "{word2}") if p not in v]
            if missing:
                raise ValueError(f"{info.field_name} lacks placeholder(s) {', '.join(missing)}")
        return v

    def prompt(self, variant: PromptVariant = "paper") -> str | None:
        """The meta prompt of `variant` ("paper" or "corrected"); the corrected variant is the paper's prompt
        where that needed no correction."""
        return (self.corrected_meta_prompt or self.meta_prompt) if variant == "corrected" else self.meta_prompt


class Concept(Record):
    id: str
    english: str
    category: str | None = None


class Property(Record):
    id: str
    english: str
    phrase: str


class Pair(Record):
    """A concept-property minimal pair; its id is the same in every language."""

    id: str
    group_id: str
    property_id: str
    acceptable_id: str
    unacceptable_id: str
    negative_type: NegativeType
    similarity: float | None = None
    prefix_acceptable: str
    prefix_unacceptable: str


class SeedTranslation(Record):
    item_id: str
    kind: ItemKind
    lang: str
    text: str
    translator: str
    source: str  # file:line the expert translation came from


class LLMCall(Record):
    id: str
    request_key: str
    model: str
    prompt_hash: str
    stage: str
    lang: str | None
    source: Literal["api", "recording", "batch"]
    tokens_in: int
    tokens_out: int
    latency_ms: float
    cost_usd: float | None  # None: the model is not in the price table
    created_at: datetime
    mode: str  # the structured-output mode sent (builder.llm.modes), or "text"
    max_tokens: int | None  # None only for a batch submitted before requests carried one


class Proposal(Record):
    """What the LLM proposed for one item in one language; revisions come from re-proposals."""

    item_id: str
    kind: ItemKind
    lang: str
    revision: int = 1
    text: str
    alternatives: list[str] = []
    note: str = ""
    ambiguous: bool = False
    llm_call_id: str


class VerifiedWord(Record):
    item_id: str
    kind: ItemKind
    lang: str
    text: str
    origin: Literal["source", "seed", "review"]
    reviewer: str | None = None
    proposal_id: int | None = None
    review_id: int | None = None
    seed_id: int | None = None


class SentencePair(Record):
    """Both sentences of a pair in one language; spans are [start, end) character offsets."""

    pair_id: str
    lang: str
    acceptable: str
    unacceptable: str
    spans: dict[str, tuple[int, int] | None]
    acceptable_form: str
    unacceptable_form: str
    status: Literal["generated", "flagged"]
    reason: str = ""
    origin: Literal["llm", "comps"]
    llm_call_id: str | None = None
