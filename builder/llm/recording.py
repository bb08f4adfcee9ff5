"""Replaying a bundled recording through the real SDK, and exporting one from LLM caches.

The recording maps request keys to the replies an LLM gave. With no endpoint configured the client
uses `ReplayTransport` underneath the official SDK, so the same code path parses the replies, and
every call it yields is labelled `recording` in the cache.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx2

from builder.files import atomic_write
from builder.llm.cache import LLMCache
from builder.llm.keys import canonical_json, key_from_wire

MISSING = (
    "this request is not in the bundled recording (it covers the demo subset of the sample only); "
    "set OPENAI_API_KEY (and OPENAI_BASE_URL for a non-OpenAI endpoint) to call a live model"
)


class ReplayTransport(httpx2.AsyncBaseTransport):
    def __init__(self, replies: dict[str, dict]) -> None:
        self.replies = replies
        self.served = 0

    @classmethod
    def from_file(cls, path: str | Path | None) -> ReplayTransport:
        replies: dict[str, dict] = {}
        if path and Path(path).is_file():
            for line in Path(path).read_text(encoding="utf-8").splitlines():
                if line.strip():
                    rec = json.loads(line)
                    replies[rec["key"]] = rec["response"]
        return cls(replies)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx2.Response(404, json={"error": {"message": "a recording replays chat completions only"}})
        body = json.loads(await request.aread())
        reply = self.replies.get(key_from_wire(body))
        if reply is None:
            return httpx2.Response(404, json={"error": {"message": MISSING, "type": "not_recorded"}})
        self.served += 1
        return httpx2.Response(200, json=reply)


def export_recording(path: Path, *caches: LLMCache) -> int:
    """Write every cached reply of the caches as one recording (sorted, so the file diffs cleanly)."""
    replies: dict[str, dict] = {}
    for cache in caches:
        replies.update(cache.responses())

    def lines(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8") as fh:
            for key in sorted(replies):
                fh.write(canonical_json({"key": key, "response": replies[key]}) + "\n")

    atomic_write(path, lines)
    return len(replies)
