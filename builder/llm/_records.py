"""Call records: a reply stored with its call (tokens, latency, cost, mode) in the cache, and read back."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from builder.llm._types import Got, Request, Stats
from builder.llm.cache import LLMCache
from builder.llm.config import LLMSettings
from builder.llm.pricing import cost_usd
from builder.records import LLMCall
from builder.workspace.store import now


class Records:
    """The calls of one client: `priced_at` is the endpoint prices are looked up for (None: priced nowhere)."""

    def __init__(self, cache: LLMCache, settings: Callable[[], LLMSettings], stats: Stats, priced_at: str | None) -> None:
        self.cache = cache
        self.settings = settings
        self.stats = stats
        self.priced_at = priced_at

    def cached(self, key: str) -> Got | None:
        hit = self.cache.get(key)
        return None if hit is None else Got(content(hit[0]), hit[1], cut_off(hit[0]))

    def store(self, key: str, req: Request, response: dict, latency_ms: float, source: str, mode: str,
              max_tokens: int | None) -> str:
        """Store the reply and its call in one transaction; the call's id."""
        usage = response.get("usage") or {}
        tin, tout = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        model = response.get("model") or self.settings().model
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

    def got(self, response: dict, call_id: str) -> Got:
        """A reply just stored, as read back."""
        return Got(content(response), call_id, cut_off(response))


def content(response: dict) -> str:
    try:
        return response["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        return ""


def cut_off(response: dict) -> bool:
    try:
        return response["choices"][0].get("finish_reason") == "length"
    except (KeyError, IndexError, TypeError, AttributeError):
        return False
