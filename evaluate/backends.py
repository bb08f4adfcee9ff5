"""Text generation for the generative methods: a local transformers model or an OpenAI-compatible endpoint.

Both are `evaluate.protocols.TextGenerator`s (the local one a `ReplyFormat` too): they take plain
prompts and return the model's continuation as text, decoded greedily unless a
sampled run is asked for (a temperature and a seed). The endpoint goes through the construction pipeline's `LLMClient`, with an
LLM cache of its own in the results folder (OUT/llm-cache.sqlite, no workspace): a re-run, or one
resumed after a crash, sends nothing it already has. A vLLM server started with `--tensor-parallel-size N` is such an endpoint,
which is how an evaluation outgrows one GPU (docs/evaluation.md).
"""

from __future__ import annotations

import asyncio
from functools import cached_property
from pathlib import Path

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient, Request, prompt_hash
from builder.llm.config import LLMSettings
from evaluate.models import DTYPES, LoadedModel, ModelInfo
from evaluate.scoring import ROW_TOKENS, Scorer, length_batches, pack, pad_batch, tree_inputs

CACHE_FILE = "llm-cache.sqlite"  # an endpoint's replies, in the results folder


def chat_text(tokenizer, prompt: str) -> str | None:
    """The prompt as one user turn in the tokenizer's chat template, up to where the model's reply begins; None for a
    tokenizer without one. Rendered as text and tokenized apart (without special tokens: the template writes its
    own), as `apply_chat_template(tokenize=True)` does on transformers 4.x; on 5.x that returns a mapping."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)


class TransformersGenerator:
    """Decoding with `model.generate`, prompts batched and padded on the left.

    A tokenizer with a chat template gets each prompt as one user turn (`chat_text`); a base model gets the prompt
    after its BOS token, as the scorer reads texts. Greedy unless a temperature is given: then sampled from the
    whole distribution, seeded, so a run with the same prompts, batch size and seed gives the same replies.

    Prompts mostly repeat one another's beginnings (the chat template, the instruction, an exemplar): on the demo's
    6,248 M2C prompts 57% of the tokens are a prefix of another prompt, and reading the prompts was 78% of
    generating. So where the model computes a packed prefix tree as it computes each text alone (`Scorer.packs`),
    a batch is prompts next to each other in token order, read as one packed tree (each shared prefix once), and
    each prompt's cached keys and values are gathered from it before decoding; elsewhere batches are by length.
    """

    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded = loaded
        tok = loaded.tokenizer
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    @cached_property
    def packs(self) -> bool:
        return Scorer(self.loaded).packs

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
        batch_size, done = self.loaded.info.batch_size, 0
        if self.packs:
            order = sorted(range(len(encoded)), key=lambda i: encoded[i])
            batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        else:
            batches = length_batches([len(e) for e in encoded], batch_size)
        device = self.loaded.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed or 0)
            for batch in batches:
                seqs = [encoded[i] for i in batch]
                ids, mask = pad_batch(seqs, self.pad_id, left=True)
                cache = self._prefilled(seqs) if self.packs else None
                with torch.inference_mode():
                    gen = self.loaded.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                                     past_key_values=cache, max_new_tokens=max_new_tokens,
                                                     pad_token_id=self.pad_id, **sampling)
                for row, i in enumerate(batch):
                    out[i] = self.loaded.tokenizer.decode(gen[row, ids.shape[1]:], skip_special_tokens=True)
                done += len(batch)
                if progress:
                    progress(done, len(unique))
        texts = dict(zip(unique, out))
        return [texts[p] for p in prompts]

    def _prefilled(self, seqs: list[list[int]]) -> DynamicCache | None:
        """A cache of every prompt but its last token, laid out as the prompts are, padded on the left: computed as one
        packed tree (`pack`, `tree_inputs`), so a prefix the prompts share is read once; the last tokens then go
        through `generate` as usual. None (prompts of one token, or a cache of another kind than the plain one)
        leaves the whole prompt to `generate`."""
        heads = [s[:-1] for s in seqs]
        width = max(map(len, heads))
        if not width:
            return None
        packing = pack(heads, max(ROW_TOKENS, 2 * width))
        rows = [r for r in packing.rows if r.tokens]
        ids, kwargs = tree_inputs(rows, self.pad_id, DTYPES[self.loaded.info.dtype])
        device = self.loaded.device
        with torch.inference_mode():
            cache = self.loaded.model(input_ids=ids.to(device), **{k: v.to(device) for k, v in kwargs.items()},
                                      use_cache=True, logits_to_keep=1).past_key_values
        if not isinstance(cache, DynamicCache) or any(type(layer) is not DynamicLayer for layer in cache.layers):
            self.packs = False  # sliding windows and the like: the next batches go by length, read whole
            return None
        where = {i: (k, torch.as_tensor(path, device=device)) for k, r in enumerate(rows) for i, path in r.paths.items()}
        for layer in cache.layers:
            keys = layer.keys.new_zeros((len(seqs), layer.keys.shape[1], width, layer.keys.shape[3]))
            values = layer.values.new_zeros((len(seqs), layer.values.shape[1], width, layer.values.shape[3]))
            for b, head in enumerate(heads):
                if head:
                    k, path = where[b]
                    keys[b, :, width - len(head):] = layer.keys[k][:, path]
                    values[b, :, width - len(head):] = layer.values[k][:, path]
            layer.keys, layer.values = keys, values
        return cache


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
    if settings.source == "recording":
        where = Path(settings.recording_path or "").name or "recording"
        return ModelInfo(name=f"recorded replies ({where})", source="recording", revision=None, weights_sha256=None,
                         architecture="replayed recording of an OpenAI-compatible endpoint", n_params=0, n_layers=0,
                         hidden_size=0, device=f"replay of {where}", dtype="n/a", batch_size=settings.concurrency)
    return ModelInfo(name=settings.model, source="endpoint", revision=None, weights_sha256=None,
                     architecture="OpenAI-compatible endpoint", n_params=0, n_layers=0, hidden_size=0,
                     device=settings.endpoint, dtype="n/a", batch_size=settings.concurrency)
