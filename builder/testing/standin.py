"""An OpenAI-compatible stand-in server for tests, benchmarks and re-recording the demo.

It answers chat completions (json_schema, JSON mode, or JSON asked for in the prompt only, which it
wraps in a Markdown fence as chat models do: translations, inflections, sentences and the pair audit's
verdicts), models, files and batches under /v1 on 127.0.0.1,
deterministically from a lexicon, and injects faults on demand: 429 with Retry-After, 500, replies
slower than the client's time-out, malformed JSON, JSON that breaks the schema, dropped connections,
and sentence pairs whose frames differ. It fails as real servers do: a response format it lacks is
refused with the status and words of the server it plays (`JSON_SCHEMA_400`, llama.cpp's
`LLAMA_CPP_500`); a reply longer than `max_tokens` is cut off (`finish_reason: length`); messages
beyond `context_tokens` get 400 `context_length_exceeded`; a wrong path, model or key gets 404 or
401. It can play a local server such as llama.cpp's: one that answers to any model name and echoes
it (`echo_model`), lists the models it serves at /v1/models (`models`: one, several or none), answers
`slots` requests at a time and queues the rest (a request whose client gave up is still answered, as
llama.cpp's server cannot cancel one), and, like a small model, answers at most `max_items` of the
items one request asks for. A batch goes through the Batch API's states and ends as
`BatchScript` says (completed, failed, expired, cancelled; lines failing; all lines failing, with
no output file). It counts what it served, so tests can check that a resumed run never asks again
for an item already answered, how many re-asks it received, and that no batch line was paid twice.

Plain-text requests (no response format: evaluation prompts) are answered by `Lexicon.reply`, by
kind: a translation request, a choice between sentence A and B, a metalinguistic question naming
two concepts, or an M2C question (context and question lines, then an empty answer line).
"""

from __future__ import annotations

import base64
import email.parser
import hashlib
import json
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FAULT_KINDS = ("429", "500", "slow", "malformed", "schema", "drop")
_BLOCK = re.compile(r"```json\s*(.*?)```", re.S)
_CODE = re.compile(r"Target language code: (\S+?)\.")
_PROP = re.compile(r'Property in English: "(.*?)"\n')
_VPROP = re.compile(r'Property in .*? \(verified\): "(.*?)"\n')
_IDS = re.compile(r"\b[cpxl]_[0-9a-f]{12}\b")
# the self-translation prompts of data/selftranslate/prompts.yaml (English, German, Chinese sources)
_TRANSLATE = re.compile(r"^(?:Please translate the following text into |Bitte übersetze den folgenden Text ins |请将下面的文字翻译成)"
                        r"(.+?): “(.*)”$", re.S)
_OPTION = re.compile(r"^.* ([AB]): “(.*)”$", re.M)
_QUOTED = re.compile(r'"([^"]*)"|«([^»]*)»|「([^」]*)」|“([^”]*)”')  # the quotes of every declared meta prompt
_OPENING_QUOTES = ('"', "«", "「", "“")  # a meta prompt ends with the answer's opening quote
_LABELLED = re.compile(r"^[^:：\n]+[:：]\s?(.*)$")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default backlog of 5 drops bursts of concurrent connections


class UnknownPrompt(ValueError):
    """A plain-text prompt of no kind the stand-in answers (sent back as HTTP 400)."""


@dataclass(frozen=True)
class Refusal:
    """How a server refuses a response format it lacks: the status and the body it sends."""

    status: int
    body: dict


# The OpenAI API for a model without structured outputs.
JSON_SCHEMA_400 = Refusal(400, {"error": {
    "message": "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
    "type": "invalid_request_error", "param": "response_format", "code": None}})
