"""A stand-in for vLLM's OpenAI-compatible completions API, answered by a local transformers model.

vLLM cannot run here; this serves what `evaluate.endpoint_scoring` reads from it, in vLLM's shape
(vllm/entrypoints/openai/serving_completion.py): with `echo`, the prompt's tokens (tokenized with
the tokenizer's own special tokens, special-token text parsed) then the generated ones; for each
its decoded text, a text offset that counts the decoded texts before it (the BOS token's included),
its log-probability given the tokens before it (null for the first), and the top `logprobs`
alternatives plus itself. Decoding is greedy. An unknown model is a 404 with vLLM's error body.

It answers chat completions too, so that one server both scores and replies (a vLLM deployment does
both): a user turn's reply is the one the local model generates for it alone
(`evaluate.backends.TransformersGenerator`: greedy, or sampled with the request's temperature and
seed). `srv.replies` keeps each prompt's reply.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from evaluate.backends import TransformersGenerator
from evaluate.models import LoadedModel


class CompletionsStandin:
    """`with CompletionsStandin(loaded, "name") as srv:`; `srv.base_url` is the OpenAI base URL; `srv.requests` counts."""

    def __init__(self, loaded: LoadedModel, model: str) -> None:
        self.loaded, self.model, self.requests = loaded, model, 0
        self.replies: dict[str, str] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> CompletionsStandin:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def complete(self, body: dict) -> tuple[int, dict]:
        if body.get("model") != self.model:
            return 404, {"object": "error", "message": f"The model `{body.get('model')}` does not exist.",
                         "type": "NotFoundError", "param": None, "code": 404}
        tok, model = self.loaded.tokenizer, self.loaded.model
        ids = tok(body["prompt"])["input_ids"]
        n_new, k = int(body.get("max_tokens") or 16), body.get("logprobs")
        with self._lock, torch.inference_mode():
            self.requests += 1
            seq = list(ids)
            for _ in range(n_new):
                logits = model(input_ids=torch.tensor([seq])).logits[0].float()
                seq.append(int(logits[-1].argmax()))
            lp = logits.log_softmax(-1)
        generated = tok.decode(seq[len(ids):], skip_special_tokens=True)
        choice = {"index": 0, "text": (body["prompt"] if body.get("echo") else "") + generated, "logprobs": None,
                  "finish_reason": "length", "stop_reason": None, "prompt_logprobs": None}
        if k is not None:
            shown = list(range(len(seq))) if body.get("echo") else list(range(len(ids), len(seq)))
            choice["logprobs"] = self._logprobs(seq, shown, lp, int(k))
        return 200, {"id": "cmpl-standin", "object": "text_completion", "created": 0, "model": self.model,
                     "choices": [choice], "usage": {"prompt_tokens": len(ids), "completion_tokens": n_new,
                                                    "total_tokens": len(ids) + n_new}}

    def chat(self, body: dict) -> tuple[int, dict]:
        if body.get("model") != self.model:
            return 404, {"object": "error", "message": f"The model `{body.get('model')}` does not exist.",
                         "type": "NotFoundError", "param": None, "code": 404}
        prompt = body["messages"][-1]["content"]
        with self._lock:
            self.requests += 1
            [reply] = TransformersGenerator(self.loaded).generate(
                [prompt], max_new_tokens=int(body.get("max_tokens") or 16), stage="standin",
                temperature=body.get("temperature") or None, seed=body.get("seed"))
            self.replies[prompt] = reply
        return 200, {"id": "chatcmpl-standin", "object": "chat.completion", "created": 0, "model": self.model,
                     "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}],
                     "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}

    def _logprobs(self, seq: list[int], shown: list[int], lp: torch.Tensor, k: int) -> dict:
        tok = self.loaded.tokenizer
        texts = _incremental_texts(tok, seq)
        out = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
        offset = 0
        for i in shown:
            token = texts[i] if i else tok.decode([seq[0]])
            out["tokens"].append(token)
            out["text_offset"].append(offset)
            offset += len(token)
            if i == 0:
                out["token_logprobs"].append(None)
                out["top_logprobs"].append(None)
                continue
            row = lp[i - 1]
            out["token_logprobs"].append(float(row[seq[i]]))
            best = row.topk(k).indices.tolist() if k else []
            out["top_logprobs"].append({tok.decode([t]): float(row[t]) for t in [*best, seq[i]]})
        return out

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": standin.model, "object": "model"}]})
                else:
                    self._send(404, {"object": "error", "message": "Not Found", "type": "NotFoundError", "code": 404})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                route = self.path.rstrip("/")
                if route == "/v1/chat/completions":
                    self._send(*standin.chat(body))
                elif route == "/v1/completions":
                    self._send(*standin.complete(body))
                else:
                    self._send(404, {"object": "error", "message": "Not Found", "type": "NotFoundError", "code": 404})

        return Handler


def _incremental_texts(tok, seq: list[int]) -> list[str]:
    """Each token's share of the decoded text, as vLLM's incremental detokenizer gives it: a token that ends inside
    a character adds nothing until the token that completes it."""
    out, done = [], ""
    for i in range(len(seq)):
        text = tok.decode(seq[: i + 1], skip_special_tokens=True)
        if text.endswith("\ufffd"):
            out.append("")
            continue
        out.append(text[len(done):])
        done = text
    return out
