"""Which structured-output mode (`builder.llm.modes`) a client's structured requests go out in, and its probe.

Settled before the first structured request of a run is sent and awaited by all the others, so none
races the choice: the mode recorded in the cache for this endpoint and model, or else the strongest one
a tiny probe request finds accepted, recorded then. Should the server later refuse the settled mode,
every later request moves to the next weaker one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from builder.llm._errors import LLMError, Refused
from builder.llm._transport import Transport
from builder.llm._types import Plan, Stats
from builder.llm.cache import LLMCache
from builder.llm.config import LLMSettings
from builder.llm.modes import MODES, Mode, response_format, weaker, wire_messages

PROBE_MESSAGES = [{"role": "user", "content": 'Reply with the JSON object {"ok": true}.'}]
PROBE_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}


class StructuredMode:
    """The mode of one client: `mode` is None until `settle` ran."""

    def __init__(self, transport: Transport, cache: LLMCache, settings: Callable[[], LLMSettings], stats: Stats,
                 plan: Plan) -> None:
        self.transport = transport
        self.cache = cache
        self.settings = settings
        self.stats = stats
        self.plan = plan
        self.mode: Mode | None = None
        self._lock = asyncio.Lock()
        self._error: LLMError | None = None  # the probe failed for good: every request fails with it

    async def settle(self) -> Mode:
        """The mode, settled once (the model is settled already)."""
        if self.mode is None:
            async with self._lock:
                if self._error is not None:
                    raise self._error
                if self.mode is None:
                    try:
                        self.mode = await self._find()
                    except LLMError as exc:
                        self._error = exc
                        raise
        return self.mode

    async def _find(self) -> Mode:
        settings = self.settings()
        if settings.source == "recording":
            return "json_schema"  # the recording holds replies to strict structured requests
        recorded = self.cache.mode(settings.endpoint, settings.model)
        if recorded is not None:
            return recorded
        if settings.dry_run:
            self.plan.mode_assumed = True
            return MODES[0]
        refusals: dict[str, str] = {}
        for mode in MODES[:-1]:
            try:
                await self.transport.post(lambda mode=mode: self._probe_body(mode), f"probing {settings.endpoint} for structured outputs")
                break
            except Refused as exc:
                refusals[mode] = exc.reason
            finally:
                self.stats.probes += 1
        else:
            mode = MODES[-1]  # nothing asked of the server: always accepted
        self.cache.record_mode(settings.endpoint, settings.model, mode, refusals)
        return mode

    def _probe_body(self, mode: Mode) -> dict[str, Any]:
        body = {"model": self.settings().model, "messages": wire_messages(mode, PROBE_MESSAGES, PROBE_SCHEMA),
                "temperature": 0.0, "max_tokens": 16}
        return {**body, "response_format": response_format(mode, "probe", PROBE_SCHEMA)}

    async def refused(self, mode: Mode, reason: str) -> None:
        """The server refused `mode` although it was settled: move every later request to a weaker one."""
        async with self._lock:
            if self.mode != mode:
                return  # another request already moved on
            settings = self.settings()
            if mode == MODES[-1]:
                raise LLMError(f"the LLM endpoint {settings.endpoint} refused a request without a response format: {reason}")
            self.mode = weaker(mode)
            self.cache.record_mode(settings.endpoint, settings.model, self.mode, {mode: reason})
