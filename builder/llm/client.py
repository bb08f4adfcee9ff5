"""The LLM client: official `openai` SDK (async), structured outputs, retries, cache, batches.

A request is identified by its content (model, messages, wire schema, temperature). Its reply is
stored in the cache together with the call record in one transaction, the moment it arrives, so a
re-run or a resumed run never sends an identical request twice. Requests for several items at once
go through one loop (`ask_items`) that keeps what is good and asks again for the rest.

`LLMClient` is a small facade, as `httpx` keeps a small public API over private modules, one concern each:

- `_structured`: the structured-output mode (`builder.llm.modes`) requests go out in, and its probe;
- `_transport`: one POST in a concurrency slot (`builder.llm.pacing`), with the request's claim,
  retried with back-off through `tenacity`, and a failure told as what it means to a user;
- `_claims`: a request sent once among the workers sharing a cache;
- `_records`: replies stored with their call records, and read back;
- `_batches`: dry runs and Batch API jobs;
- `_types` and `_errors`: the records and errors the parts hand each other and callers (re-exported here).

The model is settled first, once: the one set, or else the one the endpoint serves
(`builder.llm.served`), so that the model recorded and priced with each call is the one that did the
work. Every request carries a `max_tokens` derived from what it asks for; mode and `max_tokens` are
stored with the call.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

import httpx2
import openai
from pydantic import BaseModel, ValidationError

from builder.llm import endpoint
from builder.llm._batches import BATCH_ATTEMPTS, Batches
from builder.llm._claims import ClaimedElsewhere, Claims, skipping_claimed
from builder.llm._errors import CacheMissError, LLMError, Refused, RequestFailed
from builder.llm._records import Records
from builder.llm._structured import StructuredMode
from builder.llm._transport import Transport
from builder.llm._types import Got, Plan, Reply, Request, Stats, TextReply
from builder.llm.cache import LLMCache
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
from builder.llm.keys import TEXT, request_key, text_hash, text_request_key
from builder.llm.modes import Mode, mode_of, response_format, wire_messages
from builder.llm.pacing import Pacer
from builder.llm.schema import strict_schema
from builder.llm.served import NoModel, hosted_default, served_model

__all__ = ["BATCH_ATTEMPTS", "CacheMissError", "LLMClient", "LLMError", "Plan", "Reply", "Request", "RequestFailed",
           "Stats", "TextReply", "prompt_hash"]

T = TypeVar("T", bound=BaseModel)
V = TypeVar("V")
X = TypeVar("X")

DROPPED = ("missing", "wrong id")  # what a reply that lost track of a long list leaves its items with

log = logging.getLogger(__name__)


class LLMClient:
    """`say` hears what the client decides by itself (the model it found, limits it lowered); the log by default."""

    def __init__(self, cache: LLMCache, settings: LLMSettings, *, http_client: httpx2.AsyncClient | None = None,
                 say: Callable[[str], None] | None = None):
        self.cache = cache
        self.settings = settings
        self._say = say or log.warning
        self.stats = Stats()
        self._model_lock = asyncio.Lock()
        self._model_error: LLMError | None = None
        self._pacer = Pacer(settings.concurrency, settings.items_per_request, settings.endpoint, self._notice)
        if http_client is None and settings.source == "recording":
            from builder.llm.recording import ReplayTransport

            http_client = httpx2.AsyncClient(transport=ReplayTransport.from_file(settings.recording_path))
        self.credentials = endpoint.credentials(settings.base_url, settings.api_key.get_secret_value() if settings.api_key else None)
        options = self.credentials.sdk_options()
        if settings.source == "recording" and not options["base_url"]:
            options["base_url"] = "http://recording.invalid/v1"
        self._sdk = openai.AsyncOpenAI(
            **options,
            timeout=settings.timeout_s,
            max_retries=0,  # retries are the transport's: bounded, jittered, Retry-After aware, and counted
            http_client=http_client,
        )
        self.source = settings.source  # what the calls are labelled: "api", or "recording" for a replay
        current = lambda: self.settings  # noqa: E731 - the model is settled after construction
        self._records = Records(cache, current, self.stats, None if settings.source == "recording" else settings.endpoint)
        self._claims = Claims(cache, self._records, self.stats, settings.timeout_s)
        self._transport = Transport(self._sdk, current, self.credentials, self._pacer, self.stats, self._claims.take)
        self._batches = Batches(self._sdk, cache, self._records, current, self._transport.brief)
        self._structured = StructuredMode(self._transport, cache, current, self.stats, self._batches.plan)

    async def aclose(self) -> None:
        await self._sdk.close()

    @property
    def mode(self) -> Mode | None:
        """The structured-output mode, once settled (`structured_mode`)."""
        return self._structured.mode

    @property
    def plan(self) -> Plan:
        """What this dry run, or batch submission, would send."""
        return self._batches.plan

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
        if self.settings.source == "recording":
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
            raise LLMError(self._transport.scrub(str(exc))) from exc

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
                got = await self._reply_text(req, schema, first=not attempt)
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
        cached = self._records.cached(key)
        if cached is not None:
            self.stats.cache_hits += 1
            return TextReply(cached.text, cached.call_id)
        if self.settings.offline:
            raise CacheMissError(f"--offline: no cached reply for a {req.stage} request (lang {req.lang}, key {key[:12]}…)")
        body = {"model": self.settings.model, "messages": req.as_messages(), "temperature": temp, **decoding}

        async def send() -> Got:
            _, response, latency = await self._transport.post(lambda: body, f"{req.stage} request", claim=key)
            return self._records.got(response, self._records.store(key, req, response, latency, self.source, TEXT, max_tokens))

        got = await self._claims.once(key, send)
        return TextReply(got.text, got.call_id)

    async def in_chunks(self, items: Sequence[X], ask: Callable[[list[X]], Awaitable[ItemsOutcome | None]],
                        item_id: Callable[[X], str]) -> None:
        """Ask for `items` a chunk at a time, each of the current items per request, as many at once as the
        concurrency allows.

        Chunks are cut in order from `items`, so a run with the same limits rebuilds the same requests
        (and finds them in the cache). `ask` sends one chunk and returns its outcome (None: nothing of it
        was wanted). A chunk whose request another worker is sending (processes on one PostgreSQL
        workspace) is put aside, whole, until no chunk is left to cut: then its reply is waited for. A
        reply that dropped at least half of its chunk lowers the items per request (`note_outcome`); the
        items it dropped then go back to be asked again in chunks of the new size.
        """
        todo = deque(items)
        elsewhere: deque[list[X]] = deque()  # chunks another worker was sending when this one came to them

        async def worker(n: int) -> None:
            while (todo or elsewhere) and n < self.concurrency:  # a worker beyond a lowered limit takes no more chunks
                if todo:
                    chunk = [todo.popleft() for _ in range(min(self.items_per_request, len(todo)))]
                    try:
                        with skipping_claimed():
                            outcome = await ask(chunk)
                    except ClaimedElsewhere:
                        elsewhere.append(chunk)
                        continue
                else:
                    chunk = elsewhere.popleft()
                    outcome = await ask(chunk)
                if outcome is None or outcome.deferred:
                    continue
                self.note_outcome(outcome)
                if len(chunk) > self.items_per_request:
                    todo.extend(x for x in chunk if item_id(x) in outcome.flags and outcome.flags[item_id(x)].kind in DROPPED)

        while todo or elsewhere:  # items dropped back after the workers beyond a lowered limit stopped
            await asyncio.gather(*(worker(n) for n in range(self.concurrency)))

    def note_outcome(self, outcome: ItemsOutcome) -> None:
        """Lower the items per request when the items given up on were mostly dropped from the replies."""
        dropped = sum(problem.kind in DROPPED for problem in outcome.flags.values())
        self._pacer.dropped(len(outcome.accepted) + len(outcome.flags), dropped)

    async def structured_mode(self) -> Mode:
        """The mode structured requests go out in: settled once, before the first one is sent."""
        await self.named_model()
        return await self._structured.settle()

    async def submit_batch(self, stage: str) -> str | None:
        """Upload the deferred requests as one Batch API job and remember its id in the cache."""
        return await self._batches.submit(stage)

    async def collect_batches(self) -> dict[str, str]:
        """Poll every open batch, of any stage, and read each finished one into the cache (`Batches.collect`):
        batch id -> its status, or why it could not be polled."""
        return await self._batches.collect()

    # -- sending ------------------------------------------------------------------------------------

    async def _reply_text(self, req: Request, schema: type[BaseModel], *, first: bool = False) -> Got | None:
        """A structured request's reply, from the cache or the endpoint; None when deferred. `first`: not a re-ask
        (see `Claims.once`)."""
        await self.named_model()
        key = self.key(req, schema)
        cached = self._records.cached(key)
        if cached is not None:
            self.stats.cache_hits += 1
            return cached
        if self.settings.offline:
            raise CacheMissError(
                f"--offline: no cached reply for a {req.stage} request (lang {req.lang}, key {key[:12]}…); "
                "run once without --offline to fetch it"
            )
        if self.settings.dry_run or self.settings.batch:
            if key in self._batches.failed:
                raise RequestFailed(self._batches.failed[key])
            if key not in self._batches.in_open_batches and key not in self._batches.deferred:  # never pay twice
                self._batches.defer(key, req, self._wire_body(req, schema, await self.structured_mode()))
            return None
        await self.structured_mode()

        async def send() -> Got:
            while True:
                try:  # the body is made when the request goes out, in the mode settled by then
                    body, response, latency = await self._transport.post(lambda: self._wire_body(req, schema, self.mode),
                                                                         f"{req.stage} request", claim=key)
                except Refused as exc:
                    await self._structured.refused(mode_of(exc.body), exc.reason)
                    continue
                call_id = self._records.store(key, req, response, latency, self.source, mode_of(body), body["max_tokens"])
                return self._records.got(response, call_id)

        return await self._claims.once(key, send, first=first)

    def _wire_body(self, req: Request, schema: type[BaseModel], mode: Mode) -> dict:
        wire = strict_schema(schema)
        body = {"model": self.settings.model, "messages": wire_messages(mode, req.as_messages(), wire),
                "temperature": self.settings.temperature, "max_tokens": req.max_tokens}
        fmt = response_format(mode, req.schema_name, wire)
        return body if fmt is None else {**body, "response_format": fmt}

    def _parse(self, req: Request, schema: type[T], text: str, call_id: str) -> Reply[T]:
        try:
            value = schema.model_validate(json_reply(text))
        except json.JSONDecodeError as exc:
            return Reply(None, text, call_id, req, f"the reply is not valid JSON ({exc.msg} at column {exc.colno})")
        except ValidationError as exc:
            return Reply(None, text, call_id, req, f"the reply does not match the schema: {validation_message(exc)}")
        return Reply(value, text, call_id, req)


def prompt_hash(*templates: str) -> str:
    return text_hash("\x1e".join(templates))
