"""Estimated cost of a call from the price table in data/prices.yaml.

A price holds at the host that publishes it: the table lists models by host, and a call is priced
only when its endpoint's host lists the model. llama.cpp's server answers to any model name, so a
local server's calls are never priced as a hosted model's. Providers answer with dated snapshots of
the model asked for (`gpt-4o-mini-2024-07-18` for `gpt-4o-mini`); a snapshot not listed is priced as
its undated name. Any other call has an unknown cost (None), which reports count and show as
unknown rather than as zero.
"""

from __future__ import annotations

import re
from functools import lru_cache
from urllib.parse import urlsplit

import yaml

from builder.paths import data_dir

_SNAPSHOT = re.compile(r"-([0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{4})\Z")  # -2024-07-18, or the older -0613


@lru_cache(maxsize=1)
def _table() -> dict:
    return yaml.safe_load((data_dir() / "prices.yaml").read_text(encoding="utf-8"))


def _prices(model: str, endpoint: str | None) -> dict | None:
    """The price table's entry for a model at an endpoint (a base URL): its own name, or a snapshot's undated name."""
    host = urlsplit(endpoint).hostname if endpoint else None
    models = _table()["hosts"].get(host) or {}
    for name in (model, _SNAPSHOT.sub("", model)):
        if name in models:
            return models[name]
    return None


def cost_usd(model: str, tokens_in: int, tokens_out: int, *, endpoint: str | None, batch: bool = False) -> float | None:
    """The cost of a call to `endpoint` (None: replayed, no endpoint) in USD; None when no price is known there."""
    prices = _prices(model, endpoint)
    if prices is None:
        return None
    cost = (tokens_in * prices["input"] + tokens_out * prices["output"]) / 1_000_000
    return cost * (_table()["batch_discount"] if batch else 1.0)


def estimate_tokens(text: str) -> int:
    """About four characters a token for Latin text; a rough, stated approximation for dry runs."""
    return max(1, len(text) // 4)
