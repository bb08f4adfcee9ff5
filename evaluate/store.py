"""A store of computed scores and greedy replies, shared by runs, releases and processes.

It stands behind the `TextScorer` and `TextGenerator` Protocols (`StoredScorer`, `StoredGenerator`), so
every backend (a local model, an endpoint) gets it and no method changes: a method asks for texts, the
wrapper looks every text up first and hands only the missing ones to the model, then stores what the
model computed. Evaluating release 1.1.0 after 1.0.0 scores only the sentences that changed.

A stored value is keyed by
- a configuration digest (`config_key`): the model's identity (weights sha256, GGUF sha256 or Hub
  commit; an endpoint's URL and served model), the scoring setup (BOS policy and token, how
  continuations are tokenized, precision, and for an endpoint what its probe found), dtype, device
  kind and the scorer's or generator's code version (`SCORER_VERSION`, `GENERATOR_VERSION`, raised
  when a change to the code changes what it computes);
- the exact text: (context, continuation) for a score, (prompt, max_new_tokens) for a greedy reply.
  Sampled replies (a temperature and a seed) are drawn from one random stream across a whole call, so
  one reply depends on every other prompt of the call: they are never stored, always generated.

The stored value is exactly what was computed, in whatever batch it was computed; in float32 on a CPU a
score does not depend on its batch (`evaluate.scoring`: attention in float64), so it equals a fresh
computation to the bit; in reduced precision or on a GPU, by rounding. Writes are `INSERT … ON CONFLICT DO NOTHING`, one transaction
per call, so two processes writing at once lose nothing; a run looks up before it computes, so it never
computes what another process has already stored.

The default store is a SQLite file under the user's cache (`default_path`); a team or a cluster gives a
PostgreSQL URL (`--store postgresql://USER@HOST/DB`, or `BUILDER_SCORE_STORE`), its password from
`PGPASSWORD` or `~/.pgpass` as for a workspace, and the engine is the workspace's (`engine_for`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
from sqlalchemy import Column, DateTime, Engine, LargeBinary, MetaData, String, Table, Text, inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DatabaseError

from builder.environments import cache_root
from builder.errors import BuilderError
from builder.workspace import store as db
from evaluate.models import ModelInfo
from evaluate.protocols import TextGenerator, TextScorer
from evaluate.scoring import ProgressFn, TokenScores

SCORER_VERSION = "2"  # raise when evaluate/scoring.py (or endpoint_scoring.py) computes a score differently
GENERATOR_VERSION = "1"  # raise when evaluate/backends.py decodes differently
ENV = "BUILDER_SCORE_STORE"
LOOKUP_CHUNK = 500  # keys per SELECT … IN (…): below every database's limit on bound parameters

metadata = MetaData()
stored_scores = Table(
    "stored_scores", metadata,
    Column("config", String(64), primary_key=True),  # config_key: model identity and scoring configuration
    Column("text", String(64), primary_key=True),  # text_key of (context, continuation)
    Column("logprobs", LargeBinary, nullable=False),  # float32, one per scored token of the continuation
    Column("offsets", LargeBinary, nullable=False),  # int32 starts, then int32 ends, in the continuation
    Column("created_at", DateTime(timezone=True), nullable=False),
)
stored_replies = Table(
    "stored_replies", metadata,
    Column("config", String(64), primary_key=True),
    Column("text", String(64), primary_key=True),  # text_key of (prompt, max_new_tokens)
    Column("reply", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)
store_configs = Table(  # what each config digest stands for, for a person reading the store
    "store_configs", metadata,
    Column("config", String(64), primary_key=True),
    Column("described", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)


class ScoreStoreError(BuilderError):
    """A score store that cannot be opened."""


def digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def text_key(*parts) -> str:
    return digest(list(parts))


def default_path() -> Path:
    return cache_root() / "scores.sqlite"


def store_url(given: str | None) -> str:
    """The store's database URL: a PostgreSQL URL (checked as a workspace's: no password in it), a SQLite file's
    path (or URL), or (nothing given) `BUILDER_SCORE_STORE`, else the default file under the user's cache."""
    given = given or os.environ.get(ENV) or str(default_path())
    if given.startswith("sqlite:///"):
        return given
    if "://" in given:
        try:
            return db.server_url(given)
        except db.WorkspaceError as exc:
            raise ScoreStoreError(f"--store: {exc}") from exc  # exc shows the URL without its password
    return f"sqlite:///{Path(given).expanduser().resolve()}"


