"""Log-probabilities of texts under a causal language model, batched and each text scored once.

Every choice that changes a score is explicit and recorded (`ScoringSetup`):
- BOS: texts are tokenized without special tokens and the begin token is prepended by us, never by
  the tokenizer, so it is neither doubled nor missing. Without one the first token has no
  prediction and is not scored.
- A continuation is tokenized on its own and appended to its tokenized context, so the boundary
  (the space, the quote) belongs to the side the caller wrote it on.
- Texts that begin alike share the work on their common beginning. Sorted, neighbours share the
  longest prefixes; they are packed into rows as a prefix tree (each distinct prefix once, at its
  own position, attending only to its ancestors), so the decoder runs on "<s> A toaster is used
  for" once, not once per sentence. Whether a model computes a packed tree exactly as it computes
  each text alone is checked once per model on a probe; a model that does not (one that derives
  positions from a 2D mask, say) gets one text per row. Rows are batched by length, padding on the
  right.
- The output layer is most of the time and memory of scoring with real vocabularies, so it runs
  only where it must. A log-probability is the target's logit (one row of the output layer's
  weights) minus the log-sum-exp of the whole row of logits, and that normaliser depends only on the
  tokens up to its position, so it is computed once per distinct prefix, in chunks, and never for
  context positions, padding or after a text's last token. No [batch, length, vocabulary] tensor
  is ever held.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from typing import Literal, NamedTuple

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from evaluate.models import DTYPES, LoadedModel

BosPolicy = Literal["auto", "bos", "eos", "none"]
ProgressFn = Callable[[int, int], None]  # (done, total)
ENCODE_CHUNK = 1024
PROBE_TOKENS = tuple(range(1, 9))  # the input on which a model's split and packing are checked
ROW_TOKENS = 64  # a packed row's least capacity; a batch holds batch_size rows of this many tokens
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


@dataclass
class Row:
    """Token sequences packed as a prefix tree in depth-first order: each distinct prefix once, at its depth."""

    tokens: list[int]
    depths: list[int]
    paths: dict[int, np.ndarray]  # sequence index -> the row position of each of its prefixes

    def ends(self) -> np.ndarray:
        """Where each position's subtree ends: in depth-first order its descendants follow it, up to the next
        position no deeper than it. Position i sees position j (an ancestor or itself) iff j <= i < ends[j]."""
        ends, open_ = np.full(len(self.depths), len(self.depths)), []
        for k, depth in enumerate(self.depths):
            while open_ and self.depths[open_[-1]] >= depth:
                ends[open_.pop()] = k
            open_.append(k)
        return ends


class Packing(NamedTuple):
    rows: list[Row]
    prefixes: list[np.ndarray]  # per sequence, an id per position: equal ids, equal prefixes (so equal states)
    n_prefixes: int


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def pack(seqs: Sequence[Sequence[int]], capacity: int) -> Packing:
    """Rows of at most `capacity` tokens (a longer sequence gets a row of its own; 0: one sequence per row,
    unless identical). Sorted, each sequence shares with its predecessor the longest prefix it shares with
    any earlier one, so it adds only its tokens after that prefix: to the predecessor's row, and to the
    distinct prefixes of all rows."""
    rows: list[Row] = []
    prefixes: list[np.ndarray] = [np.zeros(0, np.int64)] * len(seqs)
    n_prefixes, prev = 0, None
    for i in sorted(range(len(seqs)), key=lambda i: list(seqs[i])):
        seq = seqs[i]
        shared = common_prefix(seq, seqs[prev]) if prev is not None else 0
        own = np.arange(n_prefixes, n_prefixes + len(seq) - shared)
        prefixes[i] = np.concatenate([prefixes[prev][:shared], own]) if shared else own
        n_prefixes += len(own)
        if not rows or (shared < len(seq) and len(rows[-1].tokens) + len(seq) - shared > capacity):
            rows.append(Row([], [], {}))
            shared = 0
        row = rows[-1]
        new = np.arange(len(row.tokens), len(row.tokens) + len(seq) - shared)
        row.paths[i] = np.concatenate([row.paths[prev][:shared], new]) if shared else new
        row.tokens += seq[shared:]
        row.depths += range(shared, len(seq))
        prev = i
    return Packing(rows, prefixes, n_prefixes)


# Config fields of models whose logits are more than the output layer's: soft-capping (Gemma 2/3) and scaling
# (Cohere, Granite). Such models are scored from their full logits.
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def split_head(model) -> tuple[torch.nn.Module, torch.nn.Linear] | None:
    """(decoder, output layer) when the model's logits are exactly a linear output layer applied to the
    decoder's last hidden states: no known logit transform in its config, and the same logits both ways on
    a probe. None otherwise, and the model is scored from its full logits."""
    body, output = getattr(model, "base_model", None), getattr(model, "get_output_embeddings", None)
    head = output() if output else None
    if body is None or body is model or not isinstance(head, torch.nn.Linear):
        return None
    if any(getattr(model.config, k, None) not in (None, 1, 1.0) for k in LOGIT_TRANSFORMS):
        return None
    device = next(model.parameters()).device
    probe = torch.tensor([PROBE_TOKENS], device=device) % model.config.vocab_size
    with torch.inference_mode():
        full = model(input_ids=probe).logits.float()
        split = head(body(input_ids=probe).last_hidden_state).float()
    return (body, head) if torch.allclose(full, split, rtol=1e-5, atol=1e-6) else None


def in_chunks(fn: Callable[[slice], torch.Tensor], n: int, step: int) -> torch.Tensor:
    """fn over [0, n) in slices of `step`, concatenated (one empty slice when n is 0)."""
    return torch.cat([fn(slice(i, i + step)) for i in range(0, max(n, 1), step)])


def target_logits(states: torch.Tensor, head: torch.nn.Linear | None, targets: torch.Tensor) -> torch.Tensor:
    """Each position's logit of its own target only, in float32: one weight row each, or read from full logits."""
    if head is None:
        return states.gather(-1, targets[:, None]).squeeze(-1).float()
    logit = (states.float() * head.weight[targets].float()).sum(-1)
    return logit + head.bias[targets].float() if head.bias is not None else logit


