"""The suite file the suite tests run (two configurations of the session's toy model), and what they read back from
a suite's results: an entry's summary, the score store's rows, two runs' results compared."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from evaluate.store import ScoreStore, stored_scores


def toy_suite(path: Path, toy_dir: Path, *, methods: str = "direct, meta", langs: str = "de, en", suite: str = "",
              body: str = "") -> Path:
    """`path`: the toy as it is and with EOS for BOS; `suite` adds lines (each ending in a newline) before `models`,
    `body` after the last entry's own (line 12 on: an option of toy-eos where indented as one, else more entries)."""
    path.write_text(f"""# two configurations of one model
methods: [{methods}]
langs: [{langs}]
{suite}models:
  - name: toy
    folder: {toy_dir}
    batch_size: 16
  - name: toy-eos
    folder: {toy_dir}
    bos: eos
    batch_size: 16
{body}""", encoding="utf-8")
    return path


def summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text(encoding="utf-8"))


def store_rows(path: Path) -> int:
    """The scores a store holds."""
    with ScoreStore.open(str(path)) as store, store.engine.connect() as conn:
        return len(conn.execute(stored_scores.select().with_only_columns(stored_scores.c.text)).all())


def same_results(a: Path, b: Path) -> None:
    """Two results folders agree: every decision the same, every score within 1e-4 nats."""
    x, y = pd.read_parquet(a / "results.parquet"), pd.read_parquet(b / "results.parquet")
    keys = ["pair_id", "lang", "method", "variant", "correct"]
    assert x[keys].equals(y[keys])
    for col in ("score_acceptable", "score_unacceptable"):
        assert np.allclose(x[col], y[col], rtol=0, atol=1e-4, equal_nan=True)
