"""Two results folders in one report: each method's headline per language in both, and the difference.

For what one run cannot hold: the same release under two settings, such as the meta prompts' `paper`
and `corrected` variants (`builder eval run --prompt-variant`), two models, or two BOS policies. The
settings that differ are listed first, so a difference reads as a difference of those settings; a
comparison across different releases or languages says so rather than pretending the rows match.
"""

from __future__ import annotations

import pandas as pd

from evaluate.methods import ALL
from evaluate.page import table, text
from evaluate.results import RunConfig

__all__ = ["SETTINGS", "comparison_section", "differing_settings"]

# What a reader needs to know differed between two runs, read from each run's configuration.
SETTINGS = {
    "model": lambda c: c.model.name,
    "weights sha256": lambda c: c.model.weights_sha256 or "—",
    "dataset": lambda c: f"{c.dataset.source} {c.dataset.version}",
    "meta prompts": lambda c: c.options.prompt_variant,
    "BOS policy": lambda c: c.scoring.bos_policy if c.scoring else "endpoint",
    "precision": lambda c: c.scoring.precision if c.scoring else "endpoint",
    "dtype": lambda c: c.model.dtype,
}


def differing_settings(a: RunConfig, b: RunConfig) -> list[tuple[str, str, str]]:
    """(setting, this run's value, the other's) for every setting in `SETTINGS` that differs."""
    return [(name, str(get(a)), str(get(b))) for name, get in SETTINGS.items() if get(a) != get(b)]


def comparison_section(a: RunConfig, head_a: pd.DataFrame, b: RunConfig, head_b: pd.DataFrame, other: str) -> list[str]:
    """Markdown lines: the settings that differ, then per method and language the headline over all negative types
    in this run, in `other`, and this run's minus the other's (methods and languages both runs hold)."""
    lines = [f"## Compared with {text(other)}", ""]
    settings = differing_settings(a, b)
    if settings:
        lines += [table(pd.DataFrame(settings, columns=["setting", "this run", "other run"])), ""]
    else:
        lines += ["*The two runs share every recorded setting.*", ""]
    key = ["method", "lang"]
    mine, theirs = (h[h["negative_type"] == ALL][[*key, "value"]] for h in (head_a, head_b))
    both = mine.merge(theirs, on=key, suffixes=("_this", "_other")).sort_values(key)
    if both.empty:
        return lines + ["*No method and language is in both runs.*", ""]
    both["difference"] = both["value_this"] - both["value_other"]
    lines += [table(both.rename(columns={"value_this": "this run", "value_other": "other run"})), ""]
    left_out = sorted(set(map(tuple, pd.concat([mine, theirs])[key].values)) - set(map(tuple, both[key].values)))
    if left_out:
        lines += [f"*In one run only: {text(', '.join(f'{m} {lang}' for m, lang in left_out))}.*", ""]
    return lines