# llama-cpp-python's server (0.3.36), whose request validation error surfaces as a 500.
LLAMA_CPP_500 = Refusal(500, {"error": {
    "message": "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
               "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', 'ctx': {'expected': "
               "\"'text' or 'json_object'\"}}\n\n  File \"llama_cpp/server/app.py\", line 376, in "
               "create_chat_completion\n    POST /v1/chat/completions",
    "type": "internal_server_error", "param": None, "code": None}})


@dataclass
class BatchScript:
    """How the stand-in's batches go: the states a poll sees, then how a batch ends.

    A batch shows `validating` for `validating_polls` polls, `in_progress` for `running_polls`,
    `finalizing` for `finalizing_polls` (or `cancelling` for one poll when it ends cancelled), then
    its end. `expired` and `cancelled` batches answer the first `done_share` of their lines and write
    the rest to the error file (`batch_expired`, `batch_cancelled`); a `failed` batch failed
    validation (`failure`: code, message) and has no files. Of the lines run, a share
    `line_error_rate` fail with `line_error` (status, type, message), decided per line and attempt.
    """

    validating_polls: int = 0
    running_polls: int = 0
    finalizing_polls: int = 0
    end: str = "completed"
    done_share: float = 1.0
    line_error_rate: float = 0.0
    line_error: tuple[int, str, str] = (500, "server_error", "The server had an error while processing your request.")
    failure: tuple[str, str] = ("invalid_request", "The model 'standin-translator' is not supported by the Batch API.")
    seed: int = 0

    def states(self) -> list[str]:
        ending = ["cancelling"] if self.end == "cancelled" else ["finalizing"] * self.finalizing_polls
        running = [] if self.end == "failed" else ["in_progress"] * self.running_polls + ending
        return ["validating"] * self.validating_polls + running + [self.end]


_LINE_ENDS = {"expired": ("batch_expired", "This request could not be executed before the completion window expired."),
              "cancelled": ("batch_cancelled", "This request was cancelled before it could be executed.")}


