"""The LLM client: official `openai` SDK (async), structured outputs, retries, cache, batches.

A request is identified by its content (model, messages, schema, temperature). Its reply is stored
in the cache together with the call record in one transaction, the moment it arrives, so a re-run
or a resumed run never sends an identical request twice. Requests for several items at once go
through one loop (`ask_items`) that keeps what is good and asks again for the rest.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx2
import openai
from pydantic import BaseModel, ValidationError

from builder.llm.cache import LLMCache, Worker
from builder.llm.config import LLMSettings
from builder.llm.items import (
    BatchCheck,
    ItemProblem,
    ItemsOutcome,
    Rejected,
    accept_all,
    followup_message,
    item_list,
    read_items,
    validation_message,
)
from builder.llm.keys import canonical, request_key, text_hash, text_request_key
from builder.llm.pricing import cost_usd, estimate_tokens
from builder.llm.schema import strict_schema
from builder.records import LLMCall
from builder.workspace.store import now

T = TypeVar("T", bound=BaseModel)
V = TypeVar("V")

RETRYABLE = (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)
CLAIM_MARGIN_S = 30.0  # a claim lasts one time-out and this (clock skew between workers' machines, database latency)
CLAIM_POLL_MAX_S = 1.0  # how often, at most, a worker waiting on another's claim looks for its reply


class LLMError(RuntimeError):
    """A request failed for good (retries exhausted, or a non-retryable error)."""


class CacheMissError(LLMError):
    """`--offline` was asked and a request is not in the cache."""


@dataclass(frozen=True)
class Request:
    """A logical chat request: what the key is computed from."""

    messages: tuple[tuple[str, str], ...]
    schema_name: str
    stage: str
    lang: str | None
    prompt_hash: str
    expected_output_tokens: int = 200

    def as_messages(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]

    def followup(self, reply_text: str, feedback: str) -> "Request":
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


@dataclass
class Plan:
    """What a dry run would send."""

    requests: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True


@dataclass
class Stats:
    sent: int = 0
    retries: int = 0
    cache_hits: int = 0
    reasks: int = 0  # follow-up requests of the re-ask loop (from the cache or sent)
    failures: int = 0
    by_error: dict[str, int] = field(default_factory=dict)


class LLMClient:
    def __init__(self, cache: LLMCache, settings: LLMSettings, *, http_client: httpx2.AsyncClient | None = None):
        self.cache = cache
        self.settings = settings
        self.stats = Stats()
        self.plan = Plan()
        self.deferred: dict[str, tuple[Request, dict]] = {}
        self.in_open_batches: set[str] = set()  # keys already submitted in a batch not yet collected
        self._json_mode = False
        self._sem = asyncio.Semaphore(settings.concurrency)
        if http_client is None and settings.mode == "recording":
            from builder.llm.recording import ReplayTransport

            http_client = httpx2.AsyncClient(transport=ReplayTransport.from_file(settings.recording_path))
        self._sdk = openai.AsyncOpenAI(
            base_url=settings.base_url or ("http://recording.invalid/v1" if settings.mode == "recording" else None),
            api_key=settings.api_key.get_secret_value() if settings.api_key else "recording",
            timeout=settings.timeout_s,
            max_retries=0,  # retries are ours: bounded, jittered, Retry-After aware, and counted
            http_client=http_client,
        )
        self.source = "recording" if settings.mode == "recording" else "api"
        self.worker = Worker.current()  # whose claims are whose

    async def aclose(self) -> None:
        await self._sdk.close()

    # -- public API ---------------------------------------------------------------------------------

    def key(self, req: Request, schema: type[BaseModel]) -> str:
        return request_key(self.settings.model, req.as_messages(), req.schema_name, strict_schema(schema), self.settings.temperature)

    async def ask(self, req: Request, schema: type[T]) -> Reply[T] | None:
        """One structured reply, from the cache or the endpoint; None when deferred (dry run, batch)."""
        got = await self._reply_text(req, schema)
        return None if got is None else self._parse(req, schema, *got)

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
    ) -> ItemsOutcome[V]:
        """Ask for several items at once until each is accepted or the re-asks run out.

        `schema` lists the items in its one field (see `builder.llm.items`). After each reply, the items
        that validate go to `check`, which returns for each the value to keep or `Rejected(reason)`;
        it sees the whole reply, so a rule that spans items (a sentence checked against another) can
        be expressed. The accepted values are handed to `store` at once, with the reply's call id;
        the rest are asked again, each with its reason, in one follow-up request of the same
        conversation (`instruction` says how to fix them). Every follow-up counts in `stats.reasks`.
        `context_ids` are ids the request shows without asking for them: answers for them are ignored
        rather than taken as wrong ids.
        Being deterministic in the replies, a resumed run rebuilds the same follow-ups and finds them
        in the cache.
        """
        field_name, _ = item_list(schema)
        order = list(dict.fromkeys(wanted))
        known = {*order, *context_ids}
        todo = set(order)
        accepted: dict[str, V] = {}
        problems: dict[str, ItemProblem] = {}
        call_id = text = None
        for attempt in range(self.settings.max_reasks + 1):
            if attempt:
                self.stats.reasks += 1
                req = req.followup(text, followup_message(problems, field_name, instruction))
            got = await self._reply_text(req, schema)
            if got is None:  # deferred: dry run or batch submission
                return ItemsOutcome(accepted, {}, call_id, deferred=True)
            text, call_id = got
            good, problems = read_items(text, schema, todo, known)
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
        return ItemsOutcome(accepted, problems, call_id)

    async def ask_text(self, req: Request, *, max_tokens: int, temperature: float | None = None,
                       seed: int | None = None) -> TextReply:
        """A plain-text reply (no response format), for evaluation prompts read as free text.

        The key adds the decoding settings to the messages, so sampled runs with different seeds are
        cached apart and a greedy re-run is free.
        """
        temp = self.settings.temperature if temperature is None else temperature
        decoding = {"max_tokens": max_tokens, **({"seed": seed} if seed is not None else {})}
        key = text_request_key(self.settings.model, req.as_messages(), decoding, temp)
        cached = self._cached(key)
        if cached is not None:
            self.stats.cache_hits += 1
            return TextReply(*cached)
        if self.settings.offline:
            raise CacheMissError(f"--offline: no cached reply for a {req.stage} request (lang {req.lang}, key {key[:12]}…)")
        body = {"model": self.settings.model, "messages": req.as_messages(), "temperature": temp, **decoding}
        return TextReply(*await self._send(key, req, lambda: body))

    async def _reply_text(self, req: Request, schema: type[BaseModel]) -> tuple[str, str] | None:
        """A structured request's reply text and call id, from the cache or the endpoint; None when deferred."""
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
            if key not in self.in_open_batches:  # never submit (and pay for) the same request twice
                self._defer(key, req, schema)
            return None
        return await self._send(key, req, lambda: self.wire_body(req, schema))

    # -- cache and records --------------------------------------------------------------------------

    def _cached(self, key: str) -> tuple[str, str] | None:
        hit = self.cache.get(key)
        return None if hit is None else (_content(hit[0]), hit[1])

    def _store(self, key: str, req: Request, response: dict, latency_ms: float, source: str) -> str:
        usage = response.get("usage") or {}
        tin, tout = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        model = response.get("model") or self.settings.model
        call = LLMCall(
            id="call_" + uuid.uuid4().hex[:20], request_key=key, model=model, prompt_hash=req.prompt_hash,
            stage=req.stage, lang=req.lang, source=source, tokens_in=tin, tokens_out=tout, latency_ms=latency_ms,
            cost_usd=cost_usd(model, tin, tout, batch=source == "batch"), created_at=now(),
        )
        self.cache.put(call, {"messages": req.as_messages(), "schema": req.schema_name}, response)
        return call.id

    # -- sending ------------------------------------------------------------------------------------

    def wire_body(self, req: Request, schema: type[BaseModel]) -> dict[str, Any]:
        messages = req.as_messages()
        if self._json_mode:
            hint = (
                "Reply with one JSON object that validates against this JSON schema, and nothing else:\n"
                + canonical(strict_schema(schema))
            )
            messages = [{"role": "system", "content": hint}, *messages]
            fmt: dict[str, Any] = {"type": "json_object"}
        else:
            fmt = {"type": "json_schema", "json_schema": {"name": req.schema_name, "schema": strict_schema(schema), "strict": True}}
        return {"model": self.settings.model, "messages": messages, "response_format": fmt, "temperature": self.settings.temperature}

    async def _send(self, key: str, req: Request, make_body: Callable[[], dict[str, Any]]) -> tuple[str, str]:
        """Send a request, retrying, and store its reply; or take the reply of the worker that holds its claim.

        The claim is taken, or renewed, in the same concurrency slot as each attempt and lasts one
        time-out and a margin, so it cannot run out while the attempt is in flight; while another
        worker holds it, this one waits for that worker's reply, or for its claim to run out.
        """
        attempt = waits = 0
        held = False
        try:
            while True:
                body = make_body()
                try:
                    async with self._sem:
                        held = self.cache.claim(key, self.worker, self.settings.timeout_s + CLAIM_MARGIN_S)
                        hit = self._cached(key)  # a reply stored since we looked, by a worker whose claim has ended
                        if held and hit is None:
                            started = time.perf_counter()
                            self.stats.sent += 1
                            # The SDK's own request path (auth, errors, time-outs) with our body as is: its typed
                            # parameter transform costs milliseconds of CPU per call and changes nothing here.
                            response = await self._sdk.post("/chat/completions", body=body, cast_to=object)
                            latency = (time.perf_counter() - started) * 1000
                    if hit is not None:
                        self.stats.cache_hits += 1
                        return hit
                    if not held:
                        await asyncio.sleep(min(CLAIM_POLL_MAX_S, 0.05 * 2**waits))
                        waits += 1
                        continue
                    if not isinstance(response, dict):
                        response = {"choices": [{"message": {"content": str(response)}}]}
                    call_id = self._store(key, req, response, latency, self.source)  # ends the claim
                    held = False
                    return _content(response), call_id
                except openai.BadRequestError as exc:
                    if not self._json_mode and _schema_unsupported(exc):
                        self._json_mode = True  # server lacks json_schema: fall back to JSON mode
                        continue
                    self.stats.failures += 1
                    raise LLMError(f"{req.stage} request rejected by the endpoint: {_brief(exc)}") from exc
                except RETRYABLE as exc:
                    name = type(exc).__name__
                    self.stats.by_error[name] = self.stats.by_error.get(name, 0) + 1
                    if attempt >= self.settings.max_retries:
                        self.stats.failures += 1
                        raise LLMError(f"{req.stage} request failed after {attempt + 1} attempts: {_brief(exc)}") from exc
                    self.stats.retries += 1
                    await asyncio.sleep(self._backoff(attempt, exc))
                    attempt += 1
                except openai.APIStatusError as exc:
                    self.stats.failures += 1
                    raise LLMError(f"{req.stage} request failed: {_brief(exc)}") from exc
        finally:
            if held:  # failed, cancelled, or answered from the cache: another worker may try it
                self.cache.release(key, self.worker)

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

    def _defer(self, key: str, req: Request, schema: type[BaseModel]) -> None:
        if key in self.deferred:
            return
        body = self.wire_body(req, schema)
        self.deferred[key] = (req, body)
        tin = estimate_tokens(canonical(body["messages"])) + estimate_tokens(canonical(body["response_format"]))
        self.plan.requests += 1
        self.plan.tokens_in += tin
        self.plan.tokens_out += req.expected_output_tokens
        cost = cost_usd(self.settings.model, tin, req.expected_output_tokens, batch=self.settings.batch)
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
                  "lang": req.lang, "prompt_hash": req.prompt_hash}
            for key, (req, _) in self.deferred.items()
        }
        self.cache.add_batch(batch.id, stage=stage, status=batch.status, input_file_id=uploaded.id, requests=requests)
        self.deferred.clear()
        return batch.id

    async def collect_batches(self) -> dict[str, str]:
        """Fetch finished batches into the cache; returns batch id -> status."""
        statuses: dict[str, str] = {}
        for row in self.cache.open_batches():
            batch = await self._sdk.batches.retrieve(row["id"])
            statuses[row["id"]] = batch.status
            if batch.status in ("validating", "in_progress", "finalizing"):
                self.in_open_batches.update(row["request_keys"])
            if batch.status != "completed":
                if batch.status in ("failed", "expired", "cancelled"):
                    self.cache.set_batch_status(row["id"], batch.status)
                continue
            content = await self._sdk.files.content(batch.output_file_id)
            for line in content.text.splitlines():
                if not line.strip():
                    continue
                item = json.loads(line)
                key = item["custom_id"]
                resp = (item.get("response") or {})
                if resp.get("status_code") != 200 or key not in row["request_keys"] or self._cached(key):
                    continue
                info = row["request_keys"][key]
                req = Request(tuple(tuple(m) for m in info["messages"]), info["schema_name"], info["stage"], info["lang"], info["prompt_hash"])
                self._store(key, req, resp["body"], 0.0, "batch")
            self.cache.set_batch_status(row["id"], "collected")
            statuses[row["id"]] = "collected"
        return statuses

    # -- parsing ------------------------------------------------------------------------------------

    def _parse(self, req: Request, schema: type[T], text: str, call_id: str) -> Reply[T]:
        try:
            value = schema.model_validate(json.loads(text))
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


def _schema_unsupported(exc: openai.BadRequestError) -> bool:
    text = str(exc).lower()
    return "json_schema" in text or "response_format" in text


def _brief(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def prompt_hash(*templates: str) -> str:
    return text_hash("\x1e".join(templates))