def model_identity(info: ModelInfo) -> dict:
    """What makes two loaded models the same for scoring: their weights (never their folder's name) and how they
    run (dtype, device kind: cuda:0 and cuda:1 compute alike)."""
    kind = info.device.split(":")[0]
    if info.source in ("endpoint", "recording"):
        return {"source": info.source, "endpoint": info.device, "model": info.name}
    weights = {"weights_sha256": info.weights_sha256, "gguf_sha256": info.gguf_sha256}
    if info.source == "hub":
        weights = {"hub": info.name, "revision": info.revision}
    return {"source": info.source, **weights, "architecture": info.architecture, "dtype": info.dtype, "device": kind}


def said(counts: dict[str, dict[str, int]]) -> str:
    """Per-method counts (`Results.store`) in a few words, as a run ends: what was computed, what came from the store."""
    computed = sum(c.get("computed", 0) for c in counts.values())
    stored = sum(c.get("stored", 0) for c in counts.values())
    return f"{computed} texts computed, {stored} from the store"


@dataclass
class Tally:
    """Texts asked for since it was made: computed by the model (and stored), taken from the store, or computed and
    not storable (sampled replies)."""

    computed: int = 0
    stored: int = 0
    unstored: int = 0

    def since(self, before: Tally) -> dict[str, int]:
        return {k: getattr(self, k) - getattr(before, k) for k in ("computed", "stored", "unstored")}

    def copy(self) -> Tally:
        return Tally(self.computed, self.stored, self.unstored)


class ScoreStore:
    """Open with `ScoreStore.open(url)`; `url` as `store_url` takes it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def open(cls, given: str | None = None) -> ScoreStore:
        url = store_url(given)
        shown = make_url(url).render_as_string(hide_password=True)
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        try:
            engine = db.engine_for(url)
            folder = Path(url.removeprefix("sqlite:///")).parent if url.startswith("sqlite") else Path(".")
            with db.exclusive(engine, folder, f"score store {shown}"):  # two runs making it at once
                metadata.create_all(engine)
        except (DatabaseError, db.WorkspaceError) as exc:
            raise ScoreStoreError(f"score store {shown} cannot be opened: {getattr(exc, 'orig', None) or exc}") from exc
        return cls(engine)

    @classmethod
    def open_existing(cls, given: str | None = None) -> ScoreStore | None:
        """The store to read, without making it: None where it does not exist yet (it then holds nothing)."""
        url = store_url(given)
        if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
            return None
        engine = db.engine_for(url)
        if not inspect(engine).has_table(stored_scores.name):
            engine.dispose()
            return None
        return cls(engine)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> ScoreStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self, config: str, described: dict) -> None:
        with self.engine.begin() as conn:
            db.upsert_ignore(conn, store_configs, [{"config": config, "described": json.dumps(described, sort_keys=True),
                                                    "created_at": db.now()}])

    def _rows(self, table: Table, config: str, keys: Sequence[str], columns: Iterable) -> list:
        """The stored rows of `keys` under `config`, looked up in chunks."""
        out = []
        with self.engine.connect() as conn:
            for i in range(0, len(keys), LOOKUP_CHUNK):
                chunk = list(keys[i : i + LOOKUP_CHUNK])
                out += conn.execute(select(table.c.text, *columns).where(table.c.config == config,
                                                                         table.c.text.in_(chunk))).all()
        return out

    def get_scores(self, config: str, keys: Sequence[str]) -> dict[str, TokenScores]:
        found = {}
        for r in self._rows(stored_scores, config, keys, (stored_scores.c.logprobs, stored_scores.c.offsets)):
            offsets = np.frombuffer(r.offsets, dtype=np.int32).astype(np.int64).reshape(2, -1)
            found[r.text] = TokenScores(np.frombuffer(r.logprobs, dtype=np.float32).copy(), offsets[0], offsets[1])
        return found

    def put_scores(self, config: str, scores: dict[str, TokenScores]) -> int:
        ts = db.now()
        rows = [{"config": config, "text": k, "logprobs": np.ascontiguousarray(s.logprobs, dtype=np.float32).tobytes(),
                 "offsets": np.stack([s.starts, s.ends]).astype(np.int32).tobytes(), "created_at": ts}
                for k, s in scores.items()]
        with self.engine.begin() as conn:
            return db.upsert_ignore(conn, stored_scores, rows)

    def get_replies(self, config: str, keys: Sequence[str]) -> dict[str, str]:
        return {r.text: r.reply for r in self._rows(stored_replies, config, keys, (stored_replies.c.reply,))}

    def put_replies(self, config: str, replies: dict[str, str]) -> int:
        ts = db.now()
        with self.engine.begin() as conn:
            return db.upsert_ignore(conn, stored_replies, [{"config": config, "text": k, "reply": v, "created_at": ts}
                                                           for k, v in replies.items()])


def _offset(progress: ProgressFn | None, done: int, total: int) -> ProgressFn | None:
    """The inner model's progress over the missing texts, shown over all of them."""
    return None if progress is None else (lambda d, _t: progress(done + d, total))