class Scorer:
    def __init__(self, loaded: LoadedModel, bos_policy: BosPolicy = "auto") -> None:
        self.loaded = loaded
        self.setup, self.bos_id = resolve_bos(bos_policy, loaded.tokenizer)
        tok = loaded.tokenizer
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)

    @cached_property
    def split(self) -> tuple[torch.nn.Module, torch.nn.Linear] | None:
        """Probed on first use: a resumed run that scores nothing never runs the model."""
        return split_head(self.loaded.model)

    @cached_property
    def packs(self) -> bool:
        """Whether the model computes a packed prefix tree's states as it computes each text alone (checked on
        two probe texts sharing a prefix): given positions and a 4D mask, most decoders do; models that derive
        positions or biases from a 2D mask do not, or refuse the mask."""
        a = [t % len(self.loaded.tokenizer) for t in PROBE_TOKENS]
        b = [*a[:4], *a[:3:-1]]
        tree, apart = pack([a, b], len(a) + len(b)).rows[0], pack([a, b], 0).rows
        try:
            packed = self._forward([tree], packed=True)[0].float()
        except (TypeError, ValueError, RuntimeError, IndexError):
            return False
        alone = self._forward(apart, packed=False).float()
        tol = 1e-4 if self.loaded.info.dtype == "float32" else 3e-2
        return all(bool((packed[tree.paths[i]] - alone[k]).abs().max() <= tol * alone[k].abs().max())
                   for k, row in enumerate(apart) for i in row.paths)

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
        enc = self.loaded.tokenizer(targets, add_special_tokens=False, return_offsets_mapping=True,
                                    return_attention_mask=False, return_token_type_ids=False)
        tgt_ids = dict(zip(targets, enc["input_ids"]))
        tgt_at = dict(zip(targets, accumulate((len(ids) for ids in enc["input_ids"]), initial=0)))  # in `offsets`
        offsets = np.array([o for offs in enc["offset_mapping"] for o in offs], dtype=np.int64).reshape(-1, 2).T.copy()
        offsets.flags.writeable = False  # shared by the TokenScores, as views
        seqs, n_ctx = [], []
        for c, t in unique:
            head = self.prefix() + ctx_ids[c]
            seqs.append(head + tgt_ids[t])
            n_ctx.append(len(head))
        starts = [max(n, 1) - 1 for n in n_ctx]  # the first position whose next token is scored
        inputs = [s[:-1] for s in seqs]  # the last token predicts nothing that is scored
        packing = pack(inputs, max(ROW_TOKENS, 2 * max(map(len, inputs))) if self.packs else 0)
        rows = [r for r in packing.rows if r.tokens]
        norms = np.full(packing.n_prefixes, np.nan)  # log-sum-exp of the output layer's row, by prefix id, filled as met
        batch_size = self.loaded.info.batch_size
        nothing = TokenScores(np.zeros(0, np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64))
        out = {unique[i]: nothing for i, s in enumerate(inputs) if not s}
        for batch in length_batches([len(r.tokens) for r in rows], batch_size, batch_size * ROW_TOKENS):
            states = self._forward([rows[b] for b in batch], packed=self.packs)
            width = states.shape[1]
            members = [(k, i, path[starts[i] :]) for k, b in enumerate(batch) for i, path in rows[b].paths.items()]
            lp = self._logprobs(states.flatten(0, 1), np.concatenate([k * width + at for k, _, at in members]),
                                np.concatenate([seqs[i][starts[i] + 1 :] for _, i, _ in members]),
                                np.concatenate([packing.prefixes[i][starts[i] :] for _, i, _ in members]), norms)
            for (_, i, _), part in zip(members, np.split(lp, np.cumsum([len(at) for _, _, at in members])[:-1])):
                t = unique[i][1]
                span = slice(tgt_at[t] + starts[i] + 1 - n_ctx[i], tgt_at[t] + len(tgt_ids[t]))
                out[unique[i]] = TokenScores(part, offsets[0, span], offsets[1, span])
            if progress:
                progress(len(out), len(unique))
        return out

    def _forward(self, rows: list[Row], packed: bool) -> torch.Tensor:
        """[rows, width, hidden] decoder states (or [.., vocabulary] logits when the model is not split). Packed:
        each position at its depth, attending to its ancestors; otherwise one text per row, causal as usual."""
        ids, mask = pad_batch([r.tokens for r in rows], self.pad_id)
        width = ids.shape[1]
        model = self.split[0] if self.split else self.loaded.model
        device, dtype = self.loaded.device, DTYPES[self.loaded.info.dtype]
        if packed:
            at = torch.arange(width)
            positions, ends = torch.zeros_like(ids), (at + 1).repeat(len(rows), 1)  # padding sees only itself
            for k, r in enumerate(rows):
                positions[k, : len(r.depths)] = torch.as_tensor(r.depths, dtype=torch.long)
                ends[k, : len(r.depths)] = torch.as_tensor(r.ends())
            visible = (at[None, :, None] >= at[None, None, :]) & (at[None, :, None] < ends[:, None, :])
            tree_mask = torch.zeros(visible.shape, dtype=dtype).masked_fill_(~visible, torch.finfo(dtype).min)[:, None]
            kwargs = {"attention_mask": tree_mask.to(device), "position_ids": positions.to(device)}
        else:
            kwargs = {"attention_mask": mask.to(device)}
        with torch.inference_mode():
            out = model(input_ids=ids.to(device), **kwargs)
        return out.last_hidden_state if self.split else out.logits

    def _logprobs(self, states: torch.Tensor, at: np.ndarray, targets: np.ndarray, prefixes: np.ndarray,
                  norms: np.ndarray) -> np.ndarray:
        """Target logit minus its row's log-sum-exp at positions `at` of the flattened states. The normaliser is
        computed only for prefixes not met before (`norms`, by prefix id, shared by a `score` call's batches)."""
        head = self.split[1] if self.split else None
        width = head.out_features if head is not None else states.shape[-1]
        step = max(1, HEAD_CHUNK_BYTES // (4 * width))  # rows of logits per chunk
        with torch.inference_mode():
            rows = states[torch.as_tensor(at, device=states.device)]
            goal = torch.as_tensor(targets, device=states.device)
            per_target = max(1, HEAD_CHUNK_BYTES // (8 * rows.shape[-1]))  # a state and a weight row each
            logit = in_chunks(lambda part: target_logits(rows[part], head, goal[part]), len(at), per_target)
            met, first = np.unique(prefixes, return_index=True)
            first = first[np.isnan(norms[met])]  # each new prefix's first position
            new = torch.as_tensor(first, device=states.device)
            for i in range(0, len(first), step):
                chunk = rows[new[i : i + step]]
                norms[prefixes[first[i : i + step]]] = torch.logsumexp((head(chunk) if head else chunk).float(), -1).cpu().numpy()
        return (logit.cpu().numpy() - norms[prefixes]).astype(np.float32)
