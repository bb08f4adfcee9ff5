"""Scores through an OpenAI-compatible completions endpoint that echoes the prompt's log-probabilities.

A release gate can score a model too large for this machine on a vLLM deployment: `/v1/completions`
with `echo: true, logprobs: 1, max_tokens: 1` returns, for each prompt token, its text, its character
offset and its log-probability given the tokens before it (none for the first: nothing predicts it).
The server tokenizes the whole text (context and continuation together, as the local scorer does)
and the tokens are split where the continuation starts, by their offsets, so `direct` and `meta`
read these scores exactly as they read a local model's.

- BOS: the server's tokenizer adds its own, or not; `bos`, when given, is written before every
  prompt as text (a special token the server parses, e.g. `<|im_start|>`).
- Offsets: servers count them from different origins (vLLM includes the BOS token's text,
  llama-cpp-python leaves out a BOS it strips), so each reply's origin is found from where its
  prompt ends.
- The capability is probed once, before any scoring request: the server must answer completions
  with echoed log-probabilities and offsets, and they must be aligned: a token the server gives as a
  likely continuation must be echoed, appended to the prompt, with the log-probability it was
  generated with. llama-cpp-python
  (0.3) pairs each echoed token with the next position's distribution unless the prompt starts with
  the model's BOS token; the error says so, and names what else is missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import openai

from builder.errors import BuilderError
from builder.llm.config import LLMSettings
from builder.llm.endpoint import Credentials, credentials, key_refused
from evaluate.scoring import ProgressFn, ScoringSetup, TokenScores

# Texts whose continuation a model is sure of, tried in turn until one's likely next tokens include one that is text
# (a model may put its mass on byte tokens, which cannot be appended as text and echoed back as one token).
PROBES = ("Monday, Tuesday, Wednesday, Thursday, Friday, Saturday,", "one, two, three, four, five, six,",
          "The cat sat on the", "A")
ALIGNMENT_TOLERANCE = 0.05  # nats between a token's generated and echoed log-probability (kernels differ)


class EndpointScoringError(BuilderError):
    """The endpoint cannot score prompts: what is missing and how to fix it."""


@dataclass(frozen=True)
class Echoed:
    """A prompt's tokens as the server echoed them: [start, end) in the prompt (2 x n) and log-probabilities
    (NaN where the server gives none)."""

    offsets: np.ndarray
    logprobs: np.ndarray


def echoed(prompt: str, choice, completion_tokens: int) -> Echoed:
    """The prompt's tokens from one echoed choice: generated tokens dropped, offsets moved to the prompt's origin.
    A token that ends inside a character (one byte of it) has no width in the server's offsets; it is given the
    span up to the next token that starts further on."""
    lp = choice.logprobs
    if lp is None or not lp.token_logprobs or lp.text_offset is None or len(lp.text_offset) != len(lp.token_logprobs):
        raise EndpointScoringError("the reply carries no echoed prompt log-probabilities with text offsets")
    n = len(lp.token_logprobs) - completion_tokens
    end = lp.text_offset[n] if n < len(lp.text_offset) else lp.text_offset[n - 1] + len(lp.tokens[n - 1])
    starts = np.asarray(lp.text_offset[:n], dtype=np.int64) - (end - len(prompt))
    later = np.unique(np.append(starts, len(prompt)))
    ends = later[np.minimum(np.searchsorted(later, starts, side="right"), len(later) - 1)]
    values = np.array([np.nan if v is None else v for v in lp.token_logprobs[:n]], dtype=np.float64)
    return Echoed(np.stack([starts, ends]), values)


class EndpointScorer:
    """`Scorer.score` through an endpoint: each unique (context, continuation) is one request, `concurrency` at once."""

    def __init__(self, settings: LLMSettings, bos: str | None = None) -> None:
        self.settings = settings
        self.bos = bos or ""
        self.sent = 0

    @cached_property
    def credentials(self) -> Credentials:
        return credentials(self.settings.base_url, self.settings.api_key.get_secret_value() if self.settings.api_key else None)

    def _client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(**self.credentials.sdk_options(), timeout=self.settings.timeout_s,
                                  max_retries=self.settings.max_retries)

    async def _complete(self, client: openai.AsyncOpenAI, prompt: str, *, echo: bool, logprobs: int = 1):
        self.sent += 1
        return await client.completions.create(model=self.settings.model, prompt=prompt, max_tokens=1, temperature=0,
                                               echo=echo, logprobs=logprobs)

    def _where(self) -> str:
        return f"{self.settings.endpoint} (model {self.settings.model})"

    @cached_property
    def setup(self) -> ScoringSetup:
        """Probed once: prompt log-probabilities present, with offsets, and aligned with their tokens."""
        try:
            return asyncio.run(self._probe())
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise EndpointScoringError(key_refused(self.settings.endpoint, exc.status_code, self.credentials)) from exc
        except openai.APIStatusError as exc:
            raise EndpointScoringError(
                f"{self._where()}: /v1/completions answered {exc.status_code} ({_message(exc)}); scoring needs the "
                "completions API with echo and logprobs (vLLM's OpenAI server, llama.cpp's server); a chat-only API "
                "cannot score, so run meta and selftranslate generatively (without --score-endpoint)") from exc
        except openai.APIConnectionError as exc:
            raise EndpointScoringError(f"{self._where()}: not reachable ({exc})") from exc

    async def _probe(self) -> ScoringSetup:
        """A likely next token after the probe and its log-probability as generated (which every server computes
        right), then the probe with that token appended, echoed: the token's echoed log-probability must be the same."""
        client = self._client()
        try:
            seen_any = False
            for probe in PROBES:
                first = await self._complete(client, self.bos + probe, echo=False, logprobs=5)
                options = (first.choices[0].logprobs.top_logprobs or [None])[0] if first.choices[0].logprobs else None
                seen_any = seen_any or bool(options)
                clean = sorted(((v, t) for t, v in (options or {}).items() if t.strip() and "\ufffd" not in t), reverse=True)
                if clean:
                    break
            else:
                raise EndpointScoringError(
                    f"{self._where()}: " + ("no text token among the likely next tokens of any probe (logprobs=5)" if seen_any
                                            else "its completions carry no top log-probabilities (logprobs=5)")
                    + "; scoring needs log-probabilities of text tokens")
            expected, token = clean[0]
            prompt = self.bos + probe + token
            reply = await self._complete(client, prompt, echo=True)
        finally:
            await client.close()
        choice = reply.choices[0]
        try:
            tokens = echoed(prompt, choice, reply.usage.completion_tokens if reply.usage else 1)
        except EndpointScoringError as exc:
            raise EndpointScoringError(f"{self._where()}: {exc} (completions with echo=true and logprobs=1); "
                                       "scoring needs prompt log-probabilities") from exc
        shown = choice.logprobs.tokens
        at = [i for i, t in enumerate(shown[: len(tokens.logprobs)]) if t == token] or [i for i, t in enumerate(shown) if t == token]
        if not at or choice.logprobs.token_logprobs[at[-1]] is None:
            raise EndpointScoringError(f"{self._where()}: cannot check the alignment of its prompt log-probabilities: "
                                       f"{token!r} after {probe!r} is not echoed as one token")
        got = choice.logprobs.token_logprobs[at[-1]]
        if abs(got - expected) > ALIGNMENT_TOLERANCE:
            raise EndpointScoringError(
                f"{self._where()}: its prompt log-probabilities are misaligned: {token!r} after {probe!r} has "
                f"log-probability {expected:.3f} when generated but is echoed at {got:.3f}, so each echoed token "
                "carries another position's distribution. llama-cpp-python does this when the prompt does not start "
                "with the model's BOS token: give that token as the endpoint's BOS (e.g. '<|im_start|>' for SmolLM2), "
                "or use a server that scores prompts correctly (vLLM)")
        first_text = int(np.searchsorted(tokens.offsets[1], len(self.bos), side="right"))
        scored_first = bool(first_text < len(tokens.logprobs) and not np.isnan(tokens.logprobs[first_text]))
        return ScoringSetup(bos_policy="token" if self.bos else "server", bos_token=self.bos or None,
                            bos_reason="" if self.bos else "the server's tokenizer adds its own BOS token, or none",
                            first_token_scored=scored_first,
                            continuation="tokenized by the server with its context, split at the character where it "
                                         "starts (echoed text offsets)",
                            padding="none (one prompt per request)", precision="the server's")

    def score(self, requests: Sequence[tuple[str, str]], progress: ProgressFn | None = None) -> dict[tuple[str, str], TokenScores]:
        """Score each unique (context, continuation) once, as `Scorer.score` does."""
        unique = list(dict.fromkeys(requests))
        if not unique:
            return {}
        self.setup  # noqa: B018 - probe before the first scoring request
        return asyncio.run(self._score_all(unique, progress))

    async def _score_all(self, unique: list[tuple[str, str]], progress: ProgressFn | None) -> dict:
        client, gate, out = self._client(), asyncio.Semaphore(self.settings.concurrency), {}

        async def one(context: str, continuation: str) -> None:
            prompt = self.bos + context + continuation
            async with gate:
                reply = await self._complete(client, prompt, echo=True)
            tokens = echoed(prompt, reply.choices[0], reply.usage.completion_tokens if reply.usage else 1)
            boundary = len(self.bos + context)
            keep = (tokens.offsets[1] > boundary) & ~np.isnan(tokens.logprobs)
            out[(context, continuation)] = TokenScores(tokens.logprobs[keep].astype(np.float32),
                                                       np.clip(tokens.offsets[0, keep] - boundary, 0, None),
                                                       tokens.offsets[1, keep] - boundary)
            if progress:
                progress(len(out), len(unique))

        try:
            await asyncio.gather(*(one(c, t) for c, t in unique))
        finally:
            await client.close()
        return out


def _message(exc: openai.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    detail = body.get("error", body)
    return str(detail.get("message") if isinstance(detail, dict) and detail.get("message") else exc.message)
