"""Release gates: declared bounds on evaluation scores and on their regression since the previous release."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from builder.errors import BuilderError
from builder.paths import data_dir
from evaluate.methods import Score
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
    min: float | None
    max: float | None
    previous: float | None
    regression: float | None
    max_drop: float | None
    failures: list[str]

    @property
    def passed(self) -> bool:
        return not self.failures


LOWER_IS_BETTER = ("morph_error_share", "invalid_share")


def regression(metric: str, previous: float, current: float) -> float:
    """How much worse the current value is (positive = worse)."""
    if metric == "bias":
        return abs(current) - abs(previous)
    return current - previous if metric in LOWER_IS_BETTER else previous - current


def check(results: Results, rules: list[Rule], previous: Results | None = None) -> list[Check]:
    if previous is not None:
        a, b = results.config.model, previous.config.model
        if (a.weights_sha256 or a.revision or a.name) != (b.weights_sha256 or b.revision or b.name):
            raise GateError(f"previous results are of another model ({b.name}, {b.weights_sha256 or b.revision}); "
                            f"regression is only meaningful for the same model ({a.name}, {a.weights_sha256 or a.revision})")
    before = {s.key: s.value for s in previous.scores} if previous else {}
    out = []
    for s in results.scores:
        matching = sorted((r for r in rules if r.matches(s)), key=lambda r: r.specificity)
        if not matching:
            continue
        bound = {b: next((getattr(r, b) for r in reversed(matching) if getattr(r, b) is not None), None) for b in BOUNDS}
        prev = before.get(s.key)
        reg = regression(s.metric, prev, s.value) if prev is not None else None
        failures = []
        if bound["min"] is not None and s.value < bound["min"]:
            failures.append(f"below {bound['min']}")
        if bound["max"] is not None and s.value > bound["max"]:
            failures.append(f"above {bound['max']}")
        if bound["max_drop"] is not None and reg is not None and reg > bound["max_drop"] + 1e-12:
            failures.append(f"regressed {reg:.3f} > {bound['max_drop']}")
        out.append(Check(method=s.method, variant=s.variant, metric=s.metric, lang=s.lang, negative_type=s.negative_type,
                         value=s.value, min=bound["min"], max=bound["max"], previous=prev, regression=reg,
                         max_drop=bound["max_drop"], failures=failures))
    return out


Verdict = Literal["pass", "fail"]


def verdict(checks: list[Check]) -> Verdict:
    return "pass" if checks and all(c.passed for c in checks) else "fail"
