"""Neuro: is acceptability linearly decodable from the model's hidden states (XCOMPS §4.2, §5.2)?

Hidden states. Each unique sentence's last-token state (or mean over its tokens) of every layer,
embeddings included as layer 0, is streamed to disk as float16, one file per layer and model. Batches
are cut to a token budget on a CPU, and each batch runs through the model and then through its
randomly initialised control, so both models' states are written in one pass over the sentences; the
control is built once per run. The disk holds one language's states at a time.

Probes. A logistic-regression probe per language x negative type x layer separates acceptable from
unacceptable sentences, and nothing it reports was measured on data that shaped it:
- folds are grouped so that no test sentence's concept occurs in training: every sentence about one
  concept, and both sentences of a pair, stay in one fold (`probe_groups` "concept", the default;
  "pair" keeps only pairs together, "property" pairs and all pairs of a property);
- features are standardised with the mean and deviation of each fold's training rows;
- the layer is chosen by nested cross-validation: for each outer fold, the layer whose probes score
  the best mean F1 on the other folds (each held out in turn from the remaining ones); the reported
  F1 is that layer's probe, trained on the remaining folds, on the outer fold.
The same procedure runs on the control: a probe is only worth what it gains over it. The layer
curves (Figure 5) show every layer's plain cross-validated F1, a description, not a headline.

Solver. A probe set holds tens to thousands of sentences with hundreds to thousands of features, and
every layer x fold needs a probe, so the probes of a set are solved together with batched linear
algebra (on every core): each sample's standardised features in an orthonormal basis that holds the
training rows (a Cholesky basis of their Gram matrix when there are fewer rows than features, so at
most n + 1 parameters; the features themselves otherwise), then damped Newton steps to convergence.
On the features themselves, the standardised copy a fit would need is never made: the Newton steps'
products are taken with the raw features a block of rows at a time and standardised after, and fits are
solved in groups within half the set's layer (one by one, in practice), so a large set's working memory
is about one fit's p x p matrices.
The objective is scikit-learn's `LogisticRegression(C)` with sample weights (the weighted log-loss
plus |w|² / 2C, intercept unpenalised); samples are weighted by how many pairs use them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.model_selection import GroupKFold
from threadpoolctl import threadpool_limits

from builder.errors import InputError
from builder.files import write_text
from evaluate.methods import ALL, ITEM_COLUMNS, Context, EvalOptions, MethodOutput, Score, item_frame, register
from evaluate.models import LoadedModel, random_control
from evaluate.page import EXCLUDED_FROM_TYPOLOGY, Page, joined, plt, table
from evaluate.protocols import HiddenStates
from evaluate.scoring import ENCODE_CHUNK, length_batches, pad_batch

CHUNK_BYTES = 1 << 20  # working buffers of reads and of the solver's blocks of features stay this small
CPU_EXTRACT_BYTES = 64 << 20  # activations of one extraction batch on a CPU, where they share memory with everything
PROBE_BYTES = 64 << 20  # working tensors of the probes solved at once (per probe job)
NEWTON_STEPS = 100
NEWTON_TOL = 1e-9  # on the largest gradient entry, relative to the summed sample weights


def extraction_tokens(loaded: LoadedModel) -> int | None:
    """Padded tokens per extraction batch on a CPU, from an estimate of a decoder layer's activations per token
    (residual states of every layer kept for pooling, and the feed-forward block's four intermediate tensors).
    None on an accelerator, whose activations are not in host memory: batches are then the model's batch size."""
    if loaded.info.device != "cpu":
        return None
    cfg = loaded.model.config
    per_token = 4 * (2 * (cfg.num_hidden_layers + 1) * cfg.hidden_size + 4 * getattr(cfg, "intermediate_size", 4 * cfg.hidden_size))
    return max(1, CPU_EXTRACT_BYTES // per_token)


@dataclass
class HiddenStore:
    """Hidden states of `texts` on disk: `layer_XXX.f16` holds one float16 row per text, per layer."""

    directory: Path
    texts: list[str]
    n_layers: int
    hidden: int

    @property
    def row_of(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.texts)}

    def path(self, layer: int) -> Path:
        return self.directory / f"layer_{layer:03d}.f16"

    def read(self, layer: int, rows: np.ndarray) -> np.ndarray:
        """float32 copy of the given rows of one layer, read through small windows of the file."""
        out = np.empty((len(rows), self.hidden), dtype=np.float32)
        order = np.argsort(rows, kind="stable")
        step = max(1, CHUNK_BYTES // (self.hidden * 2))
        for i in range(0, len(rows), step):
            idx = order[i : i + step]
            lo, hi = int(rows[idx[0]]), int(rows[idx[-1]]) + 1
            window = np.memmap(self.path(layer), dtype=np.float16, mode="r", offset=lo * self.hidden * 2, shape=(hi - lo, self.hidden))
            out[idx] = window[rows[idx] - lo]
            del window  # unmapped at once, so resident pages stay bounded by one window
        return out


def _fingerprint(loaded: LoadedModel, scorer: HiddenStates, texts: list[str], pooling: str) -> str:
    h = hashlib.sha256(json.dumps([loaded.info.model_dump(), scorer.setup.model_dump(), pooling]).encode())
    for t in texts:
        h.update(t.encode("utf-8") + b"\0")
    return h.hexdigest()


def extract_hidden(models: Mapping[str, LoadedModel], scorer: HiddenStates, texts: list[str], directory: Path, *,
                   pooling: str = "last", progress=None) -> dict[str, HiddenStore]:
    """Every layer's sentence vectors of `texts` under each model (DIRECTORY/<tag>), in one pass over the batches;
    a finished store with the same inputs is reused. The models share one architecture (a model and its control)."""
    stores: dict[str, HiddenStore] = {}
    todo: dict[str, str] = {}
    for tag, loaded in models.items():
        marker = directory / tag / "store.json"
        fingerprint = _fingerprint(loaded, scorer, texts, pooling)
        meta = json.loads(marker.read_text()) if marker.is_file() else None
        if meta and meta["fingerprint"] == fingerprint:
            stores[tag] = HiddenStore(directory / tag, meta["texts"], meta["n_layers"], meta["hidden"])
        else:
            marker.unlink(missing_ok=True)
            (directory / tag).mkdir(parents=True, exist_ok=True)
            todo[tag] = fingerprint
    if not todo:
        return stores
    first = models[next(iter(todo))]
    prefix = scorer.prefix()
    ids = [np.asarray(prefix + s, dtype=np.int32) for i in range(0, len(texts), ENCODE_CHUNK)
           for s in scorer.encode(texts[i : i + ENCODE_CHUNK])]
    n_layers, hidden = first.model.config.num_hidden_layers + 1, first.model.config.hidden_size
    order: list[int] = []
    files = {tag: [open(directory / tag / f"layer_{layer:03d}.f16", "wb") for layer in range(n_layers)] for tag in todo}
    try:
        for batch in length_batches([len(s) for s in ids], first.info.batch_size, extraction_tokens(first)):
            seqs = [ids[i] for i in batch]
            for tag in todo:
                vecs = _pooled_states(models[tag], seqs, scorer.pad_id, len(prefix), pooling)
                for layer, f in enumerate(files[tag]):
                    f.write(vecs[layer].tobytes())
            order.extend(batch)
            if progress:
                progress(len(order), len(texts))
    finally:
        for handles in files.values():
            for f in handles:
                f.close()
    ordered = [texts[i] for i in order]
    for tag, fingerprint in todo.items():
        marker = directory / tag / "store.json"
        write_text(marker, json.dumps({"fingerprint": fingerprint, "n_layers": n_layers, "hidden": hidden, "pooling": pooling,
                                       "texts": ordered}, ensure_ascii=False))
        stores[tag] = HiddenStore(directory / tag, ordered, n_layers, hidden)
    return {tag: stores[tag] for tag in models}


def _pooled_states(loaded: LoadedModel, seqs: list, pad_id: int, skip: int, pooling: str) -> np.ndarray:
    """[layers, batch, hidden] float16: the last token's state, or the mean over the text's own tokens.

    The base model runs without its language-model head: logits (tokens x vocabulary) would be the
    largest activation of all and probes never read them.
    """
    ids, mask = pad_batch(seqs, pad_id)
    ids, mask = ids.to(loaded.device), mask.to(loaded.device)
    with torch.inference_mode():
        states = loaded.model.base_model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        if pooling == "last":
            rows, last = torch.arange(len(seqs), device=ids.device), mask.sum(1) - 1
            pooled = [h[rows, last] for h in states]
        else:
            own = mask.clone()
            own[:, :skip] = 0
            w = (own / own.sum(1, keepdim=True).clamp(min=1)).to(states[0].dtype)
            pooled = [torch.einsum("bth,bt->bh", h, w) for h in states]
    return torch.stack(pooled).to(torch.float16).cpu().numpy()


@dataclass
class ProbeSet:
    """The probe's samples for one language and negative type: unique (sentence, label) rows."""

    lang: str
    negative_type: str
    rows: np.ndarray  # row of each sample in the hidden store
    labels: np.ndarray  # 1 acceptable, 0 unacceptable
    weights: np.ndarray  # how many pair rows use the sample
    groups: np.ndarray  # samples of one group stay in one fold
    pair_index: pd.Index  # the pair rows (of `pairs`) this set covers
    pair_samples: np.ndarray  # [pairs, 2]: sample index of each pair's acceptable and unacceptable sentence


def probe_sets(pairs: pd.DataFrame, row_of: dict[str, int], group_by: str = "concept") -> list[ProbeSet]:
    """One set per language x negative type. Groups are the connected parts of: each pair's two sentences, and
    with "concept" every sentence about the same concept, with "property" every pair of the same property."""
    sets = []
    for (lang, neg), grp in pairs.groupby(["lang", "negative_type"], sort=True):
        sample_of: dict[tuple[str, int], int] = {}
        pair_samples = np.empty((len(grp), 2), dtype=np.int64)
        for i, (a, b) in enumerate(zip(grp["acceptable_sentence"], grp["unacceptable_sentence"])):
            pair_samples[i] = [sample_of.setdefault((a, 1), len(sample_of)), sample_of.setdefault((b, 0), len(sample_of))]
        samples = list(sample_of)
        parent = list(range(len(samples)))

        def find(x: int, parent: list[int] = parent) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        links = list(pair_samples)
        if group_by == "concept":
            first: dict[str, int] = {}
            for column, side in (("acceptable_concept", 0), ("unacceptable_concept", 1)):
                links += [(first.setdefault(c, s), s) for c, s in zip(grp[column], pair_samples[:, side])]
        elif group_by == "property":
            first = {}
            links += [(first.setdefault(p, s), s) for p, s in zip(grp["property_id"], pair_samples[:, 0])]
        for x, y in links:
            parent[find(x)] = find(y)
        sets.append(ProbeSet(
            lang=lang, negative_type=neg,
            rows=np.array([row_of[s] for s, _ in samples], dtype=np.int64),
            labels=np.array([lab for _, lab in samples], dtype=np.int64),
            weights=np.bincount(pair_samples.ravel(), minlength=len(samples)).astype(np.float64),
            groups=np.array([find(i) for i in range(len(samples))]),
            pair_index=grp.index, pair_samples=pair_samples,
        ))
    return sets


@dataclass(frozen=True)
class FoldPlan:
    """Which samples each fit trains on and is scored on: first the k outer fits (fold o held out), then for
    each outer fold o the inner fits (fold i != o held out from the folds other than o), k x (k - 1) of them."""

    fold: np.ndarray  # outer fold of each sample
    train: np.ndarray  # [fits, samples] bool
    held_out: np.ndarray  # [fits, samples] bool
    k: int

    def inner(self, outer: int) -> list[int]:
        """The indices of the fits that choose the layer for outer fold `outer`."""
        start = self.k + outer * (self.k - 1)
        return list(range(start, start + self.k - 1))


MIN_GROUPS = 3  # nested cross-validation: an outer fold held out, and at least two inner folds to choose the layer


def groups_short(ps: ProbeSet) -> int | None:
    """The number of sentence groups of a probe set too small for nested cross-validation, else None."""
    n_groups = len(np.unique(ps.groups))
    return n_groups if n_groups < MIN_GROUPS else None


def fold_plan(ps: ProbeSet, folds: int) -> FoldPlan:
    short = groups_short(ps)
    if short is not None:
        raise InputError(f"neuro {ps.lang}/{ps.negative_type}: {short} group(s) of sentences; nested cross-validation "
                         f"needs at least {MIN_GROUPS} (evaluate more pairs, or group folds by pair: --probe-groups pair)")
    k = min(folds, len(np.unique(ps.groups)))
    fold = np.empty(len(ps.labels), dtype=np.int64)
    for o, (_, test) in enumerate(GroupKFold(n_splits=k).split(np.zeros((len(fold), 1)), ps.labels, ps.groups)):
        fold[test] = o
    held = [fold == o for o in range(k)] + [fold == i for o in range(k) for i in range(k) if i != o]
    train = [fold != o for o in range(k)] + [(fold != i) & (fold != o) for o in range(k) for i in range(k) if i != o]
    return FoldPlan(fold, np.array(train), np.array(held), k)


def training_rows(train: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """([fits, m] indices of each fit's training rows, padded by repeating its first; [fits, m] which are real)."""
    m = int(train.sum(1).max())
    idx = np.zeros((len(train), m), dtype=np.int64)
    valid = np.zeros((len(train), m), dtype=bool)
    for f, rows in enumerate(train):
        at = np.flatnonzero(rows)
        idx[f], valid[f, : len(at)] = at[0], True
        idx[f, : len(at)] = at
    return torch.as_tensor(idx), torch.as_tensor(valid)


def coordinates(X: torch.Tensor, idx: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """[fits, n, m]: every sample's features standardised with each fit's training rows (`idx`, where `valid`), in
    the m < features coordinates of a Cholesky basis of the training rows, which keep every inner product with a
    training row, so that a linear probe on them is one on the features with the same penalty |w|². A column
    constant on the training rows is centred and left unscaled, as scikit-learn's StandardScaler leaves it. float32,
    like the float16 states they come from."""
    v = valid.to(X.dtype)
    count = v.sum(1, keepdim=True)
    rows = X[idx]  # [fits, m, p]
    mean = (v[..., None] * rows).sum(1) / count
    std = ((v[..., None] * (rows - mean[:, None]) ** 2).sum(1) / count).sqrt()
    std = torch.where(std > 0, std, torch.ones_like(std))
    Z = (X[None] - mean[:, None]) / std[:, None]  # [fits, n, p]
    Zt = Z.gather(1, idx[..., None].expand(-1, -1, Z.shape[-1])) * v[..., None]
    K = Z @ Zt.transpose(1, 2)  # [fits, n, m]: inner products with the training rows, in a Cholesky basis of theirs
    Ktt = K.gather(1, idx[..., None].expand(-1, -1, K.shape[-1])) * v[..., None]
    eye = torch.eye(Ktt.shape[-1], dtype=K.dtype)
    jitter = 1e-6 * Ktt.diagonal(dim1=-2, dim2=-1).amax(-1).clamp(min=1e-30)[:, None, None]  # a hair, for rank-deficient ones
    while True:
        L, info = torch.linalg.cholesky_ex(Ktt + jitter * eye)
        if not bool(info.any()):
            break
        jitter = torch.where(info[:, None, None] > 0, jitter * 100, jitter)
    return torch.linalg.solve_triangular(L, K.transpose(1, 2), upper=False).transpose(1, 2)


class Coordinates:
    """A design held whole, [..., n, d] plus the intercept's column, in float64: the Cholesky coordinates of sets with
    fewer training rows than features, which are small."""

    def __init__(self, phi: torch.Tensor) -> None:
        self.X, self.p = torch.cat([phi, torch.ones_like(phi[..., :1])], -1).to(torch.float64), phi.shape[-1]

    def grad_hess(self, r: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (self.X.mT @ r[..., None])[..., 0], self.X.mT @ (self.X * v[..., None])

    def apply(self, direction: torch.Tensor) -> torch.Tensor:
        return (self.X @ direction[..., None])[..., 0]


class StandardisedFeatures:
    """One layer's features [n, p] as the design of every fit, each standardised with its training rows' mean and
    deviation (unweighted, as StandardScaler; a constant column centred and left unscaled), plus the intercept's
    column: the regime of no fewer training rows than features. The standardised copy per fit ([fits, n, p], the
    largest tensor there would be) is never formed: products are taken with the raw features in float64 blocks of
    `CHUNK_BYTES`, over each fit's own training rows, and standardised after, as p-sized vectors and p x p matrices."""

    def __init__(self, X: np.ndarray, train: np.ndarray) -> None:
        n, p = X.shape
        self.X, self.n, self.p = torch.as_tensor(X), n, p
        self.step = max(1, CHUNK_BYTES // (8 * p))
        self.rows = [torch.as_tensor(np.flatnonzero(t)) for t in train]
        self.mean = torch.stack([sum(Xc.sum(0) for _, Xc in self._blocks(rows)) / len(rows) for rows in self.rows])
        var = torch.stack([sum(((Xc - mu) ** 2).sum(0) for _, Xc in self._blocks(rows)) / len(rows)
                           for rows, mu in zip(self.rows, self.mean)])
        self.std = torch.where(var > 0, var.sqrt(), torch.ones_like(var))

    def _blocks(self, rows: torch.Tensor):
        for i in range(0, len(rows), self.step):
            yield rows[i : i + self.step], self.X[rows[i : i + self.step]].to(torch.float64)

    def grad_hess(self, r: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.p
        g = torch.zeros(len(r), p + 1, dtype=torch.float64)
        H = torch.zeros(len(r), p + 1, p + 1, dtype=torch.float64)
        for f, (rows, mu, sd) in enumerate(zip(self.rows, self.mean, self.std)):
            S, xv, xr = torch.zeros(p, p, dtype=torch.float64), torch.zeros(p, dtype=torch.float64), torch.zeros(p, dtype=torch.float64)
            for at, Xc in self._blocks(rows):
                S.addmm_(Xc.T, Xc * v[f, at, None])
                xv += v[f, at] @ Xc
                xr += r[f, at] @ Xc
            vs, rs = v[f, rows].sum(), r[f, rows].sum()
            H[f, :p, :p] = (S - torch.outer(xv, mu) - torch.outer(mu, xv) + vs * torch.outer(mu, mu)) / torch.outer(sd, sd)
            H[f, :p, p] = H[f, p, :p] = (xv - vs * mu) / sd
            H[f, p, p] = vs
            g[f, :p], g[f, p] = (xr - rs * mu) / sd, rs
        return g, H

    def apply(self, direction: torch.Tensor) -> torch.Tensor:
        w = direction[:, : self.p] / self.std
        out = (direction[:, self.p] - (w * self.mean).sum(-1))[:, None].repeat(1, self.n)
        for at, Xc in self._blocks(torch.arange(self.n)):
            out[:, at] += w @ Xc.T
        return out


STEPS = 2.0 ** -torch.arange(0, 12, 1.5, dtype=torch.float64)  # 1, 0.35, 0.125, ...: the first that does not raise the loss


def logistic_decisions(design: Coordinates | StandardisedFeatures, labels: torch.Tensor, weights: torch.Tensor,
                       C: float) -> torch.Tensor:
    """[..., n] decision values of each problem's L2 logistic regression on its design (p features and an intercept),
    by damped Newton steps in float64 on all problems at once; labels [n], weights [..., n] (weight 0: a row that does
    not shape the fit, a held-out one, which still gets its decision value)."""
    s, y = weights.to(torch.float64), labels.to(torch.float64)
    d = design.p
    ridge = torch.cat([torch.full((d,), 1.0 / C, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)])
    theta = torch.zeros(*s.shape[:-1], d + 1, dtype=torch.float64)
    f = torch.zeros_like(s)

    def loss(f: torch.Tensor, th: torch.Tensor) -> torch.Tensor:
        return (s * (torch.nn.functional.softplus(f) - y * f)).sum(-1) + 0.5 * (ridge * th * th).sum(-1)

    current = loss(f, theta)
    tol = NEWTON_TOL * s.sum(-1).clamp(min=1.0)
    for _ in range(NEWTON_STEPS):
        prob = torch.sigmoid(f)
        g, H = design.grad_hess(s * (prob - y), s * prob * (1 - prob))
        grad = g + ridge * theta
        if bool((grad.abs().amax(-1) <= tol).all()):
            break
        direction = torch.cholesky_solve(grad[..., None], torch.linalg.cholesky(H + torch.diag(ridge + 1e-12)))[..., 0]
        moved = design.apply(direction)
        tried = torch.stack([loss(f - step * moved, theta - step * direction) for step in STEPS], -1)
        ok = tried <= current[..., None] * (1 + 1e-12)  # rounding near the optimum is no rise
        first = torch.where(ok.any(-1), ok.to(torch.int8).argmax(-1), len(STEPS))
        step = torch.cat([STEPS, torch.zeros(1, dtype=torch.float64)])[first]
        theta = theta - step[..., None] * direction
        f = f - step[..., None] * moved
        current = torch.minimum(current, tried.gather(-1, first.clamp(max=len(STEPS) - 1)[..., None])[..., 0])
    return f


def probe_decisions(layers: list[np.ndarray], train: np.ndarray, labels: np.ndarray, weights: np.ndarray,
                    C: float) -> np.ndarray:
    """[layers, fits, n] decision values of every sample under each layer's and fit's probe, trained on the fit's
    rows of `train` [fits, n]."""
    s, y = torch.as_tensor(train * weights), torch.as_tensor(labels)
    if train.sum(1).max() >= layers[0].shape[1]:  # no fewer training rows than features: the features themselves
        return np.stack([logistic_decisions(StandardisedFeatures(X, train), y, s, C).numpy() for X in layers])
    idx, valid = training_rows(train)
    phi = torch.stack([coordinates(torch.as_tensor(X), idx, valid) for X in layers])  # [layers, fits, n, m]
    return logistic_decisions(Coordinates(phi), y, s.expand(len(layers), -1, -1), C).numpy()


def weighted_f1(decision: np.ndarray, labels: np.ndarray, weights: np.ndarray, held_out: np.ndarray) -> np.ndarray:
    """F1 of `decision > 0` on each fit's held-out samples, weighted by pair use; 0 where it is undefined."""
    w = weights * held_out
    pred = decision > 0
    tp = (w * (pred & (labels == 1))).sum(-1)
    fp = (w * (pred & (labels == 0))).sum(-1)
    fn = (w * (~pred & (labels == 1))).sum(-1)
    denom = 2 * tp + fp + fn
    return np.where(denom > 0, 2 * tp / np.where(denom > 0, denom, 1), 0.0)


@dataclass
class ProbeResult:
    """One model's probes on one probe set: every layer's plain CV F1 and the nested estimate."""

    model: str
    ps: ProbeSet
    layer_f1: np.ndarray  # [layers, k]: each layer's F1 on each outer fold
    chosen: np.ndarray  # [k]: the layer the inner folds chose for each outer fold
    f1: np.ndarray  # [k]: the chosen layer's F1 on each outer fold
    decision: np.ndarray  # [samples]: held-out decision value at the layer chosen for the sample's fold

    @property
    def peak_layer(self) -> int:
        """The layer chosen most often (the lowest among equals)."""
        counts = Counter(self.chosen.tolist())
        return min(counts, key=lambda layer: (-counts[layer], layer))


def fit_bytes(n: int, features: int, train_rows: int) -> int:
    """One fit's working tensors at one layer: its Hessian and Cholesky factor and a few vectors over the samples on
    the features themselves; its coordinates, their float64 copy and their products in the Cholesky basis."""
    if train_rows >= features:
        return 8 * (3 * (features + 1) ** 2 + 12 * n)
    return 8 * n * (features + 6 * (train_rows + 1))


def probe(store: HiddenStore, ps: ProbeSet, plan: FoldPlan, C: float, model: str) -> ProbeResult:
    """Every layer's and fold's probe on one probe set, and the layer choice by nested cross-validation. Outer and
    inner fits are solved apart (their training rows differ in number), in groups of fits and of layers as large as
    `PROBE_BYTES` of working tensors hold, so that memory stays bounded however many samples a set has. Of each
    group's decision values only the F1s and the outer fits' held-out values are kept."""
    n, k = len(ps.labels), plan.k
    groups = []
    for start, end in ((0, k), (k, len(plan.train))):
        train_rows = int(plan.train[start:end].sum(1).max())
        per_fit = fit_bytes(n, store.hidden, train_rows)
        # On the features, each fit's products are taken one by one, so larger groups gain nothing: they stay
        # within half the set's layer.
        budget = PROBE_BYTES if train_rows < store.hidden else min(PROBE_BYTES, 2 * n * store.hidden)
        size = max(1, budget // per_fit)
        groups += [(np.arange(a, min(a + size, end)), budget // (per_fit * min(size, end - a) + 4 * n * store.hidden))
                   for a in range(start, end, size)]
    at_once = max(1, min(layers for _, layers in groups))  # layers read at once: their float32 rows and a group each
    f1 = np.empty((store.n_layers, len(plan.train)))
    outer = np.empty((store.n_layers, n))  # each sample's decision value under the outer fit that holds it out
    for lo in range(0, store.n_layers, at_once):
        layers = [store.read(layer, ps.rows) for layer in range(lo, min(lo + at_once, store.n_layers))]
        for fits, _ in groups:
            decision = probe_decisions(layers, plan.train[fits], ps.labels, ps.weights, C)  # [layers, fits, n]
            f1[lo : lo + len(layers), fits] = weighted_f1(decision, ps.labels, ps.weights, plan.held_out[fits])
            for j in np.flatnonzero(fits < k):
                held_out = plan.fold == fits[j]
                outer[lo : lo + len(layers), held_out] = decision[:, j, held_out]
    chosen = np.array([int(np.argmax(f1[:, plan.inner(o)].mean(1))) for o in range(k)])
    held = outer[chosen[plan.fold], np.arange(n)]
    return ProbeResult(model, ps, f1[:, :k], chosen, f1[chosen, np.arange(k)], held)


def probe_language(stores: dict[str, HiddenStore], pairs: pd.DataFrame, opts: EvalOptions,
                   progress=None) -> tuple[list[ProbeResult], list[dict]]:
    """Every (negative type, model) probe set of one language's pairs, `opts.probe_jobs` at a time, each on one core
    (a probe set's batched algebra is too small to gain from several); the models share the folds. A negative type
    with too few sentence groups for nested cross-validation is left out, with the reason, rather than failing the
    run: (results, the probe sets left out)."""
    row_of = {tag: store.row_of for tag, store in stores.items()}
    texts = next(iter(stores.values())).texts
    tasks, left_out = [], []
    for ps in probe_sets(pairs, row_of[next(iter(stores))], opts.probe_groups):
        short = groups_short(ps)
        if short is not None:
            left_out.append({"lang": ps.lang, "negative_type": ps.negative_type, "n_pairs": len(ps.pair_index),
                             "reason": f"{short} group(s) of sentences by {opts.probe_groups}; nested cross-validation "
                                       f"needs at least {MIN_GROUPS}"})
            continue
        plan = fold_plan(ps, opts.probe_folds)
        for tag, store in stores.items():
            rows = np.array([row_of[tag][texts[r]] for r in ps.rows], dtype=np.int64)
            tasks.append((store, ProbeSet(**{**ps.__dict__, "rows": rows}), plan, tag))
    if progress:
        progress(0, len(tasks))
    results = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1), ThreadPoolExecutor(opts.probe_jobs) as pool:
            for r in pool.map(lambda task: probe(*task[:3], opts.probe_C, task[3]), tasks):
                results.append(r)
                if progress:
                    progress(len(results), len(tasks))
    finally:
        torch.set_num_threads(threads)
    return results, left_out


def summarise(results: list[ProbeResult], pairs: pd.DataFrame, left_out: list[dict] | None = None) -> MethodOutput:
    curves = pd.DataFrame([{"lang": r.ps.lang, "negative_type": r.ps.negative_type, "model": r.model, "layer": layer,
                            "f1_mean": float(f.mean()), "f1_std": float(f.std()), "folds": len(f),
                            "n_pairs": len(r.ps.pair_index)} for r in results for layer, f in enumerate(r.layer_f1)])
    scores, frames = [], []
    for r in sorted(results, key=lambda r: (r.model, r.ps.lang, r.ps.negative_type)):
        scores.append(Score(method="neuro", variant=r.model, lang=r.ps.lang, negative_type=r.ps.negative_type, metric="f1",
                            value=float(r.f1.mean()), n=len(r.ps.pair_index),
                            extra={"peak_layer": r.peak_layer, "chosen_layers": r.chosen.tolist(), "f1_std": float(r.f1.std())}))
        sub = pairs.loc[r.ps.pair_index]
        frames.append(item_frame(sub, "neuro", {r.model: (r.decision[r.ps.pair_samples[:, 0]], r.decision[r.ps.pair_samples[:, 1]])}))
    for (tag, lang), grp in pd.DataFrame([s.model_dump() for s in scores], columns=list(Score.model_fields)).groupby(["variant", "lang"]):
        scores.append(Score(method="neuro", variant=tag, lang=lang, negative_type=ALL, metric="f1",
                            value=float(grp["value"].mean()), n=int(grp["n"].sum()),
                            extra={"peak_layer": float(np.mean([e["peak_layer"] for e in grp["extra"]]))}))
    items = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(ITEM_COLUMNS))
    skipped = pd.DataFrame(left_out or [], columns=["lang", "negative_type", "n_pairs", "reason"])
    return MethodOutput(items, scores, {"probes": curves, "probes_left_out": skipped})


def fig5_layers(probes: pd.DataFrame | None, page: Page) -> None:
    """Figure 5: layer-wise probe F1 per language (plain cross-validation of each layer), model against control."""
    if probes is None or probes.empty:
        page.omit("fig5_layers", "no neuro probes")
        return
    curves = probes.groupby(["lang", "model", "layer"], as_index=False)["f1_mean"].mean().rename(columns={"f1_mean": "value"})
    langs = page.lang_order(curves["lang"].unique())
    cols = min(len(langs), 4)
    nrows = -(-len(langs) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.6 * nrows), squeeze=False)
    for ax, lang in zip(axes.ravel(), langs):
        for model, style in (("probe", "-o"), ("control", "--x")):
            c = curves[(curves["lang"] == lang) & (curves["model"] == model)]
            ax.plot(c["layer"], c["value"], style, label=model, markersize=3)
        ax.axhline(0.5, color="red", linewidth=0.8, linestyle=":", label="chance")
        ax.set_title(lang)
        ax.set_ylim(0, 1)
        ax.set_xlabel("layer")
        ax.set_ylabel("F1")
    for ax in axes.ravel()[len(langs):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=7)
    page.save(fig, curves, "fig5_layers",
              "Probe F1 at every layer (x) per language (panel): the model's hidden states (solid) against those of its "
              "randomly initialised control (dashed), plain cross-validation of each layer, descriptive only. 0.5 is "
              "chance; where the two lines meet, the model's states hold nothing a random network's do not.")


def fig6_peak_layer(page: Page) -> None:
    """Figure 6: the peak probe layer averaged by typology, English left out; `langs` are those averaged."""
    sf = page.scores
    peaks = sf[(sf["method"] == "neuro") & (sf["variant"] == "probe") & (sf["negative_type"] != ALL)
               & (sf["lang"] != EXCLUDED_FROM_TYPOLOGY)].copy()
    if peaks.empty:
        page.omit("fig6_peak_layer", "no neuro probes outside English")
        return
    peaks["peak_layer"] = [e["peak_layer"] for e in peaks["extra"]]
    peaks["typology"] = peaks["lang"].map(page.typology(peaks["lang"].unique()))
    avg = peaks.groupby("typology", as_index=False).agg(value=("peak_layer", "mean"), langs=("lang", joined))
    avg = avg.set_index("typology").reindex(page.typologies(avg["typology"])).reset_index()
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(avg["typology"], avg["value"])
    ax.set_ylabel("mean peak layer")
    page.save(fig, avg, "fig6_peak_layer",
              "The layer where the probe's F1 peaks, averaged over each typology's languages (its data lists them): "
              "later layers mean the distinction is formed deeper in the model.")


class Neuro:
    name = "neuro"
    headline = ("probe", "f1")
    needs = (HiddenStates,)

    def run(self, ctx: Context, pairs: pd.DataFrame) -> MethodOutput:
        """Language by language, so the disk holds one language's hidden states at a time."""
        pooling, results, left_out = ctx.options.probe_pooling, [], []
        models = {"probe": ctx.hidden.loaded, "control": random_control(ctx.hidden.loaded, ctx.options.control_seed)}
        for lang, sub in pairs.groupby("lang", sort=True):
            texts = list(pd.unique(pd.concat([sub["acceptable_sentence"], sub["unacceptable_sentence"]])))
            where = ctx.work_dir / "hidden" / lang
            stores = extract_hidden(models, ctx.hidden, texts, where, pooling=pooling,
                                    progress=lambda d, t, lang=lang: ctx.progress(f"neuro {lang}: hidden states", d, t))
            done, short = probe_language(stores, sub, ctx.options,
                                         lambda d, t, lang=lang: ctx.progress(f"neuro {lang}: probes", d, t))
            results, left_out = results + done, left_out + short
            shutil.rmtree(where)
        return summarise(results, pairs, left_out)

    def report(self, page: Page) -> list[str]:
        fig5_layers(page.results.tables.get("probes"), page)
        fig6_peak_layer(page)
        sf = page.scores
        best = sf[(sf["method"] == self.name) & (sf["negative_type"] == ALL)]
        left_out = page.results.tables.get("probes_left_out")
        if best.empty and (left_out is None or left_out.empty):
            return []
        lines = ["## Neuro: probe F1 at the layer chosen by nested cross-validation, model against its randomly "
                 "initialised control", "",
                 "For each outer fold the layer is chosen on the other folds, and the F1 is measured on the outer fold "
                 "(never on the folds that chose it); the layer curves of Figure 5 are every layer's plain cross-validated "
                 "F1, descriptive only.", ""]
        if not best.empty:
            lines += [table(best.pivot(index="lang", columns="variant", values="value").reset_index()), ""]
        lines += [*page.figure("fig5_layers"), *page.figure("fig6_peak_layer")]
        if left_out is not None and not left_out.empty:
            lines += ["Not probed (too few sentence groups; `--probe-groups pair` groups folds by pair instead):", "",
                      table(left_out), ""]
        return lines


register(Neuro())
