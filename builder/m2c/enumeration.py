"""The space of fills: feature combinations, the valid fills of each, and an index decoded back.

A *fill* chooses, for every placeholder variable, a lexeme and a feature for each of its *free*
dimensions (those some key leaves open or reads from it). Every key's feature bundle is a function of
those features alone, so the set of lexemes that can serve a variable depends only on the feature
combination. The space enumerates the combinations (never the lexeme product), counts the valid
fills of each, checks every rule and condition once per combination, and keeps cumulative counts,
so that a fill is addressed by an integer in [0, N) and decoded without listing the others.

Numbered copies of one placeholder form a family counted together: a plain product, tuples of
pairwise different lexemes (`distinct`, by inclusion-exclusion) or canonical ascending tuples
(`unordered`).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from builder.m2c.errors import TemplateError
from builder.m2c.language import MISSING, Grammar
from builder.m2c.nodes import Conditional, FromNext, FromWord, InlineUse, Mention, RuleUse, Var, feature, missing_form, modify

MAX_COMBINATIONS = 2_000_000


@dataclass(frozen=True, slots=True)
class Single:
    name: str
    count: int
    choices: tuple[int, ...]  # the lexemes that serve the variable


@dataclass(frozen=True, slots=True)
class Product:
    """Copies that may repeat a lexeme: the product of their choices."""

    members: tuple[str, ...]
    count: int
    sets: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class Distinct:
    """Copies that never hold the same lexeme twice."""

    members: tuple[str, ...]
    count: int
    sets: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class Ascending:
    """Unordered copies: canonical tuples x1 <= x2 <= ... (< where `strict`), with the running sums
    of the completions of each choice per position (`prefix`), which decoding bisects."""

    members: tuple[str, ...]
    count: int
    sets: tuple[tuple[int, ...], ...]
    prefix: tuple[tuple[int, ...], ...]
    strict: tuple[bool, ...]


Group = Single | Product | Distinct | Ascending


@dataclass(frozen=True, slots=True)
class Combo:
    """One feature combination: its families' valid fills and what the features alone decide."""

    features: tuple[str, ...]
    groups: tuple[Group, ...]
    weight: int
    bundles: tuple[tuple[str, ...], ...]  # per mention
    values: dict[int, str]  # key id -> rule or inline value


@dataclass(frozen=True)
class Space:
    combos: tuple[Combo, ...]
    cumulative: tuple[int, ...]
    total: int

    def decode(self, index: int) -> tuple[Combo, dict[str, int]]:
        """The combination of fill `index` and the lexeme each variable takes."""
        c = bisect.bisect_right(self.cumulative, index)
        combo = self.combos[c]
        r = index - (self.cumulative[c - 1] if c else 0)
        choice: dict[str, int] = {}
        for group in reversed(combo.groups):
            r, g = divmod(r, group.count)
            kind = group.__class__  # by type identity, not `match`: this loop is on the hot path of rendering
            if kind is Single:
                choice[group.name] = group.choices[g]
            elif kind is Product:
                for name, s in zip(reversed(group.members), reversed(group.sets)):
                    g, k = divmod(g, len(s))
                    choice[name] = s[k]
            elif kind is Distinct:
                choice.update(zip(group.members, _decode_distinct(group.sets, g)))
            else:  # Ascending
                choice.update(zip(group.members, _decode_ascending(group, g)))
        return combo, choice


def enumerate_space(*, vars: Mapping[str, Var], mentions: tuple[Mention, ...], slots: tuple[tuple[str, str], ...],
                    families: Mapping[str, tuple[str, ...]], options: Mapping[str, tuple[bool, bool]],
                    inlines: Mapping[int, InlineUse], rules: Mapping[int, RuleUse], skip_missing: bool,
                    lang: Grammar, template: str | None, optional: frozenset[int] = frozenset()) -> Space:
    """Every feature combination of the free slots that has valid fills; `options` per family root:
    (distinct, unordered). The forms of `optional` mentions do not decide which lexemes serve."""
    domains = [vars[v].pool.domains[d] for v, d in slots]
    n_combos = math.prod(len(d) for d in domains)
    if n_combos > MAX_COMBINATIONS:
        raise TemplateError(f"{n_combos} feature combinations (over {len(slots)} free dimensions): fix more features",
                            template=template)

    def first(name: str) -> int:
        return min(vars[name].mentions, default=len(mentions))

    order = sorted(families.items(), key=lambda kv: min(first(v) for v in kv[1]))
    memo: dict[tuple, tuple[int, ...]] = {}
    combos: list[Combo] = []
    cumulative: list[int] = []
    total = 0
    for features in itertools.product(*domains):
        bundles = tuple(tuple(feature(s, features) for s in m.spec) for m in mentions)
        groups = []
        weight = 1
        for root, members in order:
            sets = []
            for name in members:
                var = vars[name]
                key = (root, tuple(bundles[m] for m in var.mentions if m not in optional))
                if key not in memo:
                    need = key[1]
                    memo[key] = tuple(i for i, t in enumerate(var.pool.tables) if all(b in t for b in need))
                sets.append(memo[key])
            group = _group(members, tuple(sets), features, vars, *options.get(root, (True, False)))
            weight *= group.count
            groups.append(group)
            if not weight:
                break
        if not weight:
            continue
        values = _combo_values(features, vars, mentions, inlines, rules, skip_missing, lang, template)
        if values is None:
            continue
        combos.append(Combo(features, tuple(groups), weight, bundles, values))
        total += weight
        cumulative.append(total)
    return Space(tuple(combos), tuple(cumulative), total)


