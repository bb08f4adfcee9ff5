"""An OpenAI-compatible stand-in server for tests, benchmarks and re-recording the demo.

It answers chat completions (json_schema or JSON mode), files and batches on 127.0.0.1,
deterministically from a lexicon, and injects faults on demand: 429 with Retry-After, 500, replies
slower than the client's time-out, malformed JSON, JSON that breaks the schema, dropped connections,
and sentence pairs whose frames differ. It counts what it served, so tests can check that a resumed
run never asks again for an item already answered, and how many re-asks it received.

Plain-text requests (no response format: evaluation prompts) are answered by `Lexicon.reply`, by
kind: a translation request, a choice between sentence A and B, a metalinguistic question naming
two concepts, or an M2C question (context and question lines, then an empty answer line).
"""

from __future__ import annotations

import email.parser
import hashlib
import json
import re
import threading
import time
import uuid
from collections import Counter
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
_QUOTED = re.compile(r'"([^"]*)"')
_LABELLED = re.compile(r"^[^:：\n]+[:：]\s?(.*)$")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default backlog of 5 drops bursts of concurrent connections


class UnknownPrompt(ValueError):
    """A plain-text prompt of no kind the stand-in answers (sent back as HTTP 400)."""


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

    @classmethod
    def from_answers(cls, folder: Path) -> "Lexicon":
        """Answers from one JSONL file per language code, by record type: translation, inflection,
        text (a plain-text translation of an English text) and sentence."""
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
        quoted = _QUOTED.findall(prompt)
        if prompt.rstrip().endswith('"') and len(quoted) >= 3:
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
class Stats:
    calls: int = 0
    ok: int = 0
    faults: Counter = field(default_factory=Counter)
    answered: Counter = field(default_factory=Counter)  # (lang, item id) -> valid answers sent
    repeats: int = 0  # requests that asked again for an item already answered
    followups: int = 0  # chat requests that continue a conversation after our reply (re-asks)
    requested: Counter = field(default_factory=Counter)
    in_flight: int = 0  # requests being answered (not held)


