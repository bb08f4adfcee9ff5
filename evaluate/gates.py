"""Release gates: declared bounds on evaluation scores and on their regression since the previous release.

A regression compares two runs of one model, usually on two releases. What the runs do not share is said
(`differences`): another release, other languages, methods or items are warned of, and where they share
nothing to compare the gate refuses. An accuracy with item-level outcomes is compared on the items both
runs hold (pair ids; M2C test ids), each side's value recomputed there, with that n; other scores are
compared whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from builder.errors import BuilderError
from builder.paths import data_dir
from builder.records import Record
from evaluate.methods import ALL, Score
from evaluate.results import Results

SELECTORS = ("method", "variant", "metric", "lang", "negative_type")
BOUNDS = ("min", "max", "max_drop")


class GateError(BuilderError, ValueError):
    pass


class Rule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    method: list[str] | None = None
    variant: list[str] | None = None
    metric: list[str] | None = None
    lang: list[str] | None = None
    negative_type: list[str] | None = None
    min: float | None = None
    max: float | None = None
    max_drop: float | None = None
    line: int = 0

    @field_validator(*SELECTORS, mode="before")
    @classmethod
    def _any(cls, v):
        if v is None or v == "*":
            return None
        return [str(x) for x in v] if isinstance(v, list) else [str(v)]

    def matches(self, score: Score) -> bool:
        return all(getattr(self, f) is None or str(getattr(score, f)) in getattr(self, f) for f in SELECTORS)

    @property
    def specificity(self) -> int:
        return sum(getattr(self, f) is not None for f in SELECTORS)


def load_rules(path: Path | None = None) -> list[Rule]:
    """Rules of a gates file; errors name the file, the line and the field."""
    path = Path(path) if path else data_dir() / "gates.yaml"
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise GateError(f"{path}: {exc}") from exc
    except OSError as exc:
        raise GateError(f"{path}: {exc.strerror}") from exc
    node = next((v for k, v in root.value if k.value == "rules"), None) if isinstance(root, yaml.MappingNode) else None
    if not isinstance(node, yaml.SequenceNode):
        raise GateError(f"{path}: expected a top-level 'rules:' list")
    rules = []
    for i, item in enumerate(node.value):
        line = item.start_mark.line + 1
        data = yaml.safe_load(yaml.serialize(item))
        if not isinstance(data, dict):
            raise GateError(f"{path}:{line}: rule {i + 1} is not a mapping")
        try:
            rule = Rule(**data, line=line)
        except (ValidationError, TypeError) as exc:
            detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()) if isinstance(exc, ValidationError) else str(exc)
            raise GateError(f"{path}:{line}: rule {i + 1}: {detail}") from exc
        if all(getattr(rule, b) is None for b in BOUNDS):
            raise GateError(f"{path}:{line}: rule {i + 1} sets none of {', '.join(BOUNDS)}")
        rules.append(rule)
    return rules


class Check(BaseModel):
    method: str
    variant: str
    metric: str
    lang: str
    negative_type: str
    value: float
    n: int
    min: float | None
    max: float | None
    previous: float | None  # on the shared items where `n_shared` is set, else the previous run's whole value
    regression: float | None
    max_drop: float | None
    failures: list[str]
    n_shared: int | None = None  # items both runs hold, the regression measured on them (None: whole values)
    shared_value: float | None = None  # this run's value on those items

    @property
    def passed(self) -> bool:
        return not self.failures


LOWER_IS_BETTER = ("morph_error_share", "invalid_share")


def regression(metric: str, previous: float, current: float) -> float:
    """How much worse the current value is (positive = worse)."""
    if metric == "bias":
        return abs(current) - abs(previous)
    return current - previous if metric in LOWER_IS_BETTER else previous - current


class Difference(Record):
    """What two runs compared for regressions do not share, and whether the gate can still compare them."""

    what: Literal["release", "languages", "methods", "items"]
    this: str
    previous: str
    refused: bool


def _listed(values) -> str:
    return ", ".join(sorted(values)) or "none"


def item_outcomes(results: Results, method: str, variant: str) -> pd.DataFrame:
    """lang, negative_type, item, correct: a variant's right and wrong per item (M2C: per test), where the run keeps them."""
    if method == "m2c" and "m2c_items" in results.tables:
        t = results.tables["m2c_items"]
        t = t[t["variant"] == variant]
        return pd.DataFrame({"lang": t["lang"], "negative_type": ALL, "item": t["test_id"].astype(str),
                             "correct": t["correct"].astype(bool)})
    items = results.items
    sel = items[(items["method"] == method) & (items["variant"] == variant)
                & items["score_acceptable"].notna() & items["score_unacceptable"].notna()]
    return pd.DataFrame({"lang": sel["lang"], "negative_type": sel["negative_type"], "item": sel["pair_id"].astype(str),
                         "correct": sel["correct"].astype(bool)})


