"""Text generation for the generative methods: a local transformers model or an OpenAI-compatible endpoint.

Both take plain prompts and return the model's continuation as text, decoded greedily unless a
sampled run is asked for (a temperature and a seed). The endpoint goes through the construction pipeline's `LLMClient`, with an
LLM cache of its own in the results folder (OUT/llm-cache.sqlite, no workspace): a re-run, or one
resumed after a crash, sends nothing it already has. A vLLM server started with `--tensor-parallel-size N` is such an endpoint,
which is how an evaluation outgrows one GPU (docs/evaluation.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import torch

from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient, Request, prompt_hash
from builder.llm.config import LLMSettings
from evaluate.models import LoadedModel, ModelInfo
from evaluate.scoring import length_batches

ProgressFn = Callable[[int, int], None]
CACHE_FILE = "llm-cache.sqlite"  # an endpoint's replies, in the results folder


class Generator(Protocol):
    def generate(self, prompts: Sequence[str], *, max_new_tokens: int, stage: str, lang: str | None = None,
                 temperature: float | None = None, seed: int | None = None,
                 progress: ProgressFn | None = None) -> list[str]: ...


def chat_text(tokenizer, prompt: str) -> str | None:
    """The prompt as one user turn in the tokenizer's chat template, up to where the model's reply begins; None for a
    tokenizer without one. Rendered as text and tokenized apart (without special tokens: the template writes its
    own), as `apply_chat_template(tokenize=True)` does on transformers 4.x; on 5.x that returns a mapping."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)


class TransformersGenerator:
    """Decoding with `model.generate`, prompts batched by length and padded on the left.

    A tokenizer with a chat template gets each prompt as one user turn (`chat_text`); a base model gets the prompt
    after its BOS token, as the scorer reads texts. Greedy unless a temperature is given: then sampled from the
    whole distribution, seeded, so a run with the same prompts, batch size and seed gives the same replies.
    """

    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded = loaded
        tok = loaded.tokenizer
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    @property
    def prompt_format(self) -> str:
        """What the model is given for a prompt, with "{prompt}" in its place (recorded with the results)."""
        tok = self.loaded.tokenizer
        return chat_text(tok, "{prompt}") or f"{tok.bos_token or ''}{{prompt}}"

    def reply_context(self, prompt: str, *, without: str | None = None) -> str:
        """The text after which the model's reply is read, for scoring a reply: the chat template's rendering (less a
        leading `without`, the begin token a scorer prepends itself, where the template writes it too), or for a
        base model the prompt and a new line."""
        text = chat_text(self.loaded.tokenizer, prompt)
        if text is None:
            return prompt + "\n"
        return text[len(without):] if without and text.startswith(without) else text

    def encode(self, prompt: str) -> list[int]:
        tok = self.loaded.tokenizer
        text = chat_text(tok, prompt)
        if text is not None:
            return tok(text, add_special_tokens=False)["input_ids"]
        bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
        return bos + tok(prompt, add_special_tokens=False)["input_ids"]

    def generate(self, prompts, *, max_new_tokens, stage, lang=None, temperature=None, seed=None, progress=None):
        unique = list(dict.fromkeys(prompts))
        encoded = [self.encode(p) for p in unique]
        out: list[str] = [""] * len(unique)
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature else {"do_sample": False}
        done = 0
        with torch.random.fork_rng(devices=[self.loaded.device] if self.loaded.device.type == "cuda" else []):
            torch.manual_seed(seed or 0)
            for batch in length_batches([len(e) for e in encoded], self.loaded.info.batch_size):
                width = max(len(encoded[i]) for i in batch)
                ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for row, i in enumerate(batch):
                    ids[row, width - len(encoded[i]):] = torch.as_tensor(encoded[i])
                    mask[row, width - len(encoded[i]):] = 1
                with torch.inference_mode():
                    gen = self.loaded.model.generate(input_ids=ids.to(self.loaded.device), attention_mask=mask.to(self.loaded.device),
                                                     max_new_tokens=max_new_tokens, pad_token_id=self.pad_id, **sampling)
                for row, i in enumerate(batch):
                    out[i] = self.loaded.tokenizer.decode(gen[row, width:], skip_special_tokens=True)
                done += len(batch)
                if progress:
                    progress(done, len(unique))
        texts = dict(zip(unique, out))
        return [texts[p] for p in prompts]


class EndpointGenerator:
    """Chat completions from an OpenAI-compatible endpoint, one user turn per prompt, cached in the file `cache_path`."""

    def __init__(self, settings: LLMSettings, cache_path: Path) -> None:
        self.settings = settings
        self.cache_path = Path(cache_path)
        self.sent = 0
        self.cache_hits = 0

    def generate(self, prompts, *, max_new_tokens, stage, lang=None, temperature=None, seed=None, progress=None):
        unique = list(dict.fromkeys(prompts))  # a prompt asked twice at once would be sent twice
        cache = LLMCache.open(self.cache_path)
        phash = prompt_hash(stage)

        async def go() -> list[str]:
            client = LLMClient(cache, self.settings)
            done = 0

            async def one(prompt: str) -> str:
                nonlocal done
                reply = await client.ask_text(Request((("user", prompt),), "text", stage, lang, phash, max_new_tokens),
                                              max_tokens=max_new_tokens, temperature=temperature, seed=seed)
                done += 1
                if progress:
                    progress(done, len(unique))
                return reply.text

            try:
                texts = dict(zip(unique, await asyncio.gather(*(one(p) for p in unique))))
                return [texts[p] for p in prompts]
            finally:
                self.sent += client.stats.sent
                self.cache_hits += client.stats.cache_hits
                await client.aclose()

        try:
            return asyncio.run(go())
        finally:
            cache.close()


def endpoint_info(settings: LLMSettings) -> ModelInfo:
    """What results say about a model behind an endpoint: its served name and (redacted) base URL; weights
    are not ours to hash.

    Replayed replies are labelled as such: the recording, not the configured model name, answered.
    """
    if settings.mode == "recording":
        where = Path(settings.recording_path or "").name or "recording"
        return ModelInfo(name=f"recorded replies ({where})", source="recording", revision=None, weights_sha256=None,
                         architecture="replayed recording of an OpenAI-compatible endpoint", n_params=0, n_layers=0,
                         hidden_size=0, device=f"replay of {where}", dtype="n/a", batch_size=settings.concurrency)
    return ModelInfo(name=settings.model, source="endpoint", revision=None, weights_sha256=None,
                     architecture="OpenAI-compatible endpoint", n_params=0, n_layers=0, hidden_size=0,
                     device=settings.endpoint, dtype="n/a", batch_size=settings.concurrency)