class Lexicon:
    """Known answers by (lang, kind, english), (lang, property, concept) and (lang, lemma, bundle);
    synthetic otherwise."""

    def __init__(self) -> None:
        self.translations: dict[tuple[str, str, str], dict] = {}
        self.sentences: dict[tuple[str, str, str], dict] = {}
        self.inflections: dict[tuple[str, str, str], str] = {}
        # Plain-text (evaluation) requests.
        self.texts: dict[tuple[str, str], str] = {}  # (target name as the prompt gives it, source text) -> translation
        self.facts: set[str] = set()  # sentences held true when asked to choose between A and B
        self.preferred: set[str] = set()  # concept words picked when a question names exactly one
        self.unsure: set[str] = set()  # properties the stand-in will not answer about
        self.misread: set[str] = set()  # instructions (a prompt's first line) after which it answers the other letter
        self.m2c_answers: dict[tuple[str, str], str] = {}  # (context, question) -> reply
        self.judgements: dict[tuple[str, str], str] = {}  # (lang, statement) -> why the negative may have the property

    @classmethod
    def from_answers(cls, folder: Path) -> Lexicon:
        """Answers from one JSONL file per language code, by record type: translation, inflection,
        text (a plain-text translation of an English text), judgement (a statement the judge holds
        may be true, with the reason) and sentence."""
        lex = cls()
        for path in sorted(folder.glob("*.jsonl")):
            lang = path.stem
            for line in path.read_text(encoding="utf-8").splitlines():
                if not line.strip():
                    continue
                rec = json.loads(line)
                if rec["type"] == "translation":
                    lex.translations[(lang, rec["kind"], rec["english"])] = rec
                elif rec["type"] == "inflection":
                    lex.inflections[(lang, rec["lemma"], rec["features"])] = rec["form"]
                elif rec["type"] == "text":
                    lex.add_text(lang, rec["english"], rec["translation"])
                elif rec["type"] == "judgement":
                    lex.judgements[(lang, rec["statement"])] = rec["reason"]
                else:
                    lex.sentences[(lang, rec["property"], rec["concept"])] = rec
        return lex

    def add_text(self, lang: str, english: str, translation: str) -> None:
        """A translation of an English text into a language given by code (plain-text prompts name the language)."""
        from builder.languages import builtin_languages

        name = next(language.name for language in builtin_languages() if language.code == lang)
        self.texts[(name, english)] = translation

    def translate(self, lang: str, item: dict) -> dict:
        if "comment" in item:  # a re-proposal after a curator's rejection
            return {"id": item["id"], "translation": f"{item['english']} ({lang}, revised)", "alternatives": [],
                    "note": f"revised after: {item['comment']}", "ambiguous": False}
        known = self.translations.get((lang, item["kind"], item["english"]))
        if known:
            return {"id": item["id"], "translation": known["translation"], "alternatives": known.get("alternatives", []),
                    "note": known.get("note", ""), "ambiguous": bool(known.get("ambiguous", False))}
        return {"id": item["id"], "translation": f"{item['english']} ({lang})", "alternatives": [],
                "note": "", "ambiguous": False}

    def reply(self, prompt: str) -> str:
        """A free-text reply to an evaluation prompt, by kind (see the module docstring).

        Without a known answer it behaves like a weak model: the first option, the first word listed,
        the first word of the context; a translation is the source text marked with the language's name
        as the prompt gives it.
        """
        if m := _TRANSLATE.match(prompt.strip()):
            name, text = m.groups()
            return self.texts.get((name, text), f"{text} ({name})")
        options = dict(_OPTION.findall(prompt))
        if set(options) == {"A", "B"}:
            held = [k for k in ("A", "B") if options[k] in self.facts]
            letter = held[0] if len(held) == 1 else "A"
            if prompt.strip().splitlines()[0] in self.misread:
                letter = "B" if letter == "A" else "A"
            return f"{letter}."
        quoted = [m.group(m.lastindex) for m in _QUOTED.finditer(prompt)]
        if prompt.rstrip().endswith(_OPENING_QUOTES) and len(quoted) >= 3:
            prop, word1, word2 = quoted[:3]
            if prop in self.unsure:
                return "I cannot tell."
            known = [w for w in (word1, word2) if w in self.preferred]
            return f"{known[0] if len(known) == 1 else word1}."
        lines = [ln for ln in prompt.strip().splitlines() if ln.strip()]
        if len(lines) >= 3 and _LABELLED.match(lines[-1]) and not _LABELLED.match(lines[-1]).group(1).strip():
            context, question = (_LABELLED.match(ln).group(1).strip() for ln in lines[-3:-1])
            known = self.m2c_answers.get((context, question))
            return known if known is not None else context.split()[0].strip(",.") + "."
        raise UnknownPrompt(f"the stand-in cannot tell what this prompt asks: {prompt[:80]!r}")

    def inflect(self, lang: str, item: dict) -> dict:
        """Forms of a lemma for the bundles asked (M2C template fills)."""
        forms = [{"features": b, "form": self.inflections.get((lang, item["lemma"], b), f"{item['lemma']}-{b.lower()}")}
                 for b in item["bundles"]]
        return {"id": item["id"], "forms": forms}

    def judge(self, lang: str, item: dict) -> dict:
        """A verdict on a negative's statement: it may have the property only where a judgement says so."""
        reason = self.judgements.get((lang, item["statement"]))
        return {"id": item["id"], "may_have_property": reason is not None,
                "reason": reason or f"{item['concept_en']} clearly lacks the property."}

    def sentence(self, lang: str, prop_en: str, prop: str, concept: dict) -> dict:
        known = self.sentences.get((lang, prop_en, concept["english"]))
        if known:
            return {"id": concept["id"], **{k: known[k] for k in ("sentence", "concept_span", "concept_form", "property_span")}}
        word = concept["verified"]
        return {"id": concept["id"], "sentence": f"{word} {prop}.", "concept_span": word, "concept_form": word,
                "property_span": prop}


