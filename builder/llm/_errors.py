"""The client's errors: the three a caller may catch (re-exported by `builder.llm.client`), and the two
signals its parts pass among themselves."""

from __future__ import annotations

from typing import Any

from builder.errors import BuilderError


class LLMError(BuilderError):
    """A request failed for good (retries exhausted, or a non-retryable error)."""


class CacheMissError(LLMError):
    """`--offline` was asked and a request is not in the cache."""


class RequestFailed(LLMError):
    """The endpoint gave this one request up for a reason that asking again cannot fix (the items are
    flagged with it): a conversation beyond the model's context, a batch line that failed for good."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Elsewhere(Exception):
    """Another worker holds the request's claim, or has stored its reply."""


class Refused(Exception):
    """The server does not support the response format of the request `body` (its words in `reason`)."""

    def __init__(self, body: dict[str, Any], reason: str) -> None:
        super().__init__(reason)
        self.body = body
        self.reason = reason
