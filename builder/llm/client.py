"""The LLM client: official `openai` SDK (async), structured outputs, retries, cache, batches.

A request is identified by its content (model, messages, wire schema, temperature). Its reply is
stored in the cache together with the call record in one transaction, the moment it arrives, so a
re-run or a resumed run never sends an identical request twice. Requests for several items at once
go through one loop (`ask_items`) that keeps what is good and asks again for the rest.

Structured requests go out in one structured-output mode (`builder.llm.modes`), settled before the
first of a run is sent and awaited by all the others, so none races the choice: the mode recorded in
the cache for this endpoint and model, or else the strongest one a tiny probe request finds accepted,
recorded then. Should the server later refuse the recorded mode (another server behind the same URL),
the client moves to the next weaker mode and sends the refused requests again in it. Every request
carries a `max_tokens` derived from what it asks for; mode and `max_tokens` are stored with the call.

The model is settled before that, once: the one set, or else the one the endpoint serves
(`builder.llm.served`), so that the model recorded and priced with each call is the one that did the
work. How many requests go out at once, and how many items each asks for, start at the settings
and are lowered for a server seen to queue (`builder.llm.pacing`), saying so.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

import httpx2
import openai
from pydantic import BaseModel, ValidationError

from builder.errors import BuilderError
from builder.llm import endpoint
from builder.llm.cache import LLMCache, Worker
from builder.llm.config import RECORDED_AS, LLMSettings
from builder.llm.items import (
    BatchCheck,
    ItemProblem,
    ItemsOutcome,
    Rejected,
    accept_all,
    earlier_message,
    followup_message,
    item_list,
    json_reply,
    read_items,
    validation_message,
)
from builder.llm.keys import TEXT, canonical, request_key, text_hash, text_request_key
from builder.llm.modes import (
    MODES,
    Mode,
    mode_of,
    refusal,
    response_format,
    weaker,
    wire_messages,
)
from builder.llm.pacing import Pacer
from builder.llm.pricing import cost_usd, estimate_tokens
from builder.llm.schema import strict_schema
from builder.llm.served import NoModel, hosted_default, served_model
from builder.records import LLMCall
from builder.workspace.store import now

T = TypeVar("T", bound=BaseModel)
V = TypeVar("V")
X = TypeVar("X")

RETRYABLE = (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)
OPEN_BATCH = ("validating", "in_progress", "finalizing", "cancelling")  # the server is still working on it
BATCH_ATTEMPTS = 3  # batches a request may fail in (expired, cancelled, a server error) before it is flagged
PLAN_SAMPLES = 3  # requests a dry run shows in full
PROBE_MESSAGES = [{"role": "user", "content": 'Reply with the JSON object {"ok": true}.'}]
PROBE_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}
CLAIM_MARGIN_S = 30.0  # a claim lasts one time-out and this (clock skew between workers' machines, database latency)
CLAIM_POLL_MAX_S = 1.0  # how often, at most, a worker waiting on another's claim looks for its reply
DROPPED = ("missing", "wrong id")  # what a reply that lost track of a long list leaves its items with

log = logging.getLogger(__name__)


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


class _Elsewhere(Exception):
    """Another worker holds the request's claim, or has stored its reply."""


class _Refused(Exception):
    """The server does not support the response format of the request `body` (its words in `reason`)."""

    def __init__(self, body: dict[str, Any], reason: str) -> None:
        super().__init__(reason)
        self.body = body
        self.reason = reason


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
class _Got:
    """A structured request's reply as read back: its text, its call, and whether max_tokens cut it off."""

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