@dataclass
class Faults:
    rate: float = 0.0
    kinds: tuple[str, ...] = FAULT_KINDS
    seed: int = 0
    retry_after: str = "0.05"
    slow_s: float = 2.0
    frame_rate: float = 0.0  # sentences only: unacceptable sentence with a changed frame


@dataclass
class ServerCounts:
    calls: int = 0
    ok: int = 0
    faults: Counter = field(default_factory=Counter)
    answered: Counter = field(default_factory=Counter)  # (lang, item id) -> valid answers sent
    repeats: int = 0  # requests that asked again for an item already answered
    followups: int = 0  # chat requests that continue a conversation after our reply (re-asks)
    requested: Counter = field(default_factory=Counter)
    prompts: Counter = field(default_factory=Counter)  # a request's messages (their sha256) -> times answered
    in_flight: int = 0  # requests being answered (not held)
    probes: int = 0  # structured requests that ask for no items (a client finding out what it may ask)
    refused: Counter = field(default_factory=Counter)  # response format type -> requests refused for it
    without_max_tokens: int = 0  # chat requests that set no max_tokens
    batch_replies: Counter = field(default_factory=Counter)  # custom_id -> batch lines answered (and so paid)
    peak_in_flight: int = 0  # the most requests answered at once: what a client's concurrency limit must bound
    waiting: int = 0  # requests queued for one of the `slots`
    peak_waiting: int = 0
    models_listed: int = 0  # GET /v1/models answered
    models_asked: Counter = field(default_factory=Counter)  # model named -> chat requests naming it
    dropped: int = 0  # items asked for and left out of a reply (`max_items`)


