"""Log-probabilities of texts under a causal language model, batched and each text scored once.

Every choice that changes a score is explicit and recorded (`ScoringSetup`):
- BOS: texts are tokenized without special tokens and the begin token is prepended by us, never by
  the tokenizer, so it is neither doubled nor missing. `auto` takes the tokenizer's BOS token unless
  it opens every chat turn (SmolLM2's `<|im_start|>`): then the document separator the model was
  pretrained with (`<|endoftext|>`), and the reason is recorded. Any token can be named instead.
  Without one the first token has no prediction and is not scored.
- A continuation is tokenized together with its context, as the model reads the whole text, and the
  tokens are split at the character where the continuation starts (a token that straddles that
  point belongs to the continuation). Tokenized apart, a SentencePiece tokenizer would give the
  continuation a word-initial space the text never had. Only a tokenizer without character offsets
  gets the two tokenized apart, and the setup says so.
- Texts that begin alike share the work on their common beginning. Sorted, neighbours share the
  longest prefixes; they are packed into rows as a prefix tree (each distinct prefix once, at its
  own position, attending only to its ancestors), so the decoder runs on "<s> A toaster is used
  for" once, not once per sentence, and a prompt followed by each of its candidate answers once.
  Whether a model computes a packed tree exactly as it computes each text alone is checked once per
  model on a probe; a model that does not (one that derives positions from a 2D mask, say) gets one
  text per row. Rows are batched by length, padding on the right.
- The output layer is most of the time and memory of scoring with real vocabularies, so it runs
  only where it must. A log-probability is the target's logit (one row of the output layer's
  weights) minus the log-sum-exp of the whole row of logits, and that normaliser depends only on the
  tokens up to its position, so it is computed once per distinct prefix, in chunks, and never for
  context positions, padding or after a text's last token. No [batch, length, vocabulary] tensor
  is ever held.
- A score does not depend on what it is batched with: in float32, attention runs in float64
  (`wide_attention`), the one part whose float32 sums depend on a row's width, and the output layer
  never takes a single row alone. On a CPU a text's score is then the same to the bit in any batch,
  packed or not (tested on SmolLM2), so a score store hands out exactly what a fresh run computes.
- Precision: the target's logit and its normaliser always come from the same logits. With the
  decoder in reduced precision the output layer runs apart in float32 (a float32 copy of its
  weights), so both are float32; a model scored from its own logits (a soft-capped one) gets both
  from those logits. The log-softmax is float32 either way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from builder.errors import InputError
from evaluate.models import DTYPES, LoadedModel

BosPolicy = str  # auto, bos, eos, none, or a token of the vocabulary
BOS_POLICIES = ("auto", "bos", "eos", "none")
# Tokens that separate pretraining documents, in the order `auto` tries them when BOS is a chat-turn marker.
DOCUMENT_SEPARATORS = ("<|endoftext|>", "<|end_of_text|>", "<|begin_of_text|>", "</s>", "<s>", "<eos>", "<bos>")
ProgressFn = Callable[[int, int], None]  # (done, total)
ENCODE_CHUNK = 1024
PROBE_TOKENS = tuple(range(1, 9))  # the input on which a model's split and packing are checked
# How far a packed text's states may be from the same text's alone (norm of the difference over the norm), by
# precision. Measured on SmolLM2's probe, packing: in float32 0 on a CPU and 1e-4 on an H100 (its kernels add in
# another order), in bfloat16 0.03 and 0.07; with the position ids or the tree mask ignored: 0.36 to 0.85.
PACK_TOLERANCE = {"float32": 1e-3, "reduced": 0.15}
ROW_TOKENS = 64  # a packed row's least capacity; a batch holds batch_size rows of this many tokens
HEAD_CHUNK_BYTES = 32 << 20  # float32 logits per output-layer call: bounded memory, and fast while cached
WIDE_ATTENTION = "sdpa_float64"  # the attention implementation scoring in float32 runs (`wide_attention`)
TOGETHER = "tokenized with its context, split at the character where it starts"
APART = "tokenized apart from its context and appended (the tokenizer gives no character offsets)"


class ScoringSetup(BaseModel):
    """How scores were computed; stored with every result."""

    model_config = ConfigDict(frozen=True)
    bos_policy: str  # bos, eos, token (named, or chosen by auto) or none
    bos_token: str | None
    bos_reason: str = ""
    first_token_scored: bool
    continuation: str = TOGETHER
    padding: str = "right"
    precision: str = "float32"


def chat_turn_count(tokenizer, token: str) -> int:
    """How often `token` appears in the tokenizer's chat template rendered for one user and one assistant turn
    (0 without a template): a document's BOS appears at most once, a turn marker once per turn."""
    if not getattr(tokenizer, "chat_template", None):
        return 0
    chat = [{"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hi."}]
    try:
        return tokenizer.apply_chat_template(chat, tokenize=False).count(token)
    except Exception:  # noqa: BLE001 - a template that cannot render these two turns marks nothing
        return 0


