"""How many requests go out at once, and how many items each asks for: lowered for a server seen to queue.

A local server such as llama.cpp's answers one request at a time and queues the rest: at the
defaults (16 at once, 10 items each) replies come back one by one, the queued requests time out
(the server cannot cancel them, so it keeps working on abandoned ones), and a small model drops or
garbles ids in long lists. The client watches for three signs, from what it already measures:

- replies queue: the server's parallelism, estimated as the completion tokens it returns per second
  times the fewest seconds per completion token any reply took (for a server that answers one at a
  time, about 1), is at most a quarter of the requests in flight while replies take a second or more
  (a batching server such as vLLM answers many at once, each somewhat slower: that is no queue). The
  limit becomes that parallelism, rounded (at least 1);
- a request times out while others were in flight: the limit becomes half the replies that came back
  while it waited, what the server manages in one time-out, so that a queue drains well within one
  (a request that alone took longer than the time-out needs a longer one, not fewer at once);
- a reply to several items drops at least half of them (missing, or answered under ids never asked):
  the items per request become half the items that request asked for.

Limits only go down within a run, and each change is said once, with the option that starts the
next run there (`say`, and `notices`). Latencies are measured, never asserted: tests check what was
decided.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

QUEUE_FLOOR_S = 1.0  # replies quicker than this (typical) are not worth fewer requests at once
QUEUED_SHARE = 4  # a queue: the requests in flight are at least this many times what the server answers at once
WINDOW = 8  # the latest replies that estimate the server's parallelism
MIN_REPLIES = 4  # replies in the window before it says anything


@dataclass(frozen=True)
class Ticket:
    """A request in flight: how many were in flight with it, and how many replies had come before it."""

    in_flight: int
    replies_before: int


class Pacer:
    """The concurrency limit and items per request of one client, lowered as the module docstring says."""

    def __init__(self, concurrency: int, items_per_request: int, endpoint: str, say: Callable[[str], None]) -> None:
        self.concurrency = concurrency
        self.items_per_request = items_per_request
        self.endpoint = endpoint
        self.notices: list[str] = []
        self._say = say
        self._in_flight = 0
        self._replies = 0
        self._fastest: float | None = None  # the fewest seconds per completion token of any reply
        self._window: deque[tuple[float, float, int]] = deque(maxlen=WINDOW)  # (done at, latency, completion tokens)
        self._turn = asyncio.Condition()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Ticket]:
        """Wait until fewer than `concurrency` requests are in flight; the ticket of this one while it is."""
        async with self._turn:
            await self._turn.wait_for(lambda: self._in_flight < self.concurrency)
            self._in_flight += 1
        try:
            yield Ticket(self._in_flight, self._replies)
        finally:
            async with self._turn:
                self._in_flight -= 1
                self._turn.notify_all()

    def replied(self, latency_s: float, tokens_out: int) -> None:
        """A reply came after `latency_s` seconds on the wire, with `tokens_out` completion tokens (0: not said)."""
        done, latency = time.monotonic(), latency_s
        self._replies += 1
        if tokens_out <= 0:
            return
        self._fastest = min(self._fastest or latency / tokens_out, latency / tokens_out)
        self._window.append((done, latency, tokens_out))
        parallel = self._parallelism()
        if parallel is not None and QUEUED_SHARE * parallel <= self._in_flight:
            self._lower(max(1, round(parallel)), f"answers about {parallel:.1f} request(s) at a time and queues the "
                        f"others ({self._in_flight} in flight, replies taking "
                        f"{statistics.median(w[1] for w in self._window):.0f} s)")

    def timed_out(self, ticket: Ticket) -> None:
        """The ticket's request timed out: with others in flight, the server was queueing them."""
        if ticket.in_flight <= 1 and self._in_flight <= 1:
            return
        answered = self._replies - ticket.replies_before
        self._lower(max(1, answered // 2), f"let a request time out while {max(ticket.in_flight, self._in_flight) - 1} "
                    f"other(s) were in flight, answering {answered} in that time")

    def dropped(self, asked: int, dropped: int) -> None:
        """A request for `asked` items ended with `dropped` of them missing from the replies or under wrong ids."""
        if asked < 2 or 2 * dropped < asked:
            return
        lower = max(1, asked // 2)
        if lower < self.items_per_request:
            old, self.items_per_request = self.items_per_request, lower
            self._notice(f"the LLM endpoint {self.endpoint} dropped {dropped} of {asked} items asked in one request: "
                         f"items per request lowered from {old} to {lower} for this run (next time: "
                         f"--items-per-request {lower})")

    def _parallelism(self) -> float | None:
        """Requests the server answers at once, from the window's replies; None until it can tell, or while replies are quick."""
        window = list(self._window)
        if len(window) < MIN_REPLIES or statistics.median(w[1] for w in window) < QUEUE_FLOOR_S:
            return None
        span = window[-1][0] - window[0][0]
        if span <= 0 or self._fastest is None:
            return None
        tokens_per_s = sum(w[2] for w in window[1:]) / span
        return tokens_per_s * self._fastest

    def _lower(self, limit: int, why: str) -> None:
        if limit >= self.concurrency:
            return
        old, self.concurrency = self.concurrency, limit
        self._notice(f"the LLM endpoint {self.endpoint} {why}: concurrency lowered from {old} to {limit} for this run "
                     f"(next time: --concurrency {limit})")

    def _notice(self, message: str) -> None:
        self.notices.append(message)
        self._say(message)
