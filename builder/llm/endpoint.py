"""The endpoint as users see it: its base URL with credentials hidden, and errors that say what to fix.

A base URL may carry credentials (`https://user:secret@host/v1`, `…/v1?api-key=…`). `redact_url` is
the only form of it that is shown or stored: in messages, the LLM cache's endpoint records, results
and reports. The error messages name that URL and the likely fix: a missing `/v1`, a model name the
server does not serve (with the names `/v1/models` offers), a server that is not running, a key
refused. Keys are never echoed, not even the masked form some servers put in their error bodies.
The HTTP client's own log (every request's URL, at INFO) goes through `RedactedURLs`.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx2
import openai

DEFAULT_URL = "https://api.openai.com/v1"  # the SDK's default when no base URL is set
PUBLIC_QUERY = frozenset({"api-version"})  # query parameters known to hold no secret


def redact_url(url: str | None) -> str:
    """The URL with user, password and every query value but a known-public one replaced by `***`."""
    if not url:
        return DEFAULT_URL
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = urlencode([(k, v if k.lower() in PUBLIC_QUERY else "***") for k, v in parse_qsl(parts.query, keep_blank_values=True)],
                      safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def split_query(url: str | None) -> tuple[str | None, dict[str, str]]:
    """The base URL without its query, and the query's parameters (which the SDK sends with every request)."""
    if not url or "?" not in url:
        return url, {}
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), dict(parse_qsl(parts.query, keep_blank_values=True))


def scrub(text: str, url: str | None, key: str | None) -> str:
    """`text` with the raw base URL and the key replaced by their redacted forms."""
    if url and url != redact_url(url):
        text = text.replace(url, redact_url(url))
    if key and len(key) >= 8:
        text = text.replace(key, "***")
    return text


def server_message(exc: openai.APIStatusError) -> str:
    """What the server said in an error reply: OpenAI's `error.message`, FastAPI's `detail`, or the status line."""
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body["error"] if isinstance(body.get("error"), dict) else body  # the SDK keeps `error`'s value, if any
    if error.get("message"):
        return str(error["message"])[:300]
    if body.get("detail"):
        return json.dumps(body["detail"], ensure_ascii=False, default=str)[:300]
    return str(exc)[:300]


def unreachable(url: str, cause: BaseException | None) -> str:
    why = f" ({type(cause).__name__}: {cause})" if cause else ""
    return (f"cannot reach the LLM endpoint {url}{why}: is the server running, and is OPENAI_BASE_URL its address "
            "(scheme, host, port)?")


def key_refused(url: str, status: int) -> str:
    if status == 403:
        return f"the LLM endpoint {url} refused access (HTTP 403): check that the key in OPENAI_API_KEY may use this model"
    return (f"the LLM endpoint {url} refused the API key (HTTP {status}): set OPENAI_API_KEY to a key it accepts "
            "(a local server started without a key accepts any)")


async def not_found(sdk: openai.AsyncOpenAI, url: str, model: str) -> str:
    """Why a chat completion answered 404: the model's name, or a base URL without `/v1`."""
    served = await _served_models(sdk)
    if served is not None:
        if model not in served:
            offered = ", ".join(sorted(served)[:20]) or "no model"
            return (f"the LLM endpoint {url} does not serve the model {model!r}; its /models lists: {offered}. "
                    "Set BUILDER_LLM_MODEL to one of them")
        return f"the LLM endpoint {url} answered 404 to a chat completion for {model!r}, which its /models lists"
    parts = urlsplit(url)
    if not parts.path.rstrip("/").endswith("/v1"):
        with_v1 = urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/v1"))
        if await _served_models(sdk.with_options(base_url=str(sdk.base_url).rstrip("/") + "/v1")) is not None:
            return f"the LLM endpoint {url} answered 404; it answers at {with_v1}: add /v1 to OPENAI_BASE_URL"
        return (f"the LLM endpoint {url} answered 404 to /chat/completions: OpenAI-compatible base URLs usually end "
                f"in /v1 (try {with_v1})")
    return f"the LLM endpoint {url} answered 404 to /chat/completions and to /models: is it an OpenAI-compatible server?"


async def _served_models(sdk: openai.AsyncOpenAI) -> set[str] | None:
    """The model ids an endpoint lists at /models, or None when it has no such route (or answers nothing usable)."""
    try:
        page = await sdk.models.list()
    except (openai.APIStatusError, openai.APIConnectionError):
        return None
    return {m.id for m in page.data}


class RedactedURLs(logging.Filter):
    """Hides the credentials in the URLs the HTTP client logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_url(str(a)) if isinstance(a, httpx2.URL) else a for a in record.args)
        return True


logging.getLogger("httpx2").addFilter(RedactedURLs())