def token_id(tokenizer, token: str) -> int | None:
    """The id of `token` if the vocabulary holds it as one token."""
    found = tokenizer.convert_tokens_to_ids(token)
    if found is None or (found == tokenizer.unk_token_id and token != tokenizer.unk_token):
        return None
    return found


def auto_bos(tokenizer) -> tuple[str, str | None, str]:
    """(policy, token, reason) for `auto`: the BOS token; if it marks chat turns, or there is none, the first
    document separator the vocabulary holds that marks no turn; else nothing."""
    bos, eos = tokenizer.bos_token, tokenizer.eos_token
    if bos and tokenizer.bos_token_id is not None and chat_turn_count(tokenizer, bos) < 2:
        return "bos", bos, "the tokenizer's BOS token"
    why = (f"the BOS token {bos} opens every chat turn ({chat_turn_count(tokenizer, bos)} times in a two-turn chat)"
           if bos else "the tokenizer has no BOS token")
    candidates = [t for t in (eos, *DOCUMENT_SEPARATORS) if t and token_id(tokenizer, t) is not None
                  and chat_turn_count(tokenizer, t) < 2]
    if not candidates:
        return "none", None, f"{why} and no document separator was found: the first token is not scored"
    token = candidates[0]
    policy = "eos" if token == eos else "token"
    return policy, token, f"{why}: the document separator {token} instead"


def resolve_bos(policy: BosPolicy, tokenizer) -> tuple[ScoringSetup, int | None]:
    """The token prepended to every text: `auto` (see `auto_bos`), the tokenizer's `bos` or `eos`, `none`, or a
    token named by its string (`<|endoftext|>`)."""
    reason = ""
    if policy == "auto":
        policy, token, reason = auto_bos(tokenizer)
    elif policy in ("bos", "eos"):
        token = tokenizer.bos_token if policy == "bos" else tokenizer.eos_token
        if token is None or token_id(tokenizer, token) is None:
            raise InputError(f"BOS policy {policy!r}: the tokenizer has no {policy} token")
    elif policy == "none":
        token = None
    else:
        token, policy = policy, "token"
        if token_id(tokenizer, token) is None:
            special = ", ".join(dict.fromkeys(tokenizer.all_special_tokens)) or "none"
            raise InputError(f"--bos {token!r}: not one token of the vocabulary; expected auto, bos, eos, none or a "
                             f"token such as the tokenizer's special tokens ({special})")
    tid = token_id(tokenizer, token) if token is not None else None
    return ScoringSetup(bos_policy=policy, bos_token=token, bos_reason=reason, first_token_scored=tid is not None), tid


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


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int, *, left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask, each sequence at the start of its row (or, `left`, at its end: for `generate`)."""
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        at = slice(width - len(seq), width) if left else slice(0, len(seq))
        ids[row, at] = torch.as_tensor(seq, dtype=torch.long)
        mask[row, at] = 1
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


def tree_inputs(rows: Sequence[Row], pad_id: int, dtype: torch.dtype) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Packed rows' token ids, and the model inputs that compute each position at its depth attending to its
    ancestors only: an additive 4D attention mask and position ids (padding sees only itself)."""
    ids, _ = pad_batch([r.tokens for r in rows], pad_id)
    at = torch.arange(ids.shape[1])
    positions, ends = torch.zeros_like(ids), (at + 1).repeat(len(rows), 1)
    for k, r in enumerate(rows):
        positions[k, : len(r.depths)] = torch.as_tensor(r.depths, dtype=torch.long)
        ends[k, : len(r.depths)] = torch.as_tensor(r.ends())
    visible = (at[None, :, None] >= at[None, None, :]) & (at[None, :, None] < ends[:, None, :])
    tree_mask = torch.zeros(visible.shape, dtype=dtype).masked_fill_(~visible, torch.finfo(dtype).min)[:, None]
    return ids, {"attention_mask": tree_mask, "position_ids": positions}


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
    logit = (states * head.weight[targets]).sum(-1)
    return logit + head.bias[targets] if head.bias is not None else logit


