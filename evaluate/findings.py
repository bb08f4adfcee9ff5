"""What a model knows, in a few flagged lines: where its answers are constant, at chance, or no better than its control.

A number alone misleads: a self-translation consistency of 1.000 at accuracy 0.548 is a model that always
answers "A", a meta accuracy of exactly 0.500 in every language is one that always names the first
option, and a probe F1 equal to its random control's says the model's states hold nothing a random
network's do not. These are read from the results' items, each with the languages it holds for.
"""

from __future__ import annotations

from typing import Literal

import pandas as pd

from builder.records import Record
from evaluate.intervals import paired_change, wilson
from evaluate.methods import ALL
from evaluate.methods import registry as method_registry
from evaluate.page import chance
from evaluate.results import Results
from evaluate.selftranslate import acceptable_first

CONSTANT = 0.95  # the share of one answer from which answers count as constant
Flag = Literal["constant", "at chance", "below chance", "no better than the control", "above chance"]


class Finding(Record):
    method: str
    flag: Flag
    where: tuple[str, ...]  # languages (or translation directions and conditions)
    detail: str


def _meta_order(items: pd.DataFrame) -> list[Finding]:
    """Meta asks each pair with the acceptable option first and second: a model choosing by position is constant."""
    meta = items[(items["method"] == "meta") & items["variant"].isin(["acceptable_first", "acceptable_second"])]
    meta = meta[meta["score_acceptable"].notna() & meta["score_unacceptable"].notna()
                & (meta["score_acceptable"] != meta["score_unacceptable"])]  # a tie or an unreadable reply chose nothing
    first, second = [], []
    for lang, sub in meta.groupby("lang", sort=True):
        picks_first = sub["correct"].astype(bool) == (sub["variant"] == "acceptable_first")
        share = float(picks_first.mean())
        if share >= CONSTANT:
            first.append((lang, share))
        elif share <= 1 - CONSTANT:
            second.append((lang, 1 - share))
    return [Finding(method="meta", flag="constant", where=tuple(lang for lang, _ in found),
                    detail=f"always names the option listed {which} ({min(s for _, s in found):.0%} of answers or more), "
                           "whichever is right")
            for found, which in ((first, "first"), (second, "second")) if found]


def _selftranslate_letters(tables: dict[str, pd.DataFrame]) -> list[Finding]:
    items = tables.get("selftranslate_items")
    if items is None or items.empty:
        return []
    letters = [("A" if (d == "acceptable") == acceptable_first(pid) else "B") if d is not None and d == d else "invalid"
               for pid, d in zip(items["pair_id"], items["decision"])]
    found = []
    for (source, target, cond), sub in items.assign(letter=letters).groupby(["source", "target", "condition"], sort=True):
        shares = sub["letter"].value_counts(normalize=True)
        if shares.iloc[0] >= CONSTANT and len(sub) >= 5:
            where = source if cond == "original" else f"{source}→{target} {cond}"
            found.append((where, shares.index[0], float(shares.iloc[0])))
    return [Finding(method="selftranslate", flag="constant", where=tuple(w for w, x, _ in found if x == letter),
                    detail=f"answers “{letter}” to {min(s for _, x, s in found if x == letter):.0%} of the questions or "
                           "more: its consistency there measures the habit, not the knowledge")
            for letter in sorted({x for _, x, _ in found})]


def _m2c_answers(tables: dict[str, pd.DataFrame]) -> list[Finding]:
    items = tables.get("m2c_items")
    if items is None or items.empty:
        return []
    found = []
    for (lang, variant), sub in items.groupby(["lang", "variant"], sort=True):
        shares = sub["answer"].value_counts(normalize=True)
        if len(sub) >= 5 and len(shares) and shares.iloc[0] >= CONSTANT:
            found.append(f"{lang} {variant} (“{shares.index[0]}”)")
    return [Finding(method="m2c", flag="constant", where=tuple(found), detail="gives one answer to nearly every question")] if found else []


def _against_chance(results: Results) -> list[Finding]:
    known, out = method_registry(), []
    sf = results.score_frame()
    for method in results.config.methods:
        variant, metric = known[method].headline
        level = chance(method, metric)
        sel = sf[(sf["method"] == method) & (sf["variant"] == variant) & (sf["metric"] == metric) & (sf["negative_type"] == ALL)]
        if level is None or sel.empty:
            continue
        groups: dict[str, list[str]] = {"at chance": [], "below chance": [], "above chance": []}
        for r in sel.sort_values("lang").itertuples():
            low, high = wilson(r.value, r.n)
            groups["below chance" if high < level else "above chance" if low > level else "at chance"].append(r.lang)
        exactly = bool((sel["value"] == level).all())
        for flag, langs in groups.items():
            if langs:
                detail = (f"{metric} exactly {level} everywhere: its answers do not depend on the item" if exactly and flag == "at chance"
                          else f"the 95% interval of {metric} ({variant}) {'holds' if flag == 'at chance' else 'lies ' + flag.split()[0]} "
                               f"chance, {level}")
                out.append(Finding(method=method, flag=flag, where=tuple(langs), detail=detail))
    return out


def _against_control(items: pd.DataFrame) -> list[Finding]:
    """Neuro probes the model and its randomly initialised control on the same pairs: compared pair by pair."""
    neuro = items[items["method"] == "neuro"]
    worse = []
    for lang, sub in neuro.groupby("lang", sort=True):
        probe, control = (sub[sub["variant"] == v].set_index(["pair_id", "negative_type"])["correct"].astype(bool)
                          for v in ("probe", "control"))
        common = probe.index.intersection(control.index)
        change = paired_change(control[common], probe[common])
        if change is not None and not (change.significant and change.change > 0):
            worse.append(f"{lang} ({change.after:.2f} against {change.before:.2f}, n {change.n})")
    return [Finding(method="neuro", flag="no better than the control", where=tuple(worse),
                    detail="the probe decides its pairs no better than the same probe on a randomly initialised copy of "
                           "the model (paired bootstrap interval holds 0)")] if worse else []


def findings(results: Results) -> list[Finding]:
    """Every flag the results raise, constant answers first."""
    items, tables = results.items, results.tables
    return [*_meta_order(items), *_selftranslate_letters(tables), *_m2c_answers(tables), *_against_chance(results),
            *_against_control(items)]