class StandinServer:
    """Run with `with StandinServer(...) as srv:`; `srv.base_url` is the OpenAI base URL."""

    def __init__(self, lexicon: Lexicon | None = None, *, latency_s: float = 0.0, faults: Faults | None = None,
                 refusals: dict[str, Refusal] | None = None, batch: BatchScript | None = None,
                 model: str = "standin-translator", check_model: bool = False, api_key: str | None = None,
                 models: list[str] | None = None, echo_model: bool = False, slots: int | None = None,
                 max_items: int | None = None) -> None:
        self.lexicon = lexicon or Lexicon()
        self.latency_s = latency_s
        self.faults = faults or Faults()
        self.refusals = refusals or {}  # response format type -> how it is refused
        self.batch = batch or BatchScript()
        self.model = model
        self.check_model = check_model  # answer only `model` (else any name, as llama.cpp does)
        self.models = models  # what /v1/models lists [default: `model`]
        self.echo_model = echo_model  # replies name the model asked for, as llama.cpp's do (else `model`)
        self.max_items = max_items  # a reply answers at most this many of the items asked (a small model's lapse)
        self.slots = slots  # requests answered at once; the rest queue
        self.api_key = api_key  # when set, any other bearer token gets 401
        self.context_tokens: int | None = None  # when set, longer messages get 400 context_length_exceeded
        self.basic_auth: tuple[str, str] | None = None  # when set, (user, password) are wanted as HTTP Basic auth instead
        self.stats = ServerCounts()
        self.hold_after: int | None = None  # after this many good replies, hold further requests
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._seen: Counter = Counter()
        self._line_attempts: Counter = Counter()  # custom_id -> batch lines run for it
        self._files: dict[str, bytes] = {}
        self._batches: dict[str, dict] = {}
        self._batch_states: dict[str, list[str]] = {}  # batch id -> the states its next polls will see
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def slots(self) -> int | None:
        return self._slot_count

    @slots.setter
    def slots(self, n: int | None) -> None:
        self._slot_count = n
        self._slots = threading.Semaphore(n) if n else None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> StandinServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- answering ----------------------------------------------------------------------------------

    @contextmanager
    def _queued(self) -> Iterator[None]:
        """Hold a request until one of the `slots` is free (at once without slots), counting the queue."""
        if self._slots is None:
            yield
            return
        with self._lock:
            self.stats.waiting += 1
            self.stats.peak_waiting = max(self.stats.peak_waiting, self.stats.waiting)
        with self._slots:
            with self._lock:
                self.stats.waiting -= 1
            yield

    def _pick_fault(self, raw: bytes) -> str | None:
        if self.faults.rate <= 0:
            return None
        with self._lock:
            self._seen[raw] += 1
            n = self._seen[raw]
        h = hashlib.sha256(f"{self.faults.seed}|{n}|".encode() + raw).digest()
        if int.from_bytes(h[:8], "big") / 2**64 >= self.faults.rate:
            return None
        return self.faults.kinds[h[8] % len(self.faults.kinds)]

    def answer(self, body: dict, *, faulty: str | None = None, count: bool = True) -> dict:
        """The completion for a request body; `faulty` spoils its content ('malformed', 'schema')."""
        user_msgs = [m["content"] for m in body["messages"] if m["role"] == "user"]
        first, last = user_msgs[0], user_msgs[-1]
        fmt = body.get("response_format") or {}
        if _probe(body):
            return self._completion(body, json.dumps(_instance(fmt.get("schema") or fmt.get("json_schema", {}).get("schema"))))
        if count:
            digest = hashlib.sha256(json.dumps(body["messages"], sort_keys=True).encode()).hexdigest()
            with self._lock:
                self.stats.prompts[digest] += 1
        if not _BLOCK.search(first):
            return self._completion(body, self.lexicon.reply(body["messages"][-1]["content"]))
        block = json.loads(_BLOCK.search(first).group(1))
        lang = _CODE.search(first).group(1)
        asked = set(_IDS.findall(last)) if last is not first else set()
        items = [i for i in block if not asked or i["id"] in asked]
        if self.max_items is not None and len(items) > self.max_items:
            with self._lock:
                self.stats.dropped += len(items) - self.max_items
            items = items[: self.max_items]
        if count:
            with self._lock:
                for it in items:
                    self.stats.requested[(lang, it["id"])] += 1
                    if self.stats.answered[(lang, it["id"])]:
                        self.stats.repeats += 1
        if items and "statement" in items[0]:
            content: object = {"verdicts": [self.lexicon.judge(lang, it) for it in items]}
        elif "english" in first and _PROP.search(first):
            prop_en = _PROP.search(first).group(1)
            prop = _VPROP.search(first).group(1)
            out = [self.lexicon.sentence(lang, prop_en, prop, c) for c in items]
            if "A curator rejected these sentences" in first:  # a rewrite: the same frame, visibly changed
                out = [{**x, "sentence": x["sentence"].rstrip(".") + ", in fact."} for x in out]
            if self.faults.frame_rate and out and out[-1]["id"] != block[0]["id"]:  # the first concept is the acceptable one
                h = hashlib.sha256(f"{self.faults.seed}|frame|".encode() + json.dumps(body, sort_keys=True).encode()).digest()
                if int.from_bytes(h[:8], "big") / 2**64 < self.faults.frame_rate:
                    out[-1] = {**out[-1], "sentence": out[-1]["sentence"].rstrip(".") + " indeed."}
            content = {"sentences": out}
        elif items and "bundles" in items[0]:
            content = {"items": [self.lexicon.inflect(lang, it) for it in items]}
        else:
            content = {"items": [self.lexicon.translate(lang, it) for it in items]}
        if faulty == "malformed":
            text = json.dumps(content, ensure_ascii=False)[:-7]
        elif faulty == "schema":
            key = next(iter(content))
            text = json.dumps({key: [{"id": x["id"], "translation": 42} for x in content[key]]})
        else:
            text = json.dumps(content, ensure_ascii=False)
            if count:
                with self._lock:
                    for it in items:
                        self.stats.answered[(lang, it["id"])] += 1
        if not fmt:  # asked in the prompt only: a chat model wraps its JSON in prose and a fence
            text = f"Here is the JSON you asked for:\n```json\n{text}\n```"
        return self._completion(body, text)

    def _completion(self, body: dict, text: str) -> dict:
        """A chat completion of `text`, cut off at the request's max_tokens (four characters a token)."""
        limit = body.get("max_tokens")
        cut = limit is not None and len(text) // 4 > limit
        text = text[: 4 * limit] if cut else text
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", self.model) if self.echo_model else self.model,
            "choices": [{"index": 0, "finish_reason": "length" if cut else "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": len(json.dumps(body["messages"])) // 4, "completion_tokens": len(text) // 4,
                      "total_tokens": len(json.dumps(body["messages"])) // 4 + len(text) // 4},
        }

    # -- HTTP ---------------------------------------------------------------------------------------

    def _handler(self):
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as two writes; no 40 ms ACK stalls

            def log_message(self, *args) -> None:  # quiet
                pass

            def _json(self, code: int, obj: object, headers: dict | None = None) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            @property
            def route(self) -> str:
                return self.path.split("?", 1)[0]

            def _refused(self) -> bool:
                """Answer 404 off /v1 (as FastAPI servers do) and 401 to a wrong key (or user and password); True when it did."""
                if not self.route.startswith("/v1/"):
                    self._json(404, {"detail": "Not Found"})
                    return True
                wanted = (None if srv.api_key is None else f"Bearer {srv.api_key}") if srv.basic_auth is None else (
                    "Basic " + base64.b64encode(":".join(srv.basic_auth).encode()).decode("ascii"))
                if wanted is not None and self.headers.get("Authorization") != wanted:
                    self._json(401, {"error": {"message": "Incorrect API key provided: sk-***.", "type": "invalid_request_error",
                                               "param": None, "code": "invalid_api_key"}})
                    return True
                return False

            def do_POST(self) -> None:
                raw = self._body()
                if self._refused():
                    return
                if self.route == "/v1/chat/completions":
                    return self._chat(raw)
                if self.route == "/v1/files":
                    return self._upload(raw)
                if self.route == "/v1/batches":
                    return self._create_batch(json.loads(raw))
                self._json(404, {"error": {"message": f"Invalid URL (POST {self.path})", "type": "invalid_request_error"}})

            def do_GET(self) -> None:
                if self._refused():
                    return
                if self.route == "/v1/models":
                    with srv._lock:
                        srv.stats.models_listed += 1
                    served = [srv.model] if srv.models is None else srv.models
                    return self._json(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "standin"}
                                                                       for m in served]})
                m = re.search(r"^/v1/batches/([^/]+)$", self.route)
                if m:
                    return self._get_batch(m.group(1))
                m = re.search(r"^/v1/files/([^/]+)/content$", self.route)
                if m and m.group(1) in srv._files:
                    data = srv._files[m.group(1)]
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self._json(404, {"error": {"message": f"Invalid URL (GET {self.path})", "type": "invalid_request_error"}})

            def _chat(self, raw: bytes) -> None:
                body = json.loads(raw)
                fmt = (body.get("response_format") or {}).get("type")
                with srv._lock:
                    srv.stats.calls += 1
                    srv.stats.models_asked[body.get("model")] += 1
                    srv.stats.followups += any(m["role"] == "assistant" for m in body["messages"])
                    srv.stats.without_max_tokens += "max_tokens" not in body
                    srv.stats.probes += _probe(body)
                    if fmt in srv.refusals:
                        srv.stats.refused[fmt] += 1
                if srv.check_model and body.get("model") not in ([srv.model] if srv.models is None else srv.models):
                    return self._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist or you do "
                                                                 "not have access to it.", "type": "invalid_request_error",
                                                      "param": None, "code": "model_not_found"}})
                if fmt in srv.refusals:
                    return self._json(srv.refusals[fmt].status, srv.refusals[fmt].body)
                prompt = len(json.dumps(body["messages"])) // 4
                if srv.context_tokens is not None and prompt > srv.context_tokens:
                    asked = prompt + body.get("max_tokens", 0)
                    return self._json(400, {"error": {
                        "message": f"This model's maximum context length is {srv.context_tokens} tokens. However, you "
                                   f"requested {asked} tokens ({prompt} in the messages, {asked - prompt} in the completion). "
                                   "Please reduce the length of the messages or completion.",
                        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
                with srv._lock:  # decide and count in one step, so "nothing in flight" is exact
                    held = srv.hold_after is not None and srv.stats.ok >= srv.hold_after
                    if not held:
                        srv.stats.in_flight += 1
                        srv.stats.peak_in_flight = max(srv.stats.peak_in_flight, srv.stats.in_flight)
                if held:
                    srv.release.wait(timeout=60)
                    self.close_connection = True
                    return
                try:
                    with srv._queued():
                        self._answer_chat(raw, body)
                finally:
                    with srv._lock:
                        srv.stats.in_flight -= 1

            def _answer_chat(self, raw: bytes, body: dict) -> None:
                fault = srv._pick_fault(raw)
                if fault:
                    with srv._lock:
                        srv.stats.faults[fault] += 1
                if fault == "drop":
                    self.close_connection = True
                    self.connection.close()
                    return
                if fault == "429":
                    return self._json(429, {"error": {"message": "rate limited", "type": "rate_limit"}},
                                      {"Retry-After": srv.faults.retry_after})
                if fault == "500":
                    return self._json(500, {"error": {"message": "internal error", "type": "server_error"}})
                time.sleep(srv.faults.slow_s if fault == "slow" else srv.latency_s)
                try:
                    reply = srv.answer(body, faulty=fault if fault in ("malformed", "schema") else None)
                except UnknownPrompt as exc:
                    return self._json(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
                if fault is None:
                    with srv._lock:
                        srv.stats.ok += 1
                try:
                    self._json(200, reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _upload(self, raw: bytes) -> None:
                msg = email.parser.BytesParser().parsebytes(
                    b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n" + raw
                )
                data = b""
                purpose = "batch"
                for part in msg.get_payload():
                    name = part.get_param("name", header="content-disposition")
                    if name == "file":
                        data = part.get_payload(decode=True)
                    elif name == "purpose":
                        purpose = part.get_payload(decode=True).decode()
                self._json(200, srv._file(data, purpose))

            def _create_batch(self, req: dict) -> None:
                bid = "batch_" + uuid.uuid4().hex[:20]
                lines = [line for line in srv._files[req["input_file_id"]].decode().splitlines() if line.strip()]
                srv._batches[bid] = {
                    "id": bid, "object": "batch", "endpoint": req["endpoint"], "errors": None,
                    "input_file_id": req["input_file_id"], "completion_window": req["completion_window"],
                    "status": "validating", "output_file_id": None, "error_file_id": None, "created_at": int(time.time()),
                    "request_counts": {"total": len(lines), "completed": 0, "failed": 0}, "metadata": None,
                }
                srv._batch_states[bid] = srv.batch.states()
                self._json(200, srv._batches[bid])

            def _get_batch(self, bid: str) -> None:
                batch = srv._batches.get(bid)
                if batch is None:
                    return self._json(404, {"error": {"message": f"No batch found with id '{bid}'.", "type": "invalid_request_error"}})
                states = srv._batch_states[bid]
                if states:
                    batch["status"] = states.pop(0)
                    if batch["status"] != "validating":
                        batch[f"{batch['status']}_at"] = int(time.time())
                    if not states:
                        srv._finish_batch(batch)
                self._json(200, batch)

        return Handler

    def _file(self, data: bytes, purpose: str) -> dict:
        fid = "file-" + uuid.uuid4().hex[:20]
        self._files[fid] = data
        return {"id": fid, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                "filename": "requests.jsonl", "purpose": purpose, "status": "processed"}

    def _finish_batch(self, batch: dict) -> None:
        """Run a batch's lines as its end says, and write its output and error files as the Batch API does."""
        script = self.batch
        if batch["status"] == "failed":
            code, message = script.failure
            batch["errors"] = {"object": "list", "data": [{"code": code, "message": message, "param": None, "line": None}]}
            return
        lines = [json.loads(line) for line in self._files[batch["input_file_id"]].decode().splitlines() if line.strip()]
        done = len(lines) if batch["status"] == "completed" else int(script.done_share * len(lines))
        out, errors = [], []
        for n, req in enumerate(lines):
            line = {"id": "batch_req_" + uuid.uuid4().hex[:20], "custom_id": req["custom_id"], "response": None, "error": None}
            if n >= done:
                code, message = _LINE_ENDS[batch["status"]]
                errors.append({**line, "error": {"code": code, "message": message}})
                continue
            with self._lock:
                self.stats.calls += 1
                self._line_attempts[req["custom_id"]] += 1
                attempt = self._line_attempts[req["custom_id"]]
            h = hashlib.sha256(f"{script.seed}|{attempt}|{req['custom_id']}".encode()).digest()
            if int.from_bytes(h[:8], "big") / 2**64 < script.line_error_rate:
                status, kind, message = script.line_error
                errors.append({**line, "response": {"status_code": status, "request_id": "req_" + uuid.uuid4().hex[:12],
                                                    "body": {"error": {"message": message, "type": kind, "param": None,
                                                                       "code": None}}}})
                continue
            with self._lock:
                self.stats.batch_replies[req["custom_id"]] += 1
            out.append({**line, "response": {"status_code": 200, "request_id": "req_" + uuid.uuid4().hex[:12],
                                             "body": self.answer(req["body"])}})
        for name, rows in (("output_file_id", out), ("error_file_id", errors)):
            if rows:
                batch[name] = self._file(("\n".join(json.dumps(r) for r in rows) + "\n").encode(), "batch_output")["id"]
        batch["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(errors)}


def _probe(body: dict) -> bool:
    """A structured request that asks for no items: a client finding out which response formats it may use."""
    fmt = (body.get("response_format") or {}).get("type")
    first = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return fmt in ("json_schema", "json_object") and not _BLOCK.search(first)


def _instance(schema: dict | None) -> object:
    """The simplest value a JSON schema accepts (what the stand-in replies to a request asking for no items)."""
    schema = schema or {}
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        return {name: _instance(sub) for name, sub in schema.get("properties", {}).items()}
    return {"array": [], "string": "", "integer": 0, "number": 0, "boolean": True, "null": None}.get(kind, {})


def main(argv: list[str] | None = None) -> None:
    """Serve from the command line (for benchmarks that keep the server out of the client's process)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per reply")
    parser.add_argument("--answers", type=Path, help="folder of <lang>.jsonl answer files")
    parser.add_argument("--slots", type=int, help="answer this many requests at a time and queue the rest (llama.cpp: 1)")
    parser.add_argument("--max-items", type=int, help="answer at most this many of the items a request asks for")
    parser.add_argument("--model", action="append", help="a model /v1/models lists (repeatable); replies echo the name asked")
    args = parser.parse_args(argv)
    lexicon = Lexicon.from_answers(args.answers) if args.answers else Lexicon()
    local = {"models": args.model, "echo_model": True} if args.model else {}
    with StandinServer(lexicon, latency_s=args.latency, slots=args.slots, max_items=args.max_items, **local) as server:
        print(server.base_url, flush=True)
        signal.sigwait({signal.SIGTERM, signal.SIGINT})


if __name__ == "__main__":
    main()
