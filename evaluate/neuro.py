"""Neuro: is acceptability linearly decodable from the model's hidden states (XCOMPS §4.2, §5.2)?

Each unique sentence's last-token state (or mean over its tokens) of every layer, embeddings
included as layer 0, is streamed to disk as float16, one file per layer, appended batch by batch,
one language at a time (the disk holds one language's states): memory holds one batch during
extraction (on a CPU, batches are cut to a token budget, since their activations share memory with
everything else) and, during probing, the rows of the probes running at once, never all layers.
The control model exists only while it extracts: it is rebuilt (same seed, same weights) per language.

A logistic-regression probe per language x negative type x layer separates acceptable from
unacceptable sentences, with k-fold cross-validation grouped so that both sentences of a pair stay
in one fold (an acceptable sentence shared by several negatives joins them into one group;
optionally all pairs of a property form one group). The same probe runs on a randomly initialised
copy of the model: a probe is only worth what it gains over that control.

Folds are fitted on the whole probe set with the held-out rows weighted zero, which is the same
objective as fitting on the training rows (scikit-learn averages by the weight sum) without copying
them. Features are standardised once per probe set (no labels involved).
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import json
import os
import shutil
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import GroupKFold
from threadpoolctl import threadpool_limits

from evaluate.methods import ALL, Context, EvalOptions, MethodOutput, Score, item_frame, register
from evaluate.models import LoadedModel, random_control
from evaluate.reporting import EXCLUDED_FROM_TYPOLOGY, Page, joined, plt, table
from evaluate.scoring import ENCODE_CHUNK, Scorer, length_batches, pad_batch

CHUNK_BYTES = 1 << 20  # working buffers of reads and standardisation stay this small
CPU_EXTRACT_BYTES = 8 << 20  # activations of one extraction batch on a CPU, where they share memory with everything


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


def _fingerprint(loaded: LoadedModel, scorer: Scorer, texts: list[str], pooling: str) -> str:
    h = hashlib.sha256(json.dumps([loaded.info.model_dump(), scorer.setup.model_dump(), pooling]).encode())
    for t in texts:
        h.update(t.encode("utf-8") + b"\0")
    return h.hexdigest()


def extract_hidden(loaded: LoadedModel, scorer: Scorer, texts: list[str], directory: Path, *, pooling: str = "last",
                   progress=None) -> HiddenStore:
    """Write every layer's sentence vectors for `texts`; a finished store with the same inputs is reused."""
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / "store.json"
    fingerprint = _fingerprint(loaded, scorer, texts, pooling)
    if marker.is_file():
        meta = json.loads(marker.read_text())
        if meta["fingerprint"] == fingerprint:
            return HiddenStore(directory, meta["texts"], meta["n_layers"], meta["hidden"])
        marker.unlink()
    prefix = scorer.prefix()
    ids = [np.asarray(prefix + s, dtype=np.int32) for i in range(0, len(texts), ENCODE_CHUNK)
           for s in scorer.encode(texts[i : i + ENCODE_CHUNK])]
    skip = len(prefix)
    n_layers, hidden = loaded.model.config.num_hidden_layers + 1, loaded.model.config.hidden_size
    order: list[int] = []
    files = [open(directory / f"layer_{layer:03d}.f16", "wb") for layer in range(n_layers)]
    try:
        for batch in length_batches([len(s) for s in ids], loaded.info.batch_size, extraction_tokens(loaded)):
            vecs = _pooled_states(loaded, [ids[i] for i in batch], scorer.pad_id, skip, pooling)
            for layer, f in enumerate(files):
                f.write(vecs[layer].tobytes())
            order.extend(batch)
            if progress:
                progress(len(order), len(texts))
    finally:
        for f in files:
            f.close()
    ordered = [texts[i] for i in order]
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps({"fingerprint": fingerprint, "n_layers": n_layers, "hidden": hidden, "pooling": pooling,
                               "texts": ordered}, ensure_ascii=False))
    os.replace(tmp, marker)
    return HiddenStore(directory, ordered, n_layers, hidden)


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


