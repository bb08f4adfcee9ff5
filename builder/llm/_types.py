"""The records the client's parts hand each other and its callers: requests, replies, plans, counters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

T = TypeVar("T", bound=BaseModel)

PLAN_SAMPLES = 3  # requests a dry run shows in full


@dataclass(frozen=True)
class Request:
    """A logical chat request: what the key is computed from."""

    messages: tuple[tuple[str, str], ...]
    schema_name: str
    stage: str
    lang: str | None
    prompt_hash: str
    expected_output_tokens: int = 200

    @property
    def max_tokens(self) -> int:
        """The cap on a structured reply: twice the expected length, for verbose replies and scripts that
        take more tokens per word, plus room for the JSON around the items."""
        return 2 * self.expected_output_tokens + 100

    def as_messages(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]

    def followup(self, reply_text: str, feedback: str) -> Request:
        """The same conversation, with our reply and what was wrong with it: a re-ask."""
        msgs = self.messages + (("assistant", reply_text), ("user", feedback))
        return Request(msgs, self.schema_name, self.stage, self.lang, self.prompt_hash, self.expected_output_tokens)


@dataclass
class Reply(Generic[T]):
    value: T | None
    text: str
    call_id: str
    request: Request
    error: str | None = None  # why `value` is None (invalid JSON or schema)


@dataclass(frozen=True)
class TextReply:
    text: str
    call_id: str


@dataclass(frozen=True)
class Got:
    """A request's reply as read back: its text, its call, and whether max_tokens cut it off."""

    text: str
    call_id: str
    cut_off: bool


@dataclass
class Plan:
    """What a dry run (or a batch submission) would send."""

    requests: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    mode: str | None = None
    mode_assumed: bool = False  # a dry run probes nothing: the mode is the strongest, unless one was recorded
    samples: list[dict[str, Any]] = field(default_factory=list)  # the first PLAN_SAMPLES request bodies


@dataclass
class Stats:
    sent: int = 0
    retries: int = 0
    cache_hits: int = 0
    reasks: int = 0  # follow-up requests of the re-ask loop (from the cache or sent)
    failures: int = 0
    probes: int = 0  # requests that found the structured-output mode
    by_error: dict[str, int] = field(default_factory=dict)
    cost_usd: float = 0.0  # of the calls stored in this run whose price is known
    unpriced: dict[str, int] = field(default_factory=dict)  # model with no price at this endpoint -> calls stored
    notices: list[str] = field(default_factory=list)  # what the client decided by itself: the model, lower limits
