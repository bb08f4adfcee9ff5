"""Log-probabilities of texts under a causal language model, batched and each text scored once.

Every choice that changes a score is explicit and recorded (`ScoringSetup`):
- BOS: texts are tokenized without special tokens and the begin token is prepended by us, never by
  the tokenizer, so it is neither doubled nor missing. Without one the first token has no
  prediction and is not scored.
- A continuation is tokenized on its own and appended to its tokenized context, so the boundary
  (the space, the quote) belongs to the side the caller wrote it on.
- Requests are sorted by token length and cut into batches, so padding stays small; padding goes on
  the right, where a causal model never attends to it.
- The output layer runs only where a next token is scored (not on padding, not after a text's last
  token), and a log-probability is the target's logit minus the log-sum-exp of its row, so no
  [batch, length, vocabulary] log-softmax is ever held: with real vocabularies that layer and that
  tensor are most of the time and memory of scoring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from evaluate.models import LoadedModel

BosPolicy = Literal["auto", "bos", "eos", "none"]
ProgressFn = Callable[[int, int], None]  # (done, total)
ENCODE_CHUNK = 1024
PROBE_TOKENS = tuple(range(1, 9))  # the input on which a model's split into decoder and output layer is checked
HEAD_CHUNK_BYTES = 32 << 20  # float32 logits per output-layer call: bounded memory, and fast while cached


class ScoringSetup(BaseModel):
    """How scores were computed; stored with every result."""

    model_config = ConfigDict(frozen=True)
    bos_policy: Literal["bos", "eos", "none"]
    bos_token: str | None
    first_token_scored: bool
    continuation: str = "tokenized separately and appended to the tokenized context"
    padding: str = "right"
    logprob_dtype: str = "float32"


def resolve_bos(policy: BosPolicy, tokenizer) -> tuple[ScoringSetup, int | None]:
    """`auto` prepends the tokenizer's BOS token, or its EOS (GPT-2 style document separator) if it has none."""
    if policy == "auto":
        policy = "bos" if tokenizer.bos_token_id is not None else "eos" if tokenizer.eos_token_id is not None else "none"
    token_id = {"bos": tokenizer.bos_token_id, "eos": tokenizer.eos_token_id, "none": None}[policy]
    if policy != "none" and token_id is None:
        raise ValueError(f"BOS policy {policy!r}: the tokenizer has no {policy} token")
    token = tokenizer.convert_ids_to_tokens(token_id) if token_id is not None else None
    return ScoringSetup(bos_policy=policy, bos_token=token, first_token_scored=token_id is not None), token_id


@dataclass(frozen=True)
class TokenScores:
    """Log-probabilities of a target's scored tokens with their [start, end) character offsets in the target."""

    logprobs: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    def from_char(self, start: int) -> tuple[float, int]:
        """Sum and count of the scored tokens that begin at or after character `start`."""
        keep = self.starts >= start
        return float(self.logprobs[keep].sum()), int(keep.sum())


def length_batches(lengths: Sequence[int], batch_size: int, max_tokens: int | None = None) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first (memory trouble shows at once).

    With `max_tokens`, a batch also stops growing before its padded size (rows x longest) would exceed it.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    if max_tokens is None:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < batch_size and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= max_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = 1
    return ids, mask