def product(head: torch.nn.Linear, rows: torch.Tensor) -> torch.Tensor:
    """head(rows); a single row goes with a copy of itself: alone it would take a matrix-vector kernel that adds
    in another order (1.3e-5 apart on a CPU), and its normaliser would depend on how many rows met it."""
    return head(rows.expand(2, -1))[:1] if len(rows) == 1 else head(rows)


def wide_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' SDPA attention computed in float64 and returned in the input's precision. In float32 a
    position's attention adds its keys in an order that depends on its row's width, so a text's score depended on
    what it was packed and batched with (SmolLM2: up to 1.1e-4 nats); in float64 those differences vanish when
    rounded back, and a stored score equals a fresh one. On SmolLM2 on a CPU scoring takes 8% longer."""
    mask = attention_mask.double() if attention_mask is not None and attention_mask.is_floating_point() else attention_mask
    out, weights = sdpa_attention_forward(module, query.double(), key.double(), value.double(), mask, **kwargs)
    return out.to(query.dtype), weights


AttentionInterface.register(WIDE_ATTENTION, wide_attention)


def attention_implementation(model) -> str | None:
    """The transformers attention a model runs (None for a model that is not a transformers one)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None)


@contextmanager
def attention_for_scoring(model, dtype: str):
    """The model's SDPA attention in float64 while it scores in float32 (`wide_attention`); as it is otherwise."""
    before = attention_implementation(model)
    if before != "sdpa" or dtype != "float32":
        yield
        return
    model.set_attn_implementation(WIDE_ATTENTION)
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def float32_head(head: torch.nn.Linear) -> torch.nn.Linear:
    """The output layer itself when it is float32, else a float32 copy (vocabulary x hidden x 4 bytes)."""
    if head.weight.dtype == torch.float32:
        return head
    copy = torch.nn.Linear(head.in_features, head.out_features, bias=head.bias is not None,
                           device=head.weight.device, dtype=torch.float32)
    with torch.no_grad():
        copy.weight.copy_(head.weight)
        if head.bias is not None:
            copy.bias.copy_(head.bias)
    return copy.requires_grad_(False)


@dataclass(frozen=True)
class Tokenized:
    """A (context, continuation) as the model reads it: all its token ids, how many belong to the context, and the
    continuation tokens' [start, end) character offsets in the continuation (2 x n)."""

    ids: list[int]
    n_context: int
    offsets: np.ndarray


def split_at(ids: list[int], offsets: np.ndarray, boundary: int) -> Tokenized:
    """Tokens of context + continuation split where the continuation starts: the context keeps the tokens that end
    at or before that character; one that straddles it goes with the continuation (its start clipped to 0)."""
    after = offsets[:, 1] > boundary
    k = int(after.argmax()) if after.any() else len(ids)
    return Tokenized(ids, k, np.clip(offsets[k:].T - boundary, 0, None))


def decoded_offsets(tokenizer, ids: list[int]) -> np.ndarray:
    """[start, end) of each token in the decoded text, for a tokenizer that reports no offsets: where the decoding
    of the tokens so far ends."""
    ends = [len(tokenizer.decode(ids[: k + 1])) for k in range(len(ids))]
    return np.array([[0, *ends[:-1]], ends], dtype=np.int64).reshape(2, -1)


@dataclass
class Work:
    """What scoring has run so far: decoder positions (padding included) and output-layer rows (normalisers, or
    every position when scored from full logits). Their multiply-adds are what a scorer can save."""

    positions: int = 0
    output_rows: int = 0