class LLMClient:
    """`say` hears what the client decides by itself (the model it found, limits it lowered); the log by default."""

    def __init__(self, cache: LLMCache, settings: LLMSettings, *, http_client: httpx2.AsyncClient | None = None,
                 say: Callable[[str], None] | None = None):
        self.cache = cache
        self.settings = settings
        self._say = say or log.warning
        self.stats = Stats()
        self.plan = Plan()
        self.deferred: dict[str, tuple[Request, dict]] = {}
        self.in_open_batches: set[str] = set()  # keys already submitted in a batch not yet collected
        self.batch_failed: dict[str, str] = {}  # keys given up after failing in batches -> the server's reason
        self.mode: Mode | None = None  # settled before the first structured request is sent
        self._mode_lock = asyncio.Lock()
        self._mode_error: LLMError | None = None  # the probe failed for good: every request fails with it
        self._reached = False  # a reply came: a connection error from now on is transient
        self._model_lock = asyncio.Lock()
        self._model_error: LLMError | None = None
        self._pacer = Pacer(settings.concurrency, settings.items_per_request, settings.endpoint, self._notice)
        if http_client is None and settings.mode == "recording":
            from builder.llm.recording import ReplayTransport

            http_client = httpx2.AsyncClient(transport=ReplayTransport.from_file(settings.recording_path))
        self.credentials = endpoint.credentials(settings.base_url, settings.api_key.get_secret_value() if settings.api_key else None)
        options = self.credentials.sdk_options()
        if settings.mode == "recording" and not options["base_url"]:
            options["base_url"] = "http://recording.invalid/v1"
        self._sdk = openai.AsyncOpenAI(
            **options,
            timeout=settings.timeout_s,
            max_retries=0,  # retries are ours: bounded, jittered, Retry-After aware, and counted
            http_client=http_client,
        )
        self.source = "recording" if settings.mode == "recording" else "api"
        self.priced_at = None if settings.mode == "recording" else settings.endpoint  # replays are priced nowhere
        self.worker = Worker.current()  # whose claims are whose

    async def aclose(self) -> None:
        await self._sdk.close()

    @property
    def concurrency(self) -> int:
        """Requests in flight at once, at most: the setting, or lower once the server was seen queueing."""
        return self._pacer.concurrency

    @property
    def items_per_request(self) -> int:
        """Items a stage asks for in one request, at most: the setting, or lower once replies dropped items."""
        return self._pacer.items_per_request

    def _notice(self, message: str) -> None:
        self.stats.notices.append(message)
        self._say(message)

    # -- the model ----------------------------------------------------------------------------------

    async def named_model(self) -> str:
        """The model requests name, settled once before the first: the one set; a replayed recording's; the
        hosted API's documented default; with `--offline` or `--dry-run`, the one this endpoint's replies were
        cached for; else the one the endpoint serves (a dry run asks its /models too: a listing, no completion).
        `LLMError` when none of these names exactly one."""
        if self.settings.model is None:
            async with self._model_lock:
                if self._model_error is not None:
                    raise self._model_error
                if self.settings.model is None:
                    try:
                        model, how = await self._find_model()
                    except LLMError as exc:
                        self._model_error = exc  # every request fails with it, none asks the endpoint again
                        raise
                    self.settings = self.settings.model_copy(update={"model": model})
                    if how:
                        self._notice(f"model {model}: {how}")
        return self.settings.model

    async def _find_model(self) -> tuple[str, str | None]:
        """The model to name, and how it was found when the endpoint told (None: nothing worth saying)."""
        url = self.settings.endpoint
        if self.settings.mode == "recording":
            return RECORDED_AS, None
        default = hosted_default(self.settings.base_url)
        if default is not None:
            return default, None
        if self.settings.offline or self.settings.dry_run:
            models = sorted({e["model"] for e in self.cache.endpoints() if e["endpoint"] == url})
            if len(models) == 1:
                return models[0], f"the one model whose replies from {url} are cached"
        if self.settings.offline:
            raise CacheMissError(f"--offline: no model is set and the cache holds replies of {len(models) or 'no'} "
                                 f"model(s) from {url}{' (' + ', '.join(models) + ')' if models else ''}: "
                                 "set BUILDER_LLM_MODEL or --model")
        try:
            return await served_model(self._sdk, url), f"the one model {url} serves (its /models)"
        except NoModel as exc:
            raise LLMError(self._scrub(str(exc))) from exc

    # -- public API ---------------------------------------------------------------------------------

    def key(self, req: Request, schema: type[BaseModel]) -> str:
        """The request's cache key (the model is settled: see `named_model`)."""
        return request_key(self.settings.model, req.as_messages(), req.schema_name, strict_schema(schema), self.settings.temperature)

    async def ask(self, req: Request, schema: type[T]) -> Reply[T] | None:
        """One structured reply, from the cache or the endpoint; None when deferred (dry run, batch)."""
        got = await self._reply_text(req, schema)
        return None if got is None else self._parse(req, schema, got.text, got.call_id)

    async def ask_items(
        self,
        req: Request,
        schema: type[BaseModel],
        wanted: Iterable[str],
        store: Callable[[dict[str, V], str], None],
        *,
        check: BatchCheck = accept_all,
        instruction: str = "",
        context_ids: Iterable[str] = (),
        earlier: Mapping[str, str] | None = None,
    ) -> ItemsOutcome[V]:
        """Ask for several items at once until each is accepted or the re-asks run out.

        `schema` lists the items in its one field (see `builder.llm.items`). After each reply, the items
        that validate go to `check`, which returns for each the value to keep or `Rejected(reason)`;
        it sees the whole reply, so a rule that spans items (a sentence checked against another) can
        be expressed. The accepted values are handed to `store` at once, with the reply's call id;
        the rest are asked again, each with its reason, in one follow-up request of the same
        conversation (`instruction` says how to fix them). Every follow-up counts in `stats.reasks`.
        A request the endpoint gives up for good (`RequestFailed`) flags the items still wanted with
        the server's reason. `context_ids` are ids the request shows without asking for them: answers
        for them are ignored rather than taken as wrong ids. `earlier` holds, for items an earlier run gave
        up on (`builder.flags.Retries.earlier`), why: the first request's last message says it, in every stage.
        Being deterministic in the replies, a resumed run rebuilds the same follow-ups and finds them
        in the cache.
        """
        field_name, _ = item_list(schema)
        order = list(dict.fromkeys(wanted))
        known = {*order, *context_ids}
        todo = set(order)
        shown = {item_id: why for item_id, why in (earlier or {}).items() if item_id in todo}
        if shown:
            role, content = req.messages[-1]
            req = replace(req, messages=req.messages[:-1] + ((role, content + earlier_message(shown)),))
        accepted: dict[str, V] = {}
        problems: dict[str, ItemProblem] = {}
        call_id = text = None
        for attempt in range(self.settings.max_reasks + 1):
            if attempt:
                self.stats.reasks += 1
                req = req.followup(text, followup_message(problems, field_name, instruction))
            try:
                got = await self._reply_text(req, schema)
            except RequestFailed as exc:
                problems = dict.fromkeys(todo, ItemProblem("failed", exc.reason))
                break
            if got is None:  # deferred: dry run or batch submission
                return ItemsOutcome(accepted, {}, call_id, deferred=True)
            text, call_id = got.text, got.call_id
            good, problems = read_items(text, schema, todo, known)
            if got.cut_off:
                problems = {i: ItemProblem(p.kind, f"{p.detail}; the reply was cut off at its max_tokens ({req.max_tokens})")
                            if p.kind == "unreadable" else p for i, p in problems.items()}
            verdicts = check(good) if good else {}
            ok: dict[str, V] = {}
            for item_id in good:
                verdict = verdicts[item_id]
                if isinstance(verdict, Rejected):
                    problems[item_id] = ItemProblem("invalid", verdict.reason)
                else:
                    ok[item_id] = verdict
            if ok:
                store(ok, call_id)
                accepted.update(ok)
                todo -= ok.keys()
            problems = {item_id: problems[item_id] for item_id in order if item_id in todo}  # in request order
            if not todo:
                break
        return ItemsOutcome(accepted, {item_id: problems[item_id] for item_id in order if item_id in todo}, call_id)

    async def ask_text(self, req: Request, *, max_tokens: int, temperature: float | None = None,
                       seed: int | None = None) -> TextReply:
        """A plain-text reply (no response format), for evaluation prompts read as free text.

        The key adds the decoding settings to the messages, so sampled runs with different seeds are
        cached apart and a greedy re-run is free.
        """
        await self.named_model()
        temp = self.settings.temperature if temperature is None else temperature
        decoding = {"max_tokens": max_tokens, **({"seed": seed} if seed is not None else {})}
        key = text_request_key(self.settings.model, req.as_messages(), decoding, temp)
        cached = self._cached(key)
        if cached is not None:
            self.stats.cache_hits += 1
            return TextReply(cached.text, cached.call_id)
        if self.settings.offline:
            raise CacheMissError(f"--offline: no cached reply for a {req.stage} request (lang {req.lang}, key {key[:12]}…)")
        body = {"model": self.settings.model, "messages": req.as_messages(), "temperature": temp, **decoding}

        async def send() -> _Got:
            _, response, latency = await self._post(lambda: body, f"{req.stage} request", claim=key)
            call_id = self._store(key, req, response, latency, self.source, TEXT, max_tokens)
            return _Got(_content(response), call_id, _cut_off(response))

        got = await self._once(key, send)
        return TextReply(got.text, got.call_id)

    async def in_chunks(self, items: Sequence[X], ask: Callable[[list[X]], Awaitable[ItemsOutcome | None]],
                        item_id: Callable[[X], str]) -> None:
        """Ask for `items` a chunk at a time, each of the current items per request, as many at once as the
        concurrency allows.

        Chunks are cut in order from `items`, so a run with the same limits rebuilds the same requests
        (and finds them in the cache). `ask` sends one chunk and returns its outcome (None: nothing of it
        was wanted). A reply that dropped at least half of its chunk lowers the items per request
        (`note_outcome`); the items it dropped then go back to be asked again in chunks of the new size.
        """
        todo = deque(items)

        async def worker(n: int) -> None:
            while todo and n < self.concurrency:  # a worker beyond a lowered limit takes no more chunks
                chunk = [todo.popleft() for _ in range(min(self.items_per_request, len(todo)))]
                outcome = await ask(chunk)
                if outcome is None or outcome.deferred:
                    continue
                self.note_outcome(outcome)
                if len(chunk) > self.items_per_request:
                    todo.extend(x for x in chunk if item_id(x) in outcome.flags and outcome.flags[item_id(x)].kind in DROPPED)

        while todo:  # items dropped back after the workers beyond a lowered limit stopped
            await asyncio.gather(*(worker(n) for n in range(self.concurrency)))

    def note_outcome(self, outcome: ItemsOutcome) -> None:
        """Lower the items per request when the items given up on were mostly dropped from the replies."""
        dropped = sum(problem.kind in DROPPED for problem in outcome.flags.values())
        self._pacer.dropped(len(outcome.accepted) + len(outcome.flags), dropped)

    # -- the structured-output mode -----------------------------------------------------------------

    async def structured_mode(self) -> Mode:
        """The mode structured requests go out in: settled once, before the first one is sent."""
        await self.named_model()
        if self.mode is None:
            async with self._mode_lock:
                if self._mode_error is not None:
                    raise self._mode_error
                if self.mode is None:
                    try:
                        self.mode = await self._find_mode()
                    except LLMError as exc:
                        self._mode_error = exc
                        raise
        return self.mode

    async def _find_mode(self) -> Mode:
        if self.settings.mode == "recording":
            return "json_schema"  # the recording holds replies to strict structured requests
        recorded = self.cache.mode(self.settings.endpoint, self.settings.model)
        if recorded is not None:
            return recorded
        if self.settings.dry_run:
            self.plan.mode_assumed = True
            return MODES[0]
        refusals: dict[str, str] = {}
        for mode in MODES[:-1]:
            try:
                await self._post(lambda mode=mode: self._probe_body(mode), f"probing {self.settings.endpoint} for structured outputs")
                break
            except _Refused as exc:
                refusals[mode] = exc.reason
            finally:
                self.stats.probes += 1
        else:
            mode = MODES[-1]  # nothing asked of the server: always accepted
        self.cache.record_mode(self.settings.endpoint, self.settings.model, mode, refusals)
        return mode

    def _probe_body(self, mode: Mode) -> dict[str, Any]:
        body = {"model": self.settings.model, "messages": wire_messages(mode, PROBE_MESSAGES, PROBE_SCHEMA),
                "temperature": 0.0, "max_tokens": 16}
        return {**body, "response_format": response_format(mode, "probe", PROBE_SCHEMA)}

    async def _refused(self, mode: Mode, reason: str) -> None:
        """The server refused `mode` although it was settled: move every later request to a weaker one."""
        async with self._mode_lock:
            if self.mode != mode:
                return  # another request already moved on
            if mode == MODES[-1]:
                raise LLMError(f"the LLM endpoint {self.settings.endpoint} refused a request without a response format: {reason}")
            self.mode = weaker(mode)
            self.cache.record_mode(self.settings.endpoint, self.settings.model, self.mode, {mode: reason})

    # -- cache and records --------------------------------------------------------------------------

    def _cached(self, key: str) -> _Got | None:
        hit = self.cache.get(key)
        return None if hit is None else _Got(_content(hit[0]), hit[1], _cut_off(hit[0]))

    def _store(self, key: str, req: Request, response: dict, latency_ms: float, source: str, mode: str,
               max_tokens: int | None) -> str:
        usage = response.get("usage") or {}
        tin, tout = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        model = response.get("model") or self.settings.model
        call = LLMCall(
            id="call_" + uuid.uuid4().hex[:20], request_key=key, model=model, prompt_hash=req.prompt_hash,
            stage=req.stage, lang=req.lang, source=source, tokens_in=tin, tokens_out=tout, latency_ms=latency_ms,
            cost_usd=cost_usd(model, tin, tout, endpoint=self.priced_at, batch=source == "batch"), created_at=now(), mode=mode,
            max_tokens=max_tokens,
        )
        self.cache.put(call, {"messages": req.as_messages(), "schema": req.schema_name}, response)
        if call.cost_usd is None:
            self.stats.unpriced[model] = self.stats.unpriced.get(model, 0) + 1
        else:
            self.stats.cost_usd += call.cost_usd
        return call.id

    # -- sending ------------------------------------------------------------------------------------

    async def _reply_text(self, req: Request, schema: type[BaseModel]) -> _Got | None:
        """A structured request's reply, from the cache or the endpoint; None when deferred."""
        await self.named_model()
        key = self.key(req, schema)
        cached = self._cached(key)
        if cached is not None:
            self.stats.cache_hits += 1
            return cached
        if self.settings.offline:
            raise CacheMissError(
                f"--offline: no cached reply for a {req.stage} request (lang {req.lang}, key {key[:12]}…); "
                "run once without --offline to fetch it"
            )
        if self.settings.dry_run or self.settings.batch:
            if key in self.batch_failed:
                raise RequestFailed(self.batch_failed[key])
            if key not in self.in_open_batches:  # never submit (and pay for) the same request twice
                await self._defer(key, req, schema)
            return None
        await self.structured_mode()

        async def send() -> _Got:
            while True:
                try:  # the body is made when the request goes out, in the mode settled by then
                    body, response, latency = await self._post(lambda: self._wire_body(req, schema, self.mode),
                                                               f"{req.stage} request", claim=key)
                except _Refused as exc:
                    await self._refused(mode_of(exc.body), exc.reason)
                    continue
                call_id = self._store(key, req, response, latency, self.source, mode_of(body), body["max_tokens"])
                return _Got(_content(response), call_id, _cut_off(response))

        return await self._once(key, send)

    async def _once(self, key: str, send: Callable[[], Awaitable[_Got]]) -> _Got:
        """Send a request once among the workers sharing this cache (processes on one PostgreSQL workspace).

        `send` posts with the request's claim (storing the reply ends it); while another worker holds
        the claim this one waits for that worker's reply, or takes the claim over when that worker died
        or its lease ran out.
        """
        waits = 0
        while True:
            try:
                return await send()
            except _Elsewhere:
                hit = self._cached(key)
                if hit is not None:
                    self.stats.cache_hits += 1
                    return hit
                await asyncio.sleep(min(CLAIM_POLL_MAX_S, 0.05 * 2**waits))
                waits += 1
            except BaseException:  # failed or cancelled: another worker may try it
                self.cache.release(key, self.worker)
                raise

    def _claim(self, key: str) -> bool:
        """Take or renew the claim to send `key`; False while another worker holds it or once its reply is stored."""
        if not self.cache.claim(key, self.worker, self.settings.timeout_s + CLAIM_MARGIN_S):
            return False
        if self.cache.get(key) is not None:  # stored by a worker whose claim has ended
            self.cache.release(key, self.worker)
            return False
        return True

    def _wire_body(self, req: Request, schema: type[BaseModel], mode: Mode) -> dict[str, Any]:
        wire = strict_schema(schema)
        body = {"model": self.settings.model, "messages": wire_messages(mode, req.as_messages(), wire),
                "temperature": self.settings.temperature, "max_tokens": req.max_tokens}
        fmt = response_format(mode, req.schema_name, wire)
        return body if fmt is None else {**body, "response_format": fmt}

    async def _post(self, make_body: Callable[[], dict[str, Any]], what: str,
                    claim: str | None = None) -> tuple[dict, dict, float]:
        """POST one chat completion with bounded retries: the body sent, the response and its latency in ms.

        With `claim` (a request key), each attempt first takes, or renews, the request's claim in its
        concurrency slot, for one time-out and a margin, so that it cannot run out while the attempt is
        in flight; `_Elsewhere` when another worker holds it or has stored its reply.

        Raises `_Refused` when the server lacks the response format asked (never retried), `RequestFailed`
        when the conversation exceeds the model's context, and `LLMError` naming the endpoint and the
        likely fix for everything else that retrying does not cure.
        """
        attempt = 0
        while True:
            body: dict[str, Any] = {}
            try:
                async with self._pacer.slot() as ticket:
                    if claim is not None and not self._claim(claim):
                        raise _Elsewhere
                    body = make_body()
                    started = time.perf_counter()
                    self.stats.sent += 1
                    # The SDK's own request path (auth, errors, time-outs) with our body as is: its typed
                    # parameter transform costs milliseconds of CPU per call and changes nothing here.
                    try:
                        response = await self._sdk.post("/chat/completions", body=body, cast_to=object)
                    except openai.APITimeoutError:
                        self._pacer.timed_out(ticket)
                        raise
                    latency = (time.perf_counter() - started) * 1000
                    if not isinstance(response, dict):
                        response = {"choices": [{"message": {"content": str(response)}}]}
                    self._pacer.replied(latency / 1000, _completion_tokens(response))
                self._reached = True
                return body, response, latency
            except openai.APIError as exc:
                refused = refusal(exc)
                if refused is not None:
                    raise _Refused(body, self._scrub(refused)) from exc
                if _context_exceeded(exc):
                    self.stats.failures += 1
                    raise RequestFailed(f"beyond the model's context: {self._scrub(endpoint.server_message(exc))}") from exc
                if not self._transient(exc) or attempt >= self.settings.max_retries:
                    self.stats.failures += 1
                    raise LLMError(await self._explain(exc, what, attempt + 1)) from exc
                name = type(exc).__name__
                self.stats.by_error[name] = self.stats.by_error.get(name, 0) + 1
                self.stats.retries += 1
                await asyncio.sleep(self._backoff(attempt, exc))
                attempt += 1

    def _transient(self, exc: openai.APIError) -> bool:
        """Worth another try: rate limits, server errors, time-outs and dropped connections; not a
        connection refused before the endpoint ever answered (nothing is listening there)."""
        if isinstance(exc, openai.APIConnectionError) and isinstance(exc.__cause__, httpx2.ConnectError):
            return self._reached
        return isinstance(exc, RETRYABLE)

    async def _explain(self, exc: openai.APIError, what: str, attempts: int) -> str:
        """What went wrong, with the endpoint's (redacted) URL and the likely fix."""
        url = self.settings.endpoint
        if self.settings.mode == "recording":
            return f"{what} failed: {self._brief(exc)}"
        if isinstance(exc, openai.APIConnectionError) and isinstance(exc.__cause__, httpx2.ConnectError) and not self._reached:
            return endpoint.unreachable(url, exc.__cause__)
        if isinstance(exc, openai.APITimeoutError):
            return (f"{what} to {url} timed out {attempts} times ({self.settings.timeout_s:g} s each): a server that "
                    "answers one request at a time needs a lower --concurrency or a longer BUILDER_LLM_TIMEOUT")
        if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
            return endpoint.key_refused(url, exc.status_code, self.credentials)
        if isinstance(exc, openai.NotFoundError):
            return await endpoint.not_found(self._sdk, url, self.settings.model)
        if isinstance(exc, RETRYABLE):
            return f"{what} to {url} failed after {attempts} attempts: {self._brief(exc)}"
        return f"{what} rejected by the LLM endpoint {url}: {self._brief(exc)}"

    def _brief(self, exc: Exception) -> str:
        return self._scrub(f"{type(exc).__name__}: {str(exc)[:300]}")

    def _scrub(self, text: str) -> str:
        key = self.settings.api_key.get_secret_value() if self.settings.api_key else None
        return endpoint.scrub(text, self.settings.base_url, key)

    def _backoff(self, attempt: int, exc: Exception) -> float:
        """Exponential back-off with full jitter; a server's Retry-After wins when it gives one."""
        response = getattr(exc, "response", None)
        if response is not None:
            ra = response.headers.get("retry-after-ms")
            if ra:
                return min(float(ra) / 1000, self.settings.backoff_max_s)
            ra = response.headers.get("retry-after")
            if ra:
                try:
                    return min(float(ra), self.settings.backoff_max_s)
                except ValueError:
                    pass
        cap = min(self.settings.backoff_max_s, self.settings.backoff_base_s * 2**attempt)
        return random.uniform(cap / 2, cap)

    # -- dry run and batch --------------------------------------------------------------------------

    async def _defer(self, key: str, req: Request, schema: type[BaseModel]) -> None:
        if key in self.deferred:
            return
        mode = await self.structured_mode()
        body = self._wire_body(req, schema, mode)
        self.deferred[key] = (req, body)
        tin = estimate_tokens(canonical(body["messages"])) + estimate_tokens(canonical(body.get("response_format")))
        self.plan.mode = mode
        self.plan.requests += 1
        self.plan.tokens_in += tin
        self.plan.tokens_out += req.expected_output_tokens
        if len(self.plan.samples) < PLAN_SAMPLES:
            self.plan.samples.append(body)
        cost = cost_usd(self.settings.model, tin, req.expected_output_tokens, endpoint=self.priced_at, batch=self.settings.batch)
        if cost is None:
            self.plan.cost_known = False
        else:
            self.plan.cost_usd += cost

    async def submit_batch(self, stage: str) -> str | None:
        """Upload the deferred requests as one Batch API job and remember its id in the cache."""
        if not self.deferred:
            return None
        lines = [
            canonical({"custom_id": key, "method": "POST", "url": "/v1/chat/completions", "body": body})
            for key, (_, body) in self.deferred.items()
        ]
        uploaded = await self._sdk.files.create(file=("requests.jsonl", ("\n".join(lines) + "\n").encode()), purpose="batch")
        batch = await self._sdk.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
        requests = {
            key: {"messages": [list(m) for m in req.messages], "schema_name": req.schema_name, "stage": req.stage,
                  "lang": req.lang, "prompt_hash": req.prompt_hash, "mode": mode_of(body), "max_tokens": body["max_tokens"]}
            for key, (req, body) in self.deferred.items()
        }
        self.cache.add_batch(batch.id, stage=stage, status=batch.status, input_file_id=uploaded.id, requests=requests)
        self.deferred.clear()
        return batch.id

    async def collect_batches(self) -> dict[str, str]:
        """Poll every open batch, of any stage; read each finished one into the cache.

        Returns batch id -> its status, or why it could not be polled: a batch the endpoint cannot show
        stays open for the next run and holds up nothing else. A finished batch's output and error
        files are read whatever its end (completed, expired, cancelled, failed): each reply is stored
        once, and each failed line is kept with the server's reason. A request that failed for good
        (a client error) or in BATCH_ATTEMPTS batches is then given up (`batch_failed`) and its items
        flagged; any other is asked again in the next batch.
        """
        statuses: dict[str, str] = {}
        for row in self.cache.open_batches():
            try:
                statuses[row["id"]] = await self._collect(row)
            except openai.APIError as exc:
                self.in_open_batches.update(row["request_keys"])
                statuses[row["id"]] = f"not polled ({self._brief(exc)})"
        for key, failures in self.cache.batch_failures().items():
            if self._cached(key) is None and (failures[-1]["final"] or len(failures) >= BATCH_ATTEMPTS):
                attempts = "" if failures[-1]["final"] else f" (in {len(failures)} batches)"
                self.batch_failed[key] = failures[-1]["reason"] + attempts
        return statuses

    async def _collect(self, row: dict[str, Any]) -> str:
        batch = await self._sdk.batches.retrieve(row["id"])
        if batch.status in OPEN_BATCH:
            self.cache.set_batch_status(row["id"], batch.status)
            self.in_open_batches.update(row["request_keys"])
            return batch.status
        wanted = row["request_keys"]
        failures: dict[str, dict[str, Any]] = {}
        answered: set[str] = set()
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            content = await self._sdk.files.content(file_id)
            for line in content.text.splitlines():
                if not line.strip():
                    continue
                item = json.loads(line)
                key = item.get("custom_id")
                if key not in wanted:
                    continue
                response = item.get("response") or {}
                if response.get("status_code") == 200 and response.get("body"):
                    answered.add(key)
                    if self._cached(key) is None:
                        info = wanted[key]  # a batch submitted before modes were recorded sent json_schema, no max_tokens
                        self._store(key, _stored_request(info), response["body"], 0.0, "batch",
                                    info.get("mode", MODES[0]), info.get("max_tokens"))
                else:
                    failures[key] = _line_failure(item)
        if batch.status == "failed":
            errors = "; ".join(f"{e.code}: {e.message}" + (f" (line {e.line})" if e.line else "")
                               for e in (batch.errors.data if batch.errors and batch.errors.data else []))
            reason = {"reason": f"the batch failed validation: {errors or 'no reason given'}", "final": True}
        else:
            reason = {"reason": f"the {batch.status} batch's files hold no line for it", "final": False}
        for key in wanted:
            if key not in answered and key not in failures:
                failures[key] = reason
        self.cache.close_batch(row["id"], batch.status, failures)
        return batch.status

    # -- parsing ------------------------------------------------------------------------------------

    def _parse(self, req: Request, schema: type[T], text: str, call_id: str) -> Reply[T]:
        try:
            value = schema.model_validate(json_reply(text))
        except json.JSONDecodeError as exc:
            return Reply(None, text, call_id, req, f"the reply is not valid JSON ({exc.msg} at column {exc.colno})")
        except ValidationError as exc:
            return Reply(None, text, call_id, req, f"the reply does not match the schema: {validation_message(exc)}")
        return Reply(value, text, call_id, req)