def probe_sets(pairs: pd.DataFrame, row_of: dict[str, int], group_by: str = "pair") -> list[ProbeSet]:
    sets = []
    for (lang, neg), grp in pairs.groupby(["lang", "negative_type"], sort=True):
        sample_of: dict[tuple[str, int], int] = {}
        pair_samples = np.empty((len(grp), 2), dtype=np.int64)
        for i, (a, b) in enumerate(zip(grp["acceptable_sentence"], grp["unacceptable_sentence"])):
            pair_samples[i] = [sample_of.setdefault((a, 1), len(sample_of)), sample_of.setdefault((b, 0), len(sample_of))]
        samples = list(sample_of)
        parent = list(range(len(samples)))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        links = list(pair_samples)
        if group_by == "property":
            first: dict[str, int] = {}
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


def standardise_(X: np.ndarray) -> None:
    """Zero mean, unit variance per column, in place and without a temporary the size of X."""
    mean = np.zeros(X.shape[1])
    sq = np.zeros(X.shape[1])
    step = max(1, CHUNK_BYTES // (X.shape[1] * 8))
    for i in range(0, len(X), step):
        chunk = X[i : i + step].astype(np.float64)
        mean += chunk.sum(0)
        sq += (chunk * chunk).sum(0)
    mean /= len(X)
    std = np.sqrt(np.maximum(sq / len(X) - mean * mean, 0.0)) + 1e-6
    for i in range(0, len(X), step):
        X[i : i + step] -= mean.astype(X.dtype)
        X[i : i + step] /= std.astype(X.dtype)


def fit_probe(X: np.ndarray, ps: ProbeSet, *, folds: int, C: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-fold F1 (weighted by pair use) and each sample's held-out decision value. Standardises X in place."""
    n_groups = len(np.unique(ps.groups))
    if n_groups < 2:
        raise ValueError(f"neuro {ps.lang}/{ps.negative_type}: {n_groups} group(s); cross-validation needs at least 2")
    standardise_(X)
    f1s, decision = [], np.zeros(len(ps.labels))
    for _, test in GroupKFold(n_splits=min(folds, n_groups)).split(X, ps.labels, ps.groups):
        w = ps.weights.copy()
        w[test] = 0.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf = LogisticRegression(C=C, max_iter=500).fit(X, ps.labels, sample_weight=w)
        d = X @ clf.coef_[0].astype(X.dtype) + clf.intercept_[0]
        decision[test] = d[test]
        f1s.append(f1_score(ps.labels[test], d[test] > 0, sample_weight=ps.weights[test], zero_division=0.0))
    return np.array(f1s), decision


@dataclass
class ProbeResult:
    model: str
    ps: ProbeSet
    layer: int
    f1: np.ndarray
    decision: np.ndarray


def probe_all(stores: dict[str, HiddenStore], pairs: pd.DataFrame, opts: EvalOptions, progress=None) -> list[ProbeResult]:
    """Every (model, language x negative type, layer) probe, `opts.probe_jobs` at a time."""
    tasks = []
    for tag, store in stores.items():
        for ps in probe_sets(pairs, store.row_of, opts.probe_groups):
            tasks += [(tag, store, ps, layer) for layer in range(store.n_layers)]

    def run(task) -> ProbeResult:
        tag, store, ps, layer = task
        f1, decision = fit_probe(store.read(layer, ps.rows), ps, folds=opts.probe_folds, C=opts.probe_C)
        return ProbeResult(tag, ps, layer, f1, decision)

    results = []
    if progress:
        progress(0, len(tasks))
    with threadpool_limits(max(1, (os.cpu_count() or 1) // opts.probe_jobs)), ThreadPoolExecutor(opts.probe_jobs) as pool:
        for r in pool.map(run, tasks):
            results.append(r)
            if progress:
                progress(len(results), len(tasks))
    return results


def summarise(results: list[ProbeResult], pairs: pd.DataFrame) -> MethodOutput:
    curves = pd.DataFrame([{"lang": r.ps.lang, "negative_type": r.ps.negative_type, "model": r.model, "layer": r.layer,
                            "f1_mean": float(r.f1.mean()), "f1_std": float(r.f1.std()), "folds": len(r.f1),
                            "n_pairs": len(r.ps.pair_index)} for r in results])
    scores, frames = [], []
    best: dict[tuple[str, str, str], ProbeResult] = {}
    for r in results:
        k = (r.model, r.ps.lang, r.ps.negative_type)
        if k not in best or r.f1.mean() > best[k].f1.mean():
            best[k] = r
    for (tag, lang, neg), r in sorted(best.items()):
        scores.append(Score(method="neuro", variant=tag, lang=lang, negative_type=neg, metric="f1", value=float(r.f1.mean()),
                            n=len(r.ps.pair_index), extra={"peak_layer": r.layer, "f1_std": float(r.f1.std())}))
        sub = pairs.loc[r.ps.pair_index]
        frames.append(item_frame(sub, "neuro", {tag: (r.decision[r.ps.pair_samples[:, 0]], r.decision[r.ps.pair_samples[:, 1]])}))
    for (tag, lang), grp in pd.DataFrame([s.model_dump() for s in scores]).groupby(["variant", "lang"]):
        scores.append(Score(method="neuro", variant=tag, lang=lang, negative_type=ALL, metric="f1",
                            value=float(grp["value"].mean()), n=int(grp["n"].sum()),
                            extra={"peak_layer": float(np.mean([e["peak_layer"] for e in grp["extra"]]))}))
    return MethodOutput(pd.concat(frames, ignore_index=True), scores, {"probes": curves})


def fig5_layers(probes: pd.DataFrame | None, page: Page) -> None:
    """Figure 5: layer-wise probe F1 per language, model against control."""
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
        ax.set_title(lang)
        ax.set_ylim(0, 1)
        ax.set_xlabel("layer")
        ax.set_ylabel("F1")
    for ax in axes.ravel()[len(langs):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=7)
    page.save(fig, curves, "fig5_layers")


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
    page.save(fig, avg, "fig6_peak_layer")


class Neuro:
    name = "neuro"
    headline = ("probe", "f1")

    def run(self, ctx: Context, pairs: pd.DataFrame) -> MethodOutput:
        """Language by language, so the disk holds one language's hidden states at a time."""
        pooling, results = ctx.options.probe_pooling, []
        for lang, sub in pairs.groupby("lang", sort=True):
            texts = list(pd.unique(pd.concat([sub["acceptable_sentence"], sub["unacceptable_sentence"]])))
            where = ctx.work_dir / "hidden" / lang
            stores = {"probe": extract_hidden(ctx.loaded, ctx.scorer, texts, where / "model", pooling=pooling,
                                              progress=lambda d, t, lang=lang: ctx.progress(f"neuro {lang}: hidden states", d, t))}
            control = random_control(ctx.loaded, ctx.options.control_seed)
            stores["control"] = extract_hidden(control, ctx.scorer, texts, where / "control", pooling=pooling,
                                               progress=lambda d, t, lang=lang: ctx.progress(f"neuro {lang}: control states", d, t))
            del control  # probes need its states, not its weights
            _release_memory()
            results += probe_all(stores, sub, ctx.options, lambda d, t, lang=lang: ctx.progress(f"neuro {lang}: probes", d, t))
            shutil.rmtree(where)
        return summarise(results, pairs)

    def report(self, page: Page) -> list[str]:
        fig5_layers(page.results.tables.get("probes"), page)
        fig6_peak_layer(page)
        sf = page.scores
        best = sf[(sf["method"] == self.name) & (sf["negative_type"] == ALL)]
        if best.empty:
            return []
        return ["## Neuro: best layer's F1, model against its randomly initialised control", "",
                table(best.pivot(index="lang", columns="variant", values="value").reset_index()), ""]


try:
    _LIBC = ctypes.CDLL("libc.so.6")
except OSError:  # not glibc (macOS, Windows, musl): nothing to trim
    _LIBC = None


def _release_memory() -> None:
    """Give freed memory back before probing: the control's weights and extraction's buffers would otherwise
    stay resident in the C allocator's heap (glibc keeps freed pages unless asked to trim them)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


register(Neuro())
