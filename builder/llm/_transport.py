"""Sending one chat completion: the concurrency slot, the claim, retries with back-off, and what a failure means.

Retries go through `tenacity`, not the SDK (built with `max_retries=0`): the SDK's retries are invisible
to the client, so they could not be counted (`Stats.retries`, `Stats.by_error`), bounded by our settings,
told apart from a refused response format or a conversation beyond the model's context (never retried),
nor spare a connection refused before the endpoint ever answered (nothing is listening there).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import httpx2
import openai
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from builder.llm import endpoint
from builder.llm._errors import Elsewhere, LLMError, Refused, RequestFailed
from builder.llm._types import Stats
from builder.llm.config import LLMSettings
from builder.llm.endpoint import Credentials
from builder.llm.modes import refusal
from builder.llm.pacing import Pacer

RETRYABLE = (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)


class Transport:
    """POSTs chat completions through the SDK for one client; `settings()` gives the client's settings as they are
    now (the model is settled after construction), `claim(key)` takes or renews a request's claim."""

    def __init__(self, sdk: openai.AsyncOpenAI, settings: Callable[[], LLMSettings], credentials: Credentials,
                 pacer: Pacer, stats: Stats, claim: Callable[[str], bool]) -> None:
        self.sdk = sdk
        self.settings = settings
        self.credentials = credentials
        self.pacer = pacer
        self.stats = stats
        self._claim = claim
        self._reached = False  # a reply came: a connection error from now on is transient

    async def post(self, make_body: Callable[[], dict[str, Any]], what: str,
                   claim: str | None = None) -> tuple[dict, dict, float]:
        """POST one chat completion with bounded retries: the body sent, the response and its latency in ms.

        With `claim` (a request key), each attempt first takes, or renews, the request's claim in its
        concurrency slot, for one time-out and a margin, so that it cannot run out while the attempt is
        in flight; `Elsewhere` when another worker holds it or has stored its reply.

        Raises `Refused` when the server lacks the response format asked (never retried), `RequestFailed`
        when the conversation exceeds the model's context, and `LLMError` naming the endpoint and the
        likely fix for everything else that retrying does not cure.
        """
        sent: dict[str, Any] = {}
        retrying = AsyncRetrying(stop=stop_after_attempt(self.settings().max_retries + 1),
                                 retry=retry_if_exception(self._worth_retrying), wait=self._wait,
                                 before_sleep=self._count_retry, reraise=True)
        try:
            async for attempt in retrying:
                with attempt:
                    sent = {}
                    async with self.pacer.slot() as ticket:
                        if claim is not None and not self._claim(claim):
                            raise Elsewhere
                        sent = make_body()
                        started = time.perf_counter()
                        self.stats.sent += 1
                        # The SDK's own request path (auth, errors, time-outs) with our body as is: its typed
                        # parameter transform costs milliseconds of CPU per call and changes nothing here.
                        try:
                            response = await self.sdk.post("/chat/completions", body=sent, cast_to=object)
                        except openai.APITimeoutError:
                            self.pacer.timed_out(ticket)
                            raise
                        latency = (time.perf_counter() - started) * 1000
                        if not isinstance(response, dict):
                            response = {"choices": [{"message": {"content": str(response)}}]}
                        self.pacer.replied(latency / 1000, _completion_tokens(response))
                    self._reached = True
                    return sent, response, latency
        except openai.APIError as exc:
            refused = refusal(exc)
            if refused is not None:
                raise Refused(sent, self.scrub(refused)) from exc
            self.stats.failures += 1
            if _context_exceeded(exc):
                raise RequestFailed(f"beyond the model's context: {self.scrub(endpoint.server_message(exc))}") from exc
            raise LLMError(await self._explain(exc, what, retrying.statistics["attempt_number"])) from exc
        raise AssertionError("tenacity ends with a return or an exception")  # pragma: no cover

    def _worth_retrying(self, exc: BaseException) -> bool:
        """Rate limits, server errors, time-outs and dropped connections; not a refused response format or a
        conversation beyond the context, nor a connection refused before the endpoint ever answered."""
        if not isinstance(exc, openai.APIError) or refusal(exc) is not None or _context_exceeded(exc):
            return False
        if isinstance(exc, openai.APIConnectionError) and isinstance(exc.__cause__, httpx2.ConnectError):
            return self._reached
        return isinstance(exc, RETRYABLE)

    def _wait(self, state: RetryCallState) -> float:
        return backoff(state.attempt_number - 1, state.outcome.exception(), self.settings())

    def _count_retry(self, state: RetryCallState) -> None:
        name = type(state.outcome.exception()).__name__
        self.stats.by_error[name] = self.stats.by_error.get(name, 0) + 1
        self.stats.retries += 1

    async def _explain(self, exc: openai.APIError, what: str, attempts: int) -> str:
        """What went wrong, with the endpoint's (redacted) URL and the likely fix."""
        settings = self.settings()
        url = settings.endpoint
        if settings.source == "recording":
            return f"{what} failed: {self.brief(exc)}"
        if isinstance(exc, openai.APIConnectionError) and isinstance(exc.__cause__, httpx2.ConnectError) and not self._reached:
            return endpoint.unreachable(url, exc.__cause__)
        if isinstance(exc, openai.APITimeoutError):
            return (f"{what} to {url} timed out {attempts} times ({settings.timeout_s:g} s each): a server that "
                    "answers one request at a time needs a lower --concurrency or a longer BUILDER_LLM_TIMEOUT")
        if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
            return endpoint.key_refused(url, exc.status_code, self.credentials)
        if isinstance(exc, openai.NotFoundError):
            return await endpoint.not_found(self.sdk, url, settings.model)
        if isinstance(exc, RETRYABLE):
            return f"{what} to {url} failed after {attempts} attempts: {self.brief(exc)}"
        return f"{what} rejected by the LLM endpoint {url}: {self.brief(exc)}"

    def brief(self, exc: Exception) -> str:
        return self.scrub(f"{type(exc).__name__}: {str(exc)[:300]}")

    def scrub(self, text: str) -> str:
        settings = self.settings()
        key = settings.api_key.get_secret_value() if settings.api_key else None
        return endpoint.scrub(text, settings.base_url, key)


def backoff(attempt: int, exc: BaseException | None, settings: LLMSettings) -> float:
    """Seconds before retry `attempt` (from 0): exponential back-off with jitter between half the cap and the cap;
    a server's Retry-After wins when it gives one."""
    response = getattr(exc, "response", None)
    if response is not None:
        ra = response.headers.get("retry-after-ms")
        if ra:
            return min(float(ra) / 1000, settings.backoff_max_s)
        ra = response.headers.get("retry-after")
        if ra:
            try:
                return min(float(ra), settings.backoff_max_s)
            except ValueError:
                pass
    cap = min(settings.backoff_max_s, settings.backoff_base_s * 2**attempt)
    return random.uniform(cap / 2, cap)


def _completion_tokens(response: dict) -> int:
    try:
        return int((response.get("usage") or {}).get("completion_tokens") or 0)
    except (TypeError, ValueError):
        return 0


def _context_exceeded(exc: openai.APIError) -> bool:
    """The request is longer than the model's context (OpenAI, vLLM and llama.cpp all say so with a 400)."""
    if not isinstance(exc, openai.BadRequestError):
        return False
    return exc.code == "context_length_exceeded" or "maximum context length" in str(exc).lower()