class _Configured:
    """What a stored scorer or generator shares: its configuration's key, recorded in the store with what it stands
    for (`described`) on first use."""

    store: ScoreStore

    @property
    def described(self) -> dict:
        raise NotImplementedError

    @cached_property
    def config(self) -> str:
        self.store.describe(self.config_key, self.described)
        return self.config_key

    @property
    def config_key(self) -> str:
        return digest(self.described)


@dataclass
class StoredScorer(_Configured):
    """A `TextScorer` that takes what the store holds and has `inner` score the rest."""

    inner: TextScorer
    store: ScoreStore
    model: dict  # model_identity, or an endpoint's
    tally: Tally = field(default_factory=Tally)

    @property
    def setup(self):
        return self.inner.setup

    @cached_property
    def described(self) -> dict:
        return {"what": "score", "model": self.model, "setup": self.setup.model_dump(mode="json"), "version": SCORER_VERSION}

    def keys(self, requests: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
        return {r: text_key(*r) for r in dict.fromkeys(requests)}

    def score(self, requests: Sequence[tuple[str, str]], progress: ProgressFn | None = None) -> dict[tuple[str, str], TokenScores]:
        keys = self.keys(requests)
        found = self.store.get_scores(self.config, list(keys.values()))
        out = {r: found[k] for r, k in keys.items() if k in found}
        missing = [r for r in keys if r not in out]
        self.tally.stored += len(out)
        self.tally.computed += len(missing)
        if missing:
            computed = self.inner.score(missing, _offset(progress, len(out), len(keys)))
            self.store.put_scores(self.config, {keys[r]: computed[r] for r in missing})
            out.update(computed)
        elif progress:
            progress(len(out), len(keys))
        return out


@dataclass
class StoredGenerator(_Configured):
    """A `TextGenerator` whose greedy replies come from the store where it holds them; sampled ones are generated."""

    inner: TextGenerator
    store: ScoreStore
    model: dict
    prompt_format: str | None  # how a prompt reaches a local model (its chat template); None behind an endpoint
    tally: Tally = field(default_factory=Tally)

    @property
    def described(self) -> dict:
        return {"what": "greedy reply", "model": self.model, "prompt_format": self.prompt_format,
                "version": GENERATOR_VERSION}

    def generate(self, prompts, *, max_new_tokens, stage, lang=None, temperature=None, seed=None, progress=None):
        if temperature:
            self.tally.unstored += len(set(prompts))
            return self.inner.generate(prompts, max_new_tokens=max_new_tokens, stage=stage, lang=lang,
                                       temperature=temperature, seed=seed, progress=progress)
        keys = {p: text_key(p, max_new_tokens) for p in dict.fromkeys(prompts)}
        found = self.store.get_replies(self.config, list(keys.values()))
        out = {p: found[k] for p, k in keys.items() if k in found}
        missing = [p for p in keys if p not in out]
        self.tally.stored += len(out)
        self.tally.computed += len(missing)
        if missing:
            replies = self.inner.generate(missing, max_new_tokens=max_new_tokens, stage=stage, lang=lang,
                                          progress=_offset(progress, len(out), len(keys)))
            self.store.put_replies(self.config, {keys[p]: r for p, r in zip(missing, replies)})
            out.update(zip(missing, replies))
        elif progress:
            progress(len(out), len(keys))
        return [out[p] for p in prompts]