# Config fields of models whose logits are more than the output layer's: soft-capping (Gemma 2/3) and scaling
# (Cohere, Granite). Such models are scored from their full logits.
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def split_head(model) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """(decoder, output layer) when the model's logits are exactly the output layer applied to the decoder's
    last hidden states: no known logit transform in its config, and the same logits both ways on a probe.
    None otherwise, and the model is scored from its full logits."""
    body, output = getattr(model, "base_model", None), getattr(model, "get_output_embeddings", None)
    head = output() if output else None
    if body is None or body is model or head is None:
        return None
    if any(getattr(model.config, k, None) not in (None, 1, 1.0) for k in LOGIT_TRANSFORMS):
        return None
    device = next(model.parameters()).device
    probe = torch.tensor([PROBE_TOKENS], device=device) % model.config.vocab_size
    with torch.inference_mode():
        full = model(input_ids=probe).logits.float()
        split = head(body(input_ids=probe).last_hidden_state).float()
    return (body, head) if torch.allclose(full, split, rtol=1e-5, atol=1e-6) else None


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per row of [positions, vocabulary] logits, computed in float32."""
    return torch.log_softmax(logits, dim=-1, dtype=torch.float32).gather(-1, targets[:, None]).squeeze(-1)


class Scorer:
    def __init__(self, loaded: LoadedModel, bos_policy: BosPolicy = "auto") -> None:
        self.loaded = loaded
        self.setup, self.bos_id = resolve_bos(bos_policy, loaded.tokenizer)
        tok = loaded.tokenizer
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)

    @cached_property
    def split(self) -> tuple[torch.nn.Module, torch.nn.Module] | None:
        """Probed on first use: a resumed run that scores nothing never runs the model."""
        return split_head(self.loaded.model)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids without special tokens, in chunks: a tokenizer's full encodings of every text at once are large."""
        tok, texts = self.loaded.tokenizer, list(texts)
        return [ids for i in range(0, len(texts), ENCODE_CHUNK)
                for ids in tok(texts[i : i + ENCODE_CHUNK], add_special_tokens=False)["input_ids"]]

    def prefix(self) -> list[int]:
        return [self.bos_id] if self.bos_id is not None else []

    def score(self, requests: Sequence[tuple[str, str]], progress: ProgressFn | None = None) -> dict[tuple[str, str], TokenScores]:
        """Score each unique (context, target) once: the log-probability of the target's tokens after the context."""
        unique = list(dict.fromkeys(requests))
        if not unique:
            return {}
        contexts = list(dict.fromkeys(c for c, _ in unique))
        targets = list(dict.fromkeys(t for _, t in unique))
        ctx_ids = dict(zip(contexts, self.encode(contexts)))
        enc = self.loaded.tokenizer(targets, add_special_tokens=False, return_offsets_mapping=True)
        tgt = {t: (ids, np.asarray(offs, dtype=np.int64).reshape(-1, 2))
               for t, ids, offs in zip(targets, enc["input_ids"], enc["offset_mapping"])}
        seqs, n_ctx = [], []
        for c, t in unique:
            head = self.prefix() + ctx_ids[c]
            seqs.append(head + tgt[t][0])
            n_ctx.append(len(head))
        out: dict[tuple[str, str], TokenScores] = {}
        done = 0
        for batch in length_batches([len(s) for s in seqs], self.loaded.info.batch_size):
            lp = self._logprobs([seqs[i] for i in batch])
            for row, i in enumerate(batch):
                first = max(n_ctx[i], 1)  # a token needs a predecessor to be scored
                offs = tgt[unique[i][1]][1][first - n_ctx[i]:]
                out[unique[i]] = TokenScores(lp[row, first - 1 : len(seqs[i]) - 1].copy(), offs[:, 0].copy(), offs[:, 1].copy())
            done += len(batch)
            if progress:
                progress(done, len(unique))
        return out

    def _logprobs(self, seqs: list[list[int]]) -> np.ndarray:
        """[batch, width-1] log-probability of each next token (float32 whatever the model's dtype; NaN on padding)."""
        ids, mask = pad_batch(seqs, self.pad_id)
        ids, mask = ids.to(self.loaded.device), mask.to(self.loaded.device)
        scored = mask[:, 1:].bool()  # positions whose next token is a real one
        with torch.inference_mode():
            if self.split:
                body, head = self.split
                rows = body(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1][scored]
                vocab = self.loaded.model.config.vocab_size
            else:
                head = torch.nn.Identity()
                rows = self.loaded.model(input_ids=ids, attention_mask=mask).logits[:, :-1][scored]
                vocab = rows.shape[-1]
            targets = ids[:, 1:][scored]
            lp = torch.full(scored.shape, float("nan"), dtype=torch.float32, device=ids.device)
            step = max(1, HEAD_CHUNK_BYTES // (4 * vocab))
            lp[scored] = torch.cat([token_logprobs(head(rows[i : i + step]), targets[i : i + step])
                                    for i in range(0, len(targets), step)])
        return lp.cpu().numpy()
