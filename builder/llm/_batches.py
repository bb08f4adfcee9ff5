"""Dry runs and batches: requests deferred instead of sent, priced in a `Plan`, submitted as one Batch API job,
and collected into the cache by a later run."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai

from builder.llm._records import Records
from builder.llm._types import PLAN_SAMPLES, Plan, Request
from builder.llm.cache import LLMCache
from builder.llm.config import LLMSettings
from builder.llm.keys import canonical_json
from builder.llm.modes import MODES, mode_of
from builder.llm.pricing import cost_usd, estimate_tokens

OPEN_BATCH = ("validating", "in_progress", "finalizing", "cancelling")  # the server is still working on it
BATCH_ATTEMPTS = 3  # batches a request may fail in (expired, cancelled, a server error) before it is flagged


class Batches:
    """The deferred requests of one client, and the batches of its cache."""

    def __init__(self, sdk: openai.AsyncOpenAI, cache: LLMCache, records: Records, settings: Callable[[], LLMSettings],
                 brief: Callable[[Exception], str]) -> None:
        self.sdk = sdk
        self.cache = cache
        self.records = records
        self.settings = settings
        self.brief = brief
        self.plan = Plan()
        self.deferred: dict[str, tuple[Request, dict]] = {}
        self.in_open_batches: set[str] = set()  # keys already submitted in a batch not yet collected
        self.failed: dict[str, str] = {}  # keys given up after failing in batches -> the server's reason

    def defer(self, key: str, req: Request, body: dict[str, Any]) -> None:
        """Keep the request `body` for the batch and count it in the plan."""
        if key in self.deferred:
            return
        settings = self.settings()
        self.deferred[key] = (req, body)
        tin = estimate_tokens(canonical_json(body["messages"])) + estimate_tokens(canonical_json(body.get("response_format")))
        self.plan.mode = mode_of(body)
        self.plan.requests += 1
        self.plan.tokens_in += tin
        self.plan.tokens_out += req.expected_output_tokens
        if len(self.plan.samples) < PLAN_SAMPLES:
            self.plan.samples.append(body)
        cost = cost_usd(settings.model, tin, req.expected_output_tokens, endpoint=self.records.priced_at, batch=settings.batch)
        if cost is None:
            self.plan.cost_known = False
        else:
            self.plan.cost_usd += cost

    async def submit(self, stage: str) -> str | None:
        """Upload the deferred requests as one Batch API job and remember its id in the cache."""
        if not self.deferred:
            return None
        lines = [
            canonical_json({"custom_id": key, "method": "POST", "url": "/v1/chat/completions", "body": body})
            for key, (_, body) in self.deferred.items()
        ]
        uploaded = await self.sdk.files.create(file=("requests.jsonl", ("\n".join(lines) + "\n").encode()), purpose="batch")
        batch = await self.sdk.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
        requests = {
            key: {"messages": [list(m) for m in req.messages], "schema_name": req.schema_name, "stage": req.stage,
                  "lang": req.lang, "prompt_hash": req.prompt_hash, "mode": mode_of(body), "max_tokens": body["max_tokens"]}
            for key, (req, body) in self.deferred.items()
        }
        self.cache.add_batch(batch.id, stage=stage, status=batch.status, input_file_id=uploaded.id, requests=requests)
        self.deferred.clear()
        return batch.id

    async def collect(self) -> dict[str, str]:
        """Poll every open batch, of any stage; read each finished one into the cache.

        Returns batch id -> its status, or why it could not be polled: a batch the endpoint cannot show
        stays open for the next run and holds up nothing else. A finished batch's output and error
        files are read whatever its end (completed, expired, cancelled, failed): each reply is stored
        once, and each failed line is kept with the server's reason. A request that failed for good
        (a client error) or in BATCH_ATTEMPTS batches is then given up (`failed`) and its items
        flagged; any other is asked again in the next batch.
        """
        statuses: dict[str, str] = {}
        for row in self.cache.open_batches():
            try:
                statuses[row["id"]] = await self._collect(row)
            except openai.APIError as exc:
                self.in_open_batches.update(row["request_keys"])
                statuses[row["id"]] = f"not polled ({self.brief(exc)})"
        for key, failures in self.cache.batch_failures().items():
            if self.records.cached(key) is None and (failures[-1]["final"] or len(failures) >= BATCH_ATTEMPTS):
                attempts = "" if failures[-1]["final"] else f" (in {len(failures)} batches)"
                self.failed[key] = failures[-1]["reason"] + attempts
        return statuses

    async def _collect(self, row: dict[str, Any]) -> str:
        batch = await self.sdk.batches.retrieve(row["id"])
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
            content = await self.sdk.files.content(file_id)
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
                    if self.records.cached(key) is None:
                        info = wanted[key]  # a batch that records no mode or limit sent json_schema, no max_tokens
                        self.records.store(key, _stored_request(info), response["body"], 0.0, "batch",
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