def choices(combo: Combo, var: str) -> tuple[int, ...]:
    """The lexemes that can serve a variable in a combination."""
    for group in combo.groups:
        if isinstance(group, Single):
            if group.name == var:
                return group.choices
        elif var in group.members:
            return group.sets[group.members.index(var)]
    return ()


def _group(members: tuple[str, ...], sets: tuple[tuple[int, ...], ...], features: tuple[str, ...],
           vars: Mapping[str, Var], distinct: bool, unordered: bool) -> Group:
    if len(members) == 1:
        return Single(members[0], len(sets[0]), sets[0])
    if unordered:
        order = [tuple(features[i] for _, i in sorted(vars[m].slots)) for m in members]
        strict = tuple(distinct or order[i] > order[i + 1] for i in range(len(members) - 1))
        return _ascending(members, sets, strict)
    if not distinct:
        return Product(members, math.prod(len(s) for s in sets), sets)
    return Distinct(members, _count_distinct([frozenset(s) for s in sets]), sets)


def _combo_values(features: tuple[str, ...], vars: Mapping[str, Var], mentions: tuple[Mention, ...],
                  inlines: Mapping[int, InlineUse], rules: Mapping[int, RuleUse], skip_missing: bool,
                  lang: Grammar, template: str | None) -> dict[int, str] | None:
    """Rule, inline-rule values decided by features alone; None drops the combination (skip_missing)."""
    values: dict[int, str] = {}
    for kid, inline in inlines.items():
        for value, conds in inline.alts:
            if all(features[i] == f for i, f in conds):
                values[kid] = modify(value, inline.mods)
                break
        else:
            if skip_missing:
                return None
            have = ".".join(features[i] for _, i in vars[inline.var].slots)
            raise TemplateError(f"inline rule has no value for {inline.var} with {have}", inline.where, template)
    for kid, use in rules.items():
        feats = {}
        for dim, spec in use.spec:
            if isinstance(spec, FromWord | FromNext):
                continue
            f = feature(spec, features)
            if f is None:
                if skip_missing:
                    return None
                raise TemplateError(f"rule {use.rule.name}: no condition holds and there is no default for {dim}",
                                    use.where, template)
            feats[dim] = f
        if use.deferred:
            continue
        value = use.rule.lookup(feats)
        if value is MISSING:
            if skip_missing:
                return None
            raise missing_form(use, feats, lang, template)
        values[kid] = modify(value, use.mods)
    for m in mentions:
        for spec in m.spec:
            if isinstance(spec, Conditional) and feature(spec, features) is None:
                if skip_missing:
                    return None
                raise TemplateError(f"placeholder {m.var}: no condition holds and there is no default", m.where, template)
    return values


# -- duplicate families ------------------------------------------------------------------------------


def _partitions(items: list[int]) -> Iterator[list[list[int]]]:
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        yield [[first], *part]
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1 :]]


def _count_distinct(sets: list[frozenset]) -> int:
    """Tuples (x1 in S1, ..., xk in Sk) with pairwise different x: inclusion-exclusion over partitions."""
    if len(sets) == 2:
        return len(sets[0]) * len(sets[1]) - len(sets[0] & sets[1])
    total = 0
    for part in _partitions(list(range(len(sets)))):
        term = 1
        for block in part:
            term *= len(frozenset.intersection(*(sets[i] for i in block))) * (-1) ** (len(block) - 1) * math.factorial(len(block) - 1)
            if not term:
                break
        total += term
    return total


def _decode_distinct(sets: tuple[tuple[int, ...], ...], r: int) -> list[int]:
    chosen: list[int] = []
    remaining = [frozenset(s) for s in sets]
    for pos in range(len(sets)):
        rest = remaining[pos + 1 :]
        for x in sets[pos]:
            if x in chosen:
                continue
            c = _count_distinct([s - {x} for s in rest]) if rest else 1
            if r < c:
                chosen.append(x)
                remaining = [s - {x} for s in remaining]
                break
            r -= c
    return chosen


def _ascending(members: tuple[str, ...], sets: tuple[tuple[int, ...], ...], strict: tuple[bool, ...]) -> Ascending:
    k = len(sets)
    counts: list[tuple[int, ...]] = [()] * k
    counts[k - 1] = (1,) * len(sets[k - 1])
    for p in range(k - 2, -1, -1):
        nxt, nxt_counts = sets[p + 1], counts[p + 1]
        suffix = list(itertools.accumulate(reversed(nxt_counts)))[::-1] + [0]
        counts[p] = tuple(suffix[bisect.bisect_right(nxt, x) if strict[p] else bisect.bisect_left(nxt, x)] for x in sets[p])
    prefix = tuple(tuple(itertools.accumulate(c)) for c in counts)
    return Ascending(members, prefix[0][-1] if prefix[0] else 0, sets, prefix, strict)


def _decode_ascending(group: Ascending, r: int) -> list[int]:
    sets, prefix, strict = group.sets, group.prefix, group.strict
    out: list[int] = []
    lo = 0
    for p in range(len(sets)):
        if p:
            lo = bisect.bisect_right(sets[p], out[-1]) if strict[p - 1] else bisect.bisect_left(sets[p], out[-1])
        base = prefix[p][lo - 1] if lo else 0
        j = bisect.bisect_right(prefix[p], base + r, lo)
        r -= (prefix[p][j - 1] if j else 0) - base
        out.append(sets[p][j])
    return out
