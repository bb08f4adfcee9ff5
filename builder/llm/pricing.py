"""Estimated cost of a call from the price table in data/prices.yaml.

Providers answer with dated snapshots of the model asked for (`gpt-4o-mini-2024-07-18` for
`gpt-4o-mini`); a snapshot not listed is priced as its undated name. A model that is in neither form
has an unknown cost (None), which reports count and show as unknown rather than as zero.
"""

from __future__ import annotations

import re
from functools import lru_cache

import yaml

from builder.paths import data_dir

_SNAPSHOT = re.compile(r"-([0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{4})\Z")  # -2024-07-18, or the older -0613


@lru_cache(maxsize=1)
def _table() -> dict:
    return yaml.safe_load((data_dir() / "prices.yaml").read_text(encoding="utf-8"))


def _entry(model: str) -> str | None:
    """The price table's entry for a model: its own name, or the undated name of a snapshot."""
    models = _table()["models"]
    for name in (model, _SNAPSHOT.sub("", model)):
        if name in models:
            return name
    return None


def cost_usd(model: str, tokens_in: int, tokens_out: int, *, batch: bool = False) -> float | None:
    name = _entry(model)
    if name is None:
        return None
    prices = _table()["models"][name]
    cost = (tokens_in * prices["input"] + tokens_out * prices["output"]) / 1_000_000
    return cost * (_table()["batch_discount"] if batch else 1.0)


def estimate_tokens(text: str) -> int:
    """About four characters a token for Latin text; a rough, stated approximation for dry runs."""
    return max(1, len(text) // 4)