def _content(response: dict) -> str:
    try:
        return response["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        return ""


def _completion_tokens(response: dict) -> int:
    try:
        return int((response.get("usage") or {}).get("completion_tokens") or 0)
    except (TypeError, ValueError):
        return 0


def _cut_off(response: dict) -> bool:
    try:
        return response["choices"][0].get("finish_reason") == "length"
    except (KeyError, IndexError, TypeError, AttributeError):
        return False


def _context_exceeded(exc: openai.APIError) -> bool:
    """The request is longer than the model's context (OpenAI, vLLM and llama.cpp all say so with a 400)."""
    if not isinstance(exc, openai.BadRequestError):
        return False
    return exc.code == "context_length_exceeded" or "maximum context length" in str(exc).lower()


def _stored_request(info: dict[str, Any]) -> Request:
    return Request(tuple(tuple(m) for m in info["messages"]), info["schema_name"], info["stage"], info["lang"],
                   info["prompt_hash"])


def _line_failure(item: dict[str, Any]) -> dict[str, Any]:
    """A batch line without a reply: the server's reason, and whether asking again cannot help.

    Expired and cancelled lines (`batch_expired`, `batch_cancelled`) and server errors are asked again;
    a client error (400, 404, …) is final.
    """
    response = item.get("response") or {}
    status = response.get("status_code")
    error = item.get("error") or (response.get("body") or {}).get("error") or {}
    code = error.get("code") or error.get("type") or "error"
    message = error.get("message") or "no message"
    final = isinstance(status, int) and 400 <= status < 500 and status not in (408, 409, 429)
    return {"reason": f"batch line {f'HTTP {status} ' if status else ''}{code}: {message}"[:400], "final": final}


def prompt_hash(*templates: str) -> str:
    return text_hash("\x1e".join(templates))