def differences(results: Results, previous: Results) -> list[Difference]:
    """Release, languages, methods and items the two runs do not share; refused where nothing of one kind is shared."""
    a, b = results.config, previous.config
    out = []
    if (a.dataset.source, a.dataset.version, a.dataset.manifest_sha256) != (b.dataset.source, b.dataset.version, b.dataset.manifest_sha256):
        out.append(Difference(what="release", this=f"{a.dataset.source} {a.dataset.version}",
                              previous=f"{b.dataset.source} {b.dataset.version}", refused=False))
    for what, mine, theirs in (("languages", set(a.langs), set(b.langs)), ("methods", set(a.methods), set(b.methods))):
        if mine != theirs:
            out.append(Difference(what=what, this=_listed(mine), previous=_listed(theirs), refused=not mine & theirs))
    ids = [set(zip(r.items["lang"], r.items["pair_id"].astype(str))) for r in (results, previous)]
    if ids[0] != ids[1]:
        shared = len(ids[0] & ids[1])
        out.append(Difference(what="items", this=f"{len(ids[0])} pairs, {len(ids[0]) - shared} not in the previous run",
                              previous=f"{len(ids[1])} pairs, {len(ids[1]) - shared} not in this run",
                              refused=not shared and bool(ids[0]) and bool(ids[1])))
    return out


def _on_shared(results: Results, previous: Results, s: Score) -> tuple[float, float, int] | None:
    """(previous value, this value, n) of an accuracy on the items both runs hold; None where a run keeps no items."""
    if s.metric != "accuracy":
        return None
    now, before = (item_outcomes(r, s.method, s.variant) for r in (results, previous))
    now, before = (f[(f["lang"] == s.lang) & ((f["negative_type"] == s.negative_type) if s.negative_type != ALL else True)]
                   for f in (now, before))
    if now.empty or before.empty:
        return None
    both = now.merge(before, on=["lang", "item"], suffixes=("", "_before"))
    if both.empty:
        return None
    return float(both["correct_before"].mean()), float(both["correct"].mean()), len(both)


def check(results: Results, rules: list[Rule], previous: Results | None = None) -> list[Check]:
    if previous is not None:
        a, b = results.config.model, previous.config.model
        if (a.weights_sha256 or a.revision or a.name) != (b.weights_sha256 or b.revision or b.name):
            raise GateError(f"previous results are of another model ({b.name}, {b.weights_sha256 or b.revision}); "
                            f"regression is only meaningful for the same model ({a.name}, {a.weights_sha256 or a.revision})")
        refused = [d for d in differences(results, previous) if d.refused]
        if refused:
            raise GateError("previous results share no " + " and no ".join(d.what for d in refused) + " with these ("
                            + "; ".join(f"{d.what}: {d.this} now, {d.previous} before" for d in refused) + ")")
    before = {s.key: s.value for s in previous.scores} if previous else {}
    out = []
    for s in results.scores:
        matching = sorted((r for r in rules if r.matches(s)), key=lambda r: r.specificity)
        if not matching:
            continue
        bound = {b: next((getattr(r, b) for r in reversed(matching) if getattr(r, b) is not None), None) for b in BOUNDS}
        prev, shared = before.get(s.key), None
        if prev is not None:
            shared = _on_shared(results, previous, s)
            if shared is not None:
                prev = shared[0]
        reg = regression(s.metric, prev, shared[1] if shared else s.value) if prev is not None else None
        failures = []
        if bound["min"] is not None and s.value < bound["min"]:
            failures.append(f"below {bound['min']}")
        if bound["max"] is not None and s.value > bound["max"]:
            failures.append(f"above {bound['max']}")
        if bound["max_drop"] is not None and reg is not None and reg > bound["max_drop"] + 1e-12:
            failures.append(f"regressed {reg:.3f} > {bound['max_drop']}")
        out.append(Check(method=s.method, variant=s.variant, metric=s.metric, lang=s.lang, negative_type=s.negative_type,
                         value=s.value, n=s.n, min=bound["min"], max=bound["max"], previous=prev, regression=reg,
                         max_drop=bound["max_drop"], failures=failures, n_shared=shared[2] if shared else None,
                         shared_value=shared[1] if shared else None))
    return out


Verdict = Literal["pass", "fail"]


def verdict(checks: list[Check]) -> Verdict:
    return "pass" if checks and all(c.passed for c in checks) else "fail"