class Scorer:
    def __init__(self, loaded: LoadedModel, bos_policy: BosPolicy = "auto") -> None:
        self.loaded = loaded
        self.work = Work()
        self.bos_setup, self.bos_id = resolve_bos(bos_policy, loaded.tokenizer)
        tok = loaded.tokenizer
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
        self.together = bool(getattr(tok, "is_fast", False))  # character offsets come with fast tokenizers

    @cached_property
    def setup(self) -> ScoringSetup:
        """The BOS choice, how continuations are tokenized, and the precision (which, in reduced precision, depends
        on whether the output layer runs apart: probed here, on a few tokens)."""
        dtype = self.loaded.info.dtype
        wide = attention_implementation(self.loaded.model) == "sdpa"
        precision = (("float32; attention in float64" if wide else "float32") if dtype == "float32" else
                     f"decoder in {dtype}; output layer (a float32 copy), target logits and log-softmax in float32"
                     if self.split else f"the model's own {dtype} logits; log-softmax in float32")
        return self.bos_setup.model_copy(update={"continuation": TOGETHER if self.together else APART,
                                                 "precision": precision})

    @cached_property
    def split(self) -> tuple[torch.nn.Module, torch.nn.Linear] | None:
        """Probed on first use: a resumed run that scores nothing never runs the model."""
        return split_head(self.loaded.model)

    @cached_property
    def head(self) -> torch.nn.Linear | None:
        """The output layer that scores run through, in float32; None when scored from the model's full logits."""
        return float32_head(self.split[1]) if self.split else None

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
        tol = PACK_TOLERANCE["float32" if self.loaded.info.dtype == "float32" else "reduced"]
        return all(bool((packed[tree.paths[i]] - alone[k]).norm() <= tol * alone[k].norm())
                   for k, row in enumerate(apart) for i in row.paths)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids without special tokens, in chunks: a tokenizer's full encodings of every text at once are large."""
        tok, texts = self.loaded.tokenizer, list(texts)
        return [ids for i in range(0, len(texts), ENCODE_CHUNK)
                for ids in tok(texts[i : i + ENCODE_CHUNK], add_special_tokens=False)["input_ids"]]

    def prefix(self) -> list[int]:
        return [self.bos_id] if self.bos_id is not None else []

    def tokenize(self, requests: Sequence[tuple[str, str]]) -> list[Tokenized]:
        """Each (context, continuation) tokenized together and split where the continuation starts (apart, without
        offsets), in chunks."""
        tok, out = self.loaded.tokenizer, []
        if not self.together:
            for c, t in requests:
                ids_c, ids_t = (tok(x, add_special_tokens=False)["input_ids"] for x in (c, t))
                out.append(Tokenized(ids_c + ids_t, len(ids_c), decoded_offsets(tok, ids_t)))
            return out
        for i in range(0, len(requests), ENCODE_CHUNK):
            chunk = requests[i : i + ENCODE_CHUNK]
            enc = tok([c + t for c, t in chunk], add_special_tokens=False, return_offsets_mapping=True,
                      return_attention_mask=False, return_token_type_ids=False)
            out += [split_at(ids, np.asarray(offs, dtype=np.int64).reshape(-1, 2), len(c))
                    for (c, _), ids, offs in zip(chunk, enc["input_ids"], enc["offset_mapping"])]
        return out

    def score(self, requests: Sequence[tuple[str, str]], progress: ProgressFn | None = None) -> dict[tuple[str, str], TokenScores]:
        """Score each unique (context, continuation) once: the log-probability of the continuation's tokens after the
        context, with their character offsets in the continuation."""
        unique = list(dict.fromkeys(requests))
        if not unique:
            return {}
        tokenized = self.tokenize(unique)
        seqs = [self.prefix() + t.ids for t in tokenized]
        n_ctx = [len(self.prefix()) + t.n_context for t in tokenized]
        starts = [max(n, 1) - 1 for n in n_ctx]  # the first position whose next token is scored
        inputs = [s[:-1] for s in seqs]  # the last token predicts nothing that is scored
        packing = pack(inputs, max(ROW_TOKENS, 2 * max(map(len, inputs))) if self.packs else 0)
        rows = [r for r in packing.rows if r.tokens]
        norms = np.full(packing.n_prefixes, np.nan)  # log-sum-exp of the output layer's row, by prefix id, filled as met
        batch_size = self.loaded.info.batch_size
        nothing = TokenScores(np.zeros(0, np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64))
        out = {unique[i]: nothing for i, s in enumerate(inputs) if not s or starts[i] >= len(s)}
        for batch in length_batches([len(r.tokens) for r in rows], batch_size, batch_size * ROW_TOKENS):
            states = self._forward([rows[b] for b in batch], packed=self.packs)
            width = states.shape[1]
            self.work.positions += len(batch) * width
            self.work.output_rows += 0 if self.head is not None else len(batch) * width
            members = [(k, i, path[starts[i] :]) for k, b in enumerate(batch) for i, path in rows[b].paths.items()
                       if unique[i] not in out]
            if not members:
                continue
            lp = self._logprobs(states.flatten(0, 1), np.concatenate([k * width + at for k, _, at in members]),
                                np.concatenate([seqs[i][starts[i] + 1 :] for _, i, _ in members]),
                                np.concatenate([packing.prefixes[i][starts[i] :] for _, i, _ in members]), norms)
            for (_, i, _), part in zip(members, np.split(lp, np.cumsum([len(at) for _, _, at in members])[:-1])):
                offsets = tokenized[i].offsets[:, len(tokenized[i].offsets[0]) - len(part) :]
                out[unique[i]] = TokenScores(part, offsets[0], offsets[1])
            if progress:
                progress(len(out), len(unique))
        return out

    def _forward(self, rows: list[Row], packed: bool) -> torch.Tensor:
        """[rows, width, hidden] decoder states (or [.., vocabulary] logits when the model is not split). Packed:
        each position at its depth, attending to its ancestors; otherwise one text per row, causal as usual."""
        model = self.split[0] if self.split else self.loaded.model
        device = self.loaded.device
        if packed:
            ids, kwargs = tree_inputs(rows, self.pad_id, DTYPES[self.loaded.info.dtype])
        else:
            ids, mask = pad_batch([r.tokens for r in rows], self.pad_id)
            kwargs = {"attention_mask": mask}
        with torch.inference_mode(), attention_for_scoring(self.loaded.model, self.loaded.info.dtype):
            out = model(input_ids=ids.to(device), **{k: v.to(device) for k, v in kwargs.items()})
        return out.last_hidden_state if self.split else out.logits

    def _logprobs(self, states: torch.Tensor, at: np.ndarray, targets: np.ndarray, prefixes: np.ndarray,
                  norms: np.ndarray) -> np.ndarray:
        """Target logit minus its row's log-sum-exp at positions `at` of the flattened states, both from the same
        float32 logits (or both from the model's own). The normaliser is computed only for prefixes not met before
        (`norms`, by prefix id, shared by a `score` call's batches)."""
        head = self.head
        width = head.out_features if head is not None else states.shape[-1]
        step = max(1, HEAD_CHUNK_BYTES // (4 * width))  # rows of logits per chunk
        with torch.inference_mode():
            rows = states[torch.as_tensor(at, device=states.device)]
            rows = rows.float() if head is not None else rows
            goal = torch.as_tensor(targets, device=states.device)
            per_target = max(1, HEAD_CHUNK_BYTES // (8 * rows.shape[-1]))  # a state and a weight row each
            logit = in_chunks(lambda part: target_logits(rows[part], head, goal[part]), len(at), per_target)
            met, first = np.unique(prefixes, return_index=True)
            first = first[np.isnan(norms[met])]  # each new prefix's first position
            self.work.output_rows += len(first) if head is not None else 0
            new = torch.as_tensor(first, device=states.device)
            for i in range(0, len(first), step):
                chunk = rows[new[i : i + step]]
                norms[prefixes[first[i : i + step]]] = torch.logsumexp((product(head, chunk) if head else chunk).float(), -1).cpu().numpy()
        return (logit.cpu().numpy() - norms[prefixes]).astype(np.float32)
