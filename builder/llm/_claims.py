"""Claims: a request is sent once among the workers sharing a cache (processes on one PostgreSQL workspace)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from builder.llm._errors import Elsewhere
from builder.llm._records import Records
from builder.llm._types import Got, Stats
from builder.llm.cache import LLMCache, Worker

CLAIM_MARGIN_S = 30.0  # a claim lasts one time-out and this (clock skew between workers' machines, database latency)
CLAIM_POLL_MAX_S = 1.0  # how often, at most, a worker waiting on another's claim looks for its reply
_skipping: ContextVar[bool] = ContextVar("skipping_claimed", default=False)


class ClaimedElsewhere(Exception):
    """Another worker is sending the request, and the caller has other work to do meanwhile (`skipping_claimed`)."""


@contextmanager
def skipping_claimed() -> Iterator[None]:
    """Within it, a first request another worker is sending raises `ClaimedElsewhere` instead of waiting for its reply:
    a worker that has other requests to send sends those first, so that N workers send N times as many at once."""
    token = _skipping.set(True)
    try:
        yield
    finally:
        _skipping.reset(token)


class Claims:
    """This worker's claims on requests of `cache`, each for `lease_s` seconds from when it is taken or renewed."""

    def __init__(self, cache: LLMCache, records: Records, stats: Stats, lease_s: float) -> None:
        self.cache = cache
        self.records = records
        self.stats = stats
        self.lease_s = lease_s + CLAIM_MARGIN_S
        self.worker = Worker.current()  # whose claims are whose

    def take(self, key: str) -> bool:
        """Take or renew the claim to send `key`; False while another worker holds it or once its reply is stored."""
        if not self.cache.claim(key, self.worker, self.lease_s):
            return False
        if self.cache.get(key) is not None:  # stored by a worker whose claim has ended
            self.cache.release(key, self.worker)
            return False
        return True

    async def once(self, key: str, send: Callable[[], Awaitable[Got]], *, first: bool = False) -> Got:
        """Send a request once among the workers.

        `send` posts with the request's claim (storing the reply ends it); while another worker holds
        the claim this one waits for that worker's reply, or takes the claim over when that worker died
        or its lease ran out. A `first` request (not a re-ask) raises `ClaimedElsewhere` instead of
        waiting, within `skipping_claimed`.
        """
        waits = 0
        while True:
            try:
                return await send()
            except Elsewhere:
                hit = self.records.cached(key)
                if hit is not None:
                    self.stats.cache_hits += 1
                    return hit
                if first and _skipping.get():
                    raise ClaimedElsewhere(key) from None
                await asyncio.sleep(min(CLAIM_POLL_MAX_S, 0.05 * 2**waits))
                waits += 1
            except BaseException:  # failed or cancelled: another worker may try it
                self.cache.release(key, self.worker)
                raise
