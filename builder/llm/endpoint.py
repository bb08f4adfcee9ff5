"""The endpoint as users see it: its base URL with credentials hidden, and errors that say what to fix.

A base URL may carry credentials (`https://user:secret@host/v1`, `…/v1?api-key=…`). `redact_url` is
the only form of it that is shown or stored: in messages, the LLM cache's endpoint records, results
and reports. The error messages name that URL and the likely fix: a missing `/v1`, a model name the
server does not serve (with the names `/v1/models` offers), a server that is not running, a key
refused. Keys are never echoed, not even the masked form some servers put in their error bodies.
The HTTP client's own log (every request's URL, at INFO) goes through `RedactedURLs`.

Each credential goes where its owner meant it (`credentials`): the key (`OPENAI_API_KEY`) as the
SDK's Bearer token; the user and password of a base URL as HTTP Basic auth, and only where no key is
set, since one `Authorization` header carries one credential: when both are given, the key wins and
the URL's user and password are sent nowhere (docs/troubleshooting.md). A refusal says which was sent.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import httpx2
import openai

DEFAULT_URL = "https://api.openai.com/v1"  # the SDK's default when no base URL is set
PUBLIC_QUERY = frozenset({"api-version"})  # query parameters known to hold no secret
NO_KEY = "not-needed"  # what the SDK is given where no key is set: it insists on one, local servers ask for none
KEY = "the key in OPENAI_API_KEY (as a Bearer token)"
USER_PASSWORD = "the user and password in OPENAI_BASE_URL (as HTTP Basic auth)"
NOTHING = "no credential (OPENAI_API_KEY is not set)"


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


@dataclass(frozen=True)
class Credentials:
    """What the SDK is given for one endpoint, and which credential that sends (`sent`, for errors)."""

    base_url: str | None  # without user, password or query: the HTTP client never sees them
    query: dict[str, str]  # the base URL's query, sent with every request (Azure's `api-key`, `api-version`)
    api_key: str  # the SDK's Bearer token
    headers: dict[str, str]  # an Authorization header that replaces the Bearer token (Basic auth from the URL)
    sent: str
    unsent: bool  # the URL holds a user or password that goes nowhere (a key was given)

    def sdk_options(self) -> dict:
        """Keyword arguments for `openai.AsyncOpenAI`."""
        return {"base_url": self.base_url, "default_query": self.query or None, "api_key": self.api_key,
                "default_headers": self.headers or None}


def credentials(url: str | None, key: str | None) -> Credentials:
    """The key as a Bearer token when one is set, else the URL's user and password as Basic auth (else nothing)."""
    bare, query = split_query(url)
    user = password = None
    if bare:
        parts = urlsplit(bare)
        if "@" in parts.netloc:
            user, password = unquote(parts.username or ""), unquote(parts.password or "")
            bare = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    has_key = bool(key) and key != NO_KEY
    if has_key or user is None:
        return Credentials(bare, query, key or NO_KEY, {}, KEY if has_key else NOTHING, unsent=user is not None)
    basic = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return Credentials(bare, query, NO_KEY, {"Authorization": f"Basic {basic}"}, USER_PASSWORD, unsent=False)


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


def key_refused(url: str, status: int, creds: Credentials) -> str:
    """A 401 or 403, naming the endpoint, the credential that was sent and the one that was not."""
    if status == 403:
        fix = "check that it may use this model"
    elif creds.sent == USER_PASSWORD:
        fix = "correct them in OPENAI_BASE_URL, or set OPENAI_API_KEY if the server wants a key (it is then sent instead)"
    else:
        fix = "set OPENAI_API_KEY to a key it accepts (a local server started without a key accepts any)"
    if creds.unsent:
        fix += ("; the user and password in OPENAI_BASE_URL were not sent, because a key is set and the key wins "
                "(unset OPENAI_API_KEY to send them as HTTP Basic auth)")
    return f"the LLM endpoint {url} refused {creds.sent} (HTTP {status}): {fix}"


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