class StandinServer:
    """Run with `with StandinServer(...) as srv:`; `srv.base_url` is the OpenAI base URL."""

    def __init__(self, lexicon: Lexicon | None = None, *, latency_s: float = 0.0, faults: Faults | None = None,
                 json_schema_supported: bool = True, batch_polls: int = 1, model: str = "standin-translator") -> None:
        self.lexicon = lexicon or Lexicon()
        self.latency_s = latency_s
        self.faults = faults or Faults()
        self.json_schema_supported = json_schema_supported
        self.batch_polls = batch_polls
        self.model = model
        self.stats = Stats()
        self.hold_after: int | None = None  # after this many good replies, hold further requests
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._seen: Counter = Counter()
        self._files: dict[str, bytes] = {}
        self._batches: dict[str, dict] = {}
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> "StandinServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- answering ----------------------------------------------------------------------------------

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
        if "response_format" not in body:
            return self._completion(body, self.lexicon.reply(body["messages"][-1]["content"]))
        user_msgs = [m["content"] for m in body["messages"] if m["role"] == "user"]
        first, last = user_msgs[0], user_msgs[-1]
        block = json.loads(_BLOCK.search(first).group(1))
        lang = _CODE.search(first).group(1)
        asked = set(_IDS.findall(last)) if last is not first else set()
        items = [i for i in block if not asked or i["id"] in asked]
        if count:
            with self._lock:
                for it in items:
                    self.stats.requested[(lang, it["id"])] += 1
                    if self.stats.answered[(lang, it["id"])]:
                        self.stats.repeats += 1
        if "english" in first and _PROP.search(first):
            prop_en = _PROP.search(first).group(1)
            prop = _VPROP.search(first).group(1)
            out = [self.lexicon.sentence(lang, prop_en, prop, c) for c in items]
            if "A curator rejected these sentences" in first:  # a rewrite: the same frame, visibly changed
                out = [{**x, "sentence": x["sentence"].rstrip(".") + ", in fact."} for x in out]
            if self.faults.frame_rate and out and out[-1]["id"] != block[0]["id"]:  # the first concept is the acceptable one
                h = hashlib.sha256(f"{self.faults.seed}|frame|".encode() + json.dumps(body, sort_keys=True).encode()).digest()
                if int.from_bytes(h[:8], "big") / 2**64 < self.faults.frame_rate:
                    out[-1] = {**out[-1], "sentence": out[-1]["sentence"].rstrip(".") + " indeed."}
            content: object = {"sentences": out}
        elif items and "bundles" in items[0]:
            content = {"items": [self.lexicon.inflect(lang, it) for it in items]}
        else:
            content = {"items": [self.lexicon.translate(lang, it) for it in items]}
        if faulty == "malformed":
            text = json.dumps(content, ensure_ascii=False)[:-7]
        elif faulty == "schema":
            key = "items" if "items" in content else "sentences"
            text = json.dumps({key: [{"id": x["id"], "translation": 42} for x in content[key]]})
        else:
            text = json.dumps(content, ensure_ascii=False)
            if count:
                with self._lock:
                    for it in items:
                        self.stats.answered[(lang, it["id"])] += 1
        return self._completion(body, text)

    def _completion(self, body: dict, text: str) -> dict:
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion", "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
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

            def do_POST(self) -> None:
                raw = self._body()
                if self.path.endswith("/chat/completions"):
                    return self._chat(raw)
                if self.path.endswith("/files"):
                    return self._upload(raw)
                if self.path.endswith("/batches"):
                    return self._create_batch(json.loads(raw))
                self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_GET(self) -> None:
                m = re.search(r"/batches/([^/]+)$", self.path)
                if m:
                    return self._get_batch(m.group(1))
                m = re.search(r"/files/([^/]+)/content$", self.path)
                if m and m.group(1) in srv._files:
                    data = srv._files[m.group(1)]
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self._json(404, {"error": {"message": f"no route {self.path}"}})

            def _chat(self, raw: bytes) -> None:
                body = json.loads(raw)
                with srv._lock:
                    srv.stats.calls += 1
                    srv.stats.followups += any(m["role"] == "assistant" for m in body["messages"])
                fmt = (body.get("response_format") or {}).get("type")
                if fmt == "json_schema" and not srv.json_schema_supported:
                    return self._json(400, {"error": {"message": "response_format json_schema is not supported by this server",
                                                      "type": "invalid_request_error"}})
                with srv._lock:  # decide and count in one step, so "nothing in flight" is exact
                    held = srv.hold_after is not None and srv.stats.ok >= srv.hold_after
                    if not held:
                        srv.stats.in_flight += 1
                if held:
                    srv.release.wait(timeout=60)
                    self.close_connection = True
                    return
                try:
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
                fid = "file-" + uuid.uuid4().hex[:20]
                srv._files[fid] = data
                self._json(200, {"id": fid, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                                 "filename": "requests.jsonl", "purpose": purpose, "status": "processed"})

            def _create_batch(self, req: dict) -> None:
                bid = "batch_" + uuid.uuid4().hex[:20]
                srv._batches[bid] = {
                    "id": bid, "object": "batch", "endpoint": req["endpoint"], "input_file_id": req["input_file_id"],
                    "completion_window": req["completion_window"], "status": "in_progress",
                    "created_at": int(time.time()), "polls": 0,
                }
                self._json(200, {k: v for k, v in srv._batches[bid].items() if k != "polls"})

            def _get_batch(self, bid: str) -> None:
                batch = srv._batches.get(bid)
                if batch is None:
                    return self._json(404, {"error": {"message": "no such batch"}})
                batch["polls"] += 1
                if batch["status"] == "in_progress" and batch["polls"] >= srv.batch_polls:
                    lines = []
                    for line in srv._files[batch["input_file_id"]].decode().splitlines():
                        if line.strip():
                            req = json.loads(line)
                            with srv._lock:
                                srv.stats.calls += 1
                            lines.append(json.dumps({"id": "req_" + uuid.uuid4().hex[:12], "custom_id": req["custom_id"],
                                                     "response": {"status_code": 200, "body": srv.answer(req["body"])}}))
                    out = "file-" + uuid.uuid4().hex[:20]
                    srv._files[out] = ("\n".join(lines) + "\n").encode()
                    batch.update(status="completed", output_file_id=out, completed_at=int(time.time()))
                self._json(200, {k: v for k, v in batch.items() if k != "polls"})

        return Handler


def main(argv: list[str] | None = None) -> None:
    """Serve from the command line (for benchmarks that keep the server out of the client's process)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per reply")
    parser.add_argument("--answers", type=Path, help="folder of <lang>.jsonl answer files")
    args = parser.parse_args(argv)
    lexicon = Lexicon.from_answers(args.answers) if args.answers else Lexicon()
    with StandinServer(lexicon, latency_s=args.latency) as server:
        print(server.base_url, flush=True)
        signal.sigwait({signal.SIGTERM, signal.SIGINT})


if __name__ == "__main__":
    main()
