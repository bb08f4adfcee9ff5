"""The template engine: compile once, then count, sample and render fills lazily.

A *fill* chooses, for every placeholder variable, a lexeme and a feature for each of its *free*
dimensions (those some key leaves open or reads from it). Every key's feature bundle is a function of
those features alone, so the set of lexemes that can serve a variable depends only on the feature
combination. Compilation enumerates the combinations (never the lexeme product), counts the valid
fills of each, checks every rule and condition once per combination, and keeps cumulative counts.
A fill is then addressed by an integer in [0, N): sampling picks a uniformly random subset of those
integers in increasing order (see sampling.py) and decodes each, so memory does not grow with the
number of tests and the same seed always yields the same tests.

Clean semantics (where the public reference is surprising):
- n=-1 renders every fill in index order: feature combinations in the order of the dimensions'
  features, then lexemes in the order given, the first variable varying slowest.
- `{{`/`}}` are literal braces; modifiers exist without a language; TO_CAPITALIZE changes the first
  letter only.
- Numbered copies (`name1`, `name2`) draw from `name`'s values; with `distinct` (default) a fill
  never holds the same lexeme twice, whatever depends on it; with `unordered` fills that differ only
  by which copy holds which value count once. `repeat`/`order` are accepted as aliases.
- A rule or inline rule with no value for a bundle that a valid fill needs is an error naming the
  template, key and bundle, unless `skip_missing` is set, which drops those fills before counting.
- A rule dimension that is computed from words (STARTSWITH) and not given in the key is computed
  from the word that follows the rule in the rendered text; `<x.STARTSWITH>` computes it from the
  nearest following rendering of x instead.
- A rule value or a function value may come with accepted variants (狗 counts with 只 or 条): the
  first is rendered, a fill's `accepted_forms` render the others (answers' alternatives).
"""

from __future__ import annotations

import bisect
import functools
import inspect
import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from builder.m2c import functions as fn_registry
from builder.m2c.errors import TemplateError, Where
from builder.m2c.functions import Forms, FunctionError
from builder.m2c.language import MISSING, Language, LanguageDataError, custom, load_language
from builder.m2c.sampling import sorted_sample
from builder.m2c.syntax import Agree, Call, Cond, Feature, Inline, Locate, Parser, Ref

MAX_COMBINATIONS = 2_000_000


@dataclass
class Lexeme:
    """Forms by feature bundle ("SG.NOM"); `features` hold for every form (a noun's gender).

    `unverified` lists bundles whose form no curator has verified yet (LLM proposals)."""

    forms: dict[str, str]
    lemma: str | None = None
    features: str = ""
    unverified: frozenset[str] = frozenset()


@dataclass
class Fill:
    index: int
    texts: dict[str, str]
    values: dict[str, dict]  # placeholder -> {"lemma", "form", "features"}
    verified: bool
    other_forms: dict[str, list[str]]  # field -> the field rendered with other forms of its lexemes
    accepted_forms: dict[str, list[str]] = field(default_factory=dict)  # field -> rendered with accepted variants


def _text_locator(text: str, field_name: str | None) -> Locate:
    def locate(offset: int) -> Where:
        line = text.count("\n", 0, offset) + 1
        col = offset - (text.rfind("\n", 0, offset) + 1) + 1
        return Where(None, line, col, field_name)

    return locate


# -- compiled pieces ------------------------------------------------------------------------------


@dataclass
class Pool:
    """The values of one placeholder root, shared by its numbered copies."""

    root: str
    dims: tuple[str, ...]
    domains: dict[str, tuple[str, ...]]
    tables: list[dict[tuple[str, ...], tuple[str, bool]]]  # per lexeme: bundle -> (form, verified)
    lemmas: list[str]
    plain: bool


@dataclass
class Var:
    name: str
    pool: Pool
    mentions: list[int] = field(default_factory=list)
    slots: dict[str, int] = field(default_factory=dict)  # free dimension -> slot index


@dataclass
class Mention:
    """A placeholder key (or function argument) as rendered: how each dimension gets its feature."""

    var: str
    spec: tuple[tuple, ...]  # per pool dim: ("fixed", f) | ("slot", i) | ("cond", Cond)
    mods: tuple[str, ...]
    where: Where


@dataclass
class RuleUse:
    rule: str
    spec: dict[str, tuple]  # dim -> ("fixed", f) | ("slot", i) | ("cond", Cond) | ("word", mention id) | ("next",)
    mods: tuple[str, ...]
    where: Where
    raw: str

    @property
    def deferred(self) -> bool:
        return any(s[0] in ("word", "next") for s in self.spec.values())


@dataclass
class Combo:
    features: tuple[str, ...]
    groups: list[tuple]  # per group: (var names, count, decode data)
    weight: int
    bundles: list[tuple[str, ...]]  # per mention
    values: dict[int, str]  # key id -> value decided by the features alone


class Template:
    """A template in one language (or over custom dimensions), with its placeholder values.

    `text` is one string or a mapping of named texts (context, question, answer...) sharing fills.
    Keyword arguments (or `placeholders`) are placeholder values: a list of strings (plain) or of
    dicts/`Lexeme`s (feature bundle -> form); callables are template-local functions.
    """

    def __init__(
        self,
        text: str | Mapping[str, str],
        language: str | Language | None = None,
        options: Mapping[str, Any] | None = None,
        dimensions: Mapping[str, list[str]] | None = None,
        *,
        functions: Mapping[str, Callable] | None = None,
        template_name: str | None = None,
        locators: Mapping[str, Locate] | None = None,
        value_where: Mapping[str, Where] | None = None,
        placeholders: Mapping[str, Any] | None = None,
        **kw_placeholders: Any,
    ) -> None:
        self.name = template_name
        self.single = isinstance(text, str)
        self.texts = {"text": text} if isinstance(text, str) else dict(text)
        if language is None and dimensions is None:
            dimensions = {}
        if language is not None and dimensions is not None:
            raise TemplateError("give a language or custom dimensions, not both", template=template_name)
        try:
            self.lang = load_language(language) if isinstance(language, str) else language or custom(dict(dimensions))
        except LanguageDataError as exc:
            raise TemplateError(str(exc), template=template_name) from exc
        self.functions = dict(fn_registry.FUNCTIONS)
        self.functions.update(functions or {})
        self.value_where = dict(value_where or {})
        self.raw_options = dict(options or {})
        values = {}
        for key, v in {**(placeholders or {}), **kw_placeholders}.items():
            if callable(v):
                self.functions[key] = v
            else:
                values[key] = v
        self._compile(values, locators or {})

    # -- compilation ------------------------------------------------------------------------------

    def _err(self, message: str, where: Where | None = None) -> TemplateError:
        return TemplateError(message, where, self.name)

    def _compile(self, values: dict[str, Any], locators: Mapping[str, Locate]) -> None:
        self.skip_missing = bool(self.raw_options.get("skip_missing", False))
        self.pools = {}
        for key, v in values.items():
            if key[-1:].isdigit():
                raise self._err(f"placeholder values {key!r}: a name ending in a digit is reserved for numbered copies "
                                f"({key.rstrip('0123456789')}1, {key.rstrip('0123456789')}2 draw from "
                                f"{key.rstrip('0123456789')})", self.value_where.get(key))
            self.pools[key] = self._pool(key, v)
        self.vars: dict[str, Var] = {}
        self.mentions: list[Mention] = []
        self.slots: list[tuple[str, str]] = []
        self.rule_uses: dict[int, RuleUse] = {}
        self.inlines: dict[int, tuple[Inline, Where]] = {}
        self.calls: dict[int, Call] = {}
        self.call_where: dict[int, Where] = {}
        self.call_args: dict[int, list] = {}
        self.ops: dict[str, list[tuple]] = {}
        self._keys = 0
        self._pending_words: list[tuple[RuleUse, str, str, str, int]] = []
        self._pending_args: list[list] = []
        modifiers = set(self.lang.modifiers)
        for fname, text in self.texts.items():
            locate = locators.get(fname) or _text_locator(text, fname)
            parser = Parser(text, locate, modifiers, self.name)
            ops = []
            for piece in parser.pieces():
                if isinstance(piece, str):
                    ops.append(("lit", piece))
                else:
                    ops.append(self._key(piece, locate, fname, len(ops)))
            self.ops[fname] = ops
        for slot in self._pending_args:
            _, ref, locate = slot
            mentions = self.vars[ref.name].mentions
            slot[:] = ["mention", mentions[0] if mentions else self._mention(ref, locate), ref.mods]
        for use, var, fname, dim, pos in self._pending_words:
            use.spec[dim] = ("word", self._nearest_mention(var, fname, pos))
        for name in self.vars:
            if not self.vars[name].mentions and not self.vars[name].slots:
                raise self._err(f"placeholder {name} is referenced but never rendered")
        self._options()
        self._enumerate()

    def _pool(self, key: str, values: Any) -> Pool:
        where = self.value_where.get(key)
        if not isinstance(values, (list, tuple)) or not values:
            raise self._err(f"placeholder {key}: values must be a non-empty list", where)
        if all(isinstance(v, str) for v in values):
            return Pool(key, (), {}, [{(): (v, True)} for v in values], list(values), True)
        dims = self.lang.dims
        lexemes = []
        for i, v in enumerate(values):
            lex = v if isinstance(v, Lexeme) else Lexeme(dict(v)) if isinstance(v, Mapping) else None
            if lex is None:
                raise self._err(f"placeholder {key}, value #{i + 1}: expected a string or a mapping of bundle -> form", where)
            try:
                base = dims.bundle(lex.features, what=f"placeholder {key}, value #{i + 1}")
                parsed = []
                for bundle, form in lex.forms.items():
                    feats = dims.bundle(str(bundle), what=f"placeholder {key}, value #{i + 1}")
                    clash = [d for d in feats if d in base and base[d] != feats[d]]
                    if clash:
                        raise LanguageDataError(f"placeholder {key}, value #{i + 1}: bundle {bundle} contradicts {lex.features}")
                    if not isinstance(form, str):
                        raise LanguageDataError(f"placeholder {key}, value #{i + 1}, bundle {bundle}: the form must be a string")
                    parsed.append(({**base, **feats}, form, str(bundle) not in lex.unverified))
            except LanguageDataError as exc:
                raise self._err(str(exc), where) from exc
            lexemes.append((lex, parsed))
        pool_dims = dims.sort({d for _, parsed in lexemes for b, _, _ in parsed for d in b})
        # A bundle that leaves a dimension out holds for all of its features; otherwise only the
        # features the values mention are candidates.
        domains = {d: tuple(f for f in dims[d].features
                            if any(b.get(d, f) == f for _, p in lexemes for b, _, _ in p))
                   for d in pool_dims}
        tables, lemmas = [], []
        for i, (lex, parsed) in enumerate(lexemes):
            table: dict[tuple[str, ...], tuple[str, bool]] = {}
            spec: dict[tuple[str, ...], int] = {}
            for b, form, ok in parsed:
                axes = [(b[d],) if d in b else domains[d] for d in pool_dims]
                for k in itertools.product(*axes):
                    if spec.get(k, -1) < len(b):
                        table[k], spec[k] = (form, ok), len(b)
                    elif spec[k] == len(b) and table[k][0] != form:
                        raise self._err(f"placeholder {key}, value #{i + 1}: two forms ({table[k][0]!r}, {form!r}) "
                                        f"for {'.'.join(k)}", where)
            tables.append(table)
            lemmas.append(lex.lemma or (parsed[0][1] if parsed else ""))
        return Pool(key, pool_dims, domains, tables, lemmas, False)

    def _var(self, name: str, where: Where) -> Var:
        if name in self.vars:
            return self.vars[name]
        root = name if name in self.pools else name.rstrip("0123456789")
        if root not in self.pools:
            known = ", ".join(sorted(self.pools)) or "none"
            rules = ", ".join(sorted(self.lang.rules)) or "none"
            raise self._err(f"unknown placeholder {name!r} (placeholders: {known}; rules of {self.lang.name}: {rules})"
                            f"{self.lang.reference_note(name)}", where)
        self.vars[name] = Var(name, self.pools[root])
        return self.vars[name]

    def _slot(self, var: Var, dim: str, where: Where) -> int:
        if dim not in var.slots:
            d = self.lang.dims.by_name.get(dim)
            if d is None:
                raise self._err(f"{dim!r} is not a dimension of {self.lang.name}{self.lang.reference_note(dim)}", where)
            if dim not in var.pool.dims:
                raise self._err(f"placeholder {var.name} has no {dim} (its values never mention it)", where)
            if not d.sampleable:
                raise self._err(f"{dim} of {var.name} is not sampled: fix it in the key instead of leaving it open "
                                "or agreeing on it", where)
            var.slots[dim] = len(self.slots)
            self.slots.append((var.name, dim))
        return var.slots[dim]

    def _dim_of(self, label: str, where: Where) -> str:
        dim = self.lang.dims.of_feature.get(label)
        if dim is None:
            raise self._err(f"unknown feature {label!r} in {self.lang.name}{self.lang.reference_note(label)}", where)
        return dim

    def _cond(self, cond: Cond, locate: Locate) -> tuple[str, Cond]:
        where = locate(cond.at)
        labels = [v for v, _, _ in cond.cases] + ([cond.default] if cond.default is not None else [])
        dims = {self._dim_of(v, where) for v in labels}
        if len(dims) != 1:
            raise self._err(f"a conditional feature chooses among features of one dimension, not {', '.join(sorted(dims))}", where)
        resolved = []
        for value, var_name, feats in cond.cases:
            var = self._var(var_name, where)
            resolved.append((value, tuple((self._slot(var, self._dim_of(f, where), where), f) for f in feats)))
        return dims.pop(), Cond(tuple(resolved), cond.default, cond.at)

    def _segments(self, segments, target_dims: tuple[str, ...], owner: str, locate: Locate,
                  allow_computed: bool) -> tuple[dict[str, tuple], list[tuple[str, str, Where]]]:
        """How the key's own dimensions get features; computed agreements are returned apart."""
        spec: dict[str, tuple] = {}
        words = []

        def put(dim: str, how: tuple, where: Where) -> None:
            if dim not in target_dims:
                raise self._err(f"{owner} has no {dim}", where)
            if dim in spec:
                raise self._err(f"{owner}: {dim} is given twice", where)
            spec[dim] = how

        for seg in segments:
            where = locate(seg.at)
            if isinstance(seg, Feature):
                put(self._dim_of(seg.label, where), ("fixed", seg.label), where)
            elif isinstance(seg, Agree):
                other = self._var(seg.var, where)
                for dim in seg.dims:
                    d = self.lang.dims.by_name.get(dim)
                    if d is None:
                        raise self._err(f"{dim!r} is not a dimension of {self.lang.name}{self.lang.reference_note(dim)}", where)
                    if d.computed and not d.sampleable:
                        if not allow_computed:
                            raise self._err(f"{owner}: {dim} is computed from words; only rules can agree on it"
                                            f"{self.lang.reference_note(dim)}", where)
                        if dim not in target_dims:
                            raise self._err(f"{owner} has no {dim}", where)
                        words.append((seg.var, dim, where))
                        spec[dim] = ("word", None)
                    else:
                        if dim not in target_dims:
                            raise self._err(f"{owner} has no {dim}", where)
                        put(dim, ("slot", self._slot(other, dim, where)), where)
            else:
                dim, cond = self._cond(seg, locate)
                put(dim, ("cond", cond), where)
        return spec, words

    def _key(self, key, locate: Locate, fname: str, pos: int) -> tuple:
        kid = self._keys
        self._keys += 1
        where = locate(key.at)
        if isinstance(key, Call):
            self._call(kid, key, locate)
            return ("call", kid, key.mods)
        if isinstance(key, Inline):
            var = self._var(key.var, where)
            alts = []
            for value, feats in key.alts:
                alts.append((value, tuple((self._slot(var, self._dim_of(f, where), where), f) for f in feats)))
            self.inlines[kid] = (Inline(key.var, tuple(alts), key.mods, key.at, key.raw), where)
            return ("inline", kid, key.mods)
        name = key.name
        root = name.rstrip("0123456789") or name
        if name in self.pools or root in self.pools:
            return ("mention", self._mention(key, locate), key.mods)
        rule_name = name if name in self.lang.rules else root
        if rule_name in self.lang.rules:
            rule = self.lang.rules[rule_name]
            spec, words = self._segments(key.segments, rule.dims, f"rule {rule_name}", locate, allow_computed=True)
            use = RuleUse(rule_name, spec, key.mods, where, key.raw)
            for var, dim, _ in words:
                self._pending_words.append((use, var, fname, dim, pos))
            for dim in rule.dims:
                d = self.lang.dims[dim]
                if dim not in spec and d.computed and not d.sampleable:
                    spec[dim] = ("next",)
            self.rule_uses[kid] = use
            return ("rule", kid, key.mods)
        self._var(name, where)  # raises: unknown placeholder
        raise AssertionError("unreachable")

    def _mention(self, key: Ref, locate: Locate) -> int:
        where = locate(key.at)
        var = self._var(key.name, where)
        if var.pool.plain and key.segments:
            raise self._err(f"placeholder {var.name} has plain values (strings); it has no features to select", where)
        spec, _ = self._segments(key.segments, var.pool.dims, f"placeholder {var.name}", locate, allow_computed=False)
        full = []
        for dim in var.pool.dims:
            if dim not in spec:
                if not self.lang.dims[dim].sampleable:
                    raise self._err(f"placeholder {var.name} needs a {dim} feature here ({dim} is not sampled; "
                                    f"add one of {', '.join(var.pool.domains[dim])})", where)
                spec[dim] = ("slot", self._slot(var, dim, where))
            full.append(spec[dim])
        mid = len(self.mentions)
        self.mentions.append(Mention(var.name, tuple(full), key.mods, where))
        var.mentions.append(mid)
        return mid

    def _call(self, kid: int, call: Call, locate: Locate) -> None:
        where = locate(call.at)
        if call.fn not in self.functions:
            raise self._err(f"unknown function ${call.fn} (known: {', '.join(sorted(self.functions))}; "
                            "register one with register_function or pass it to the template)", where)
        self.calls[kid] = call
        self.call_where[kid] = where
        self.call_args[kid] = [self._arg(a, locate) for a in call.args]

    def _arg(self, arg, locate: Locate):
        if isinstance(arg, (int, str)):
            return ("lit", arg)
        if isinstance(arg, Call):
            kid = self._keys
            self._keys += 1
            self._call(kid, arg, locate)
            return ("call", kid)
        where = locate(arg.at)
        if len(arg.segments) == 1 and isinstance(arg.segments[0], Feature) and arg.segments[0].label in self.lang.dims:
            var = self._var(arg.name, where)
            dim = arg.segments[0].label
            if dim not in var.pool.dims:
                raise self._err(f"placeholder {var.name} has no {dim} (its values never mention it)", where)
            return ("feature", var.name, dim, self._slot(var, dim, where))
        if not arg.segments:  # a bare placeholder: its value as the text shows it (resolved after parsing)
            self._var(arg.name, where)
            slot = ["bare", arg, locate]
            self._pending_args.append(slot)
            return slot
        return ("mention", self._mention(arg, locate), arg.mods)

    def _nearest_mention(self, var: str, fname: str, pos: int) -> int:
        if var not in self.vars or not self.vars[var].mentions:
            raise self._err(f"placeholder {var} is never rendered, so its word cannot be inspected")
        in_field = [(i, op[1]) for i, op in enumerate(self.ops[fname]) if op[0] == "mention" and self.mentions[op[1]].var == var]
        after = [m for i, m in in_field if i > pos]
        before = [m for i, m in in_field if i < pos]
        return (after or before[::-1] or self.vars[var].mentions)[0]

    def _options(self) -> None:
        self.families: dict[str, list[str]] = {}
        for name, var in self.vars.items():
            self.families.setdefault(var.pool.root, []).append(name)
        self.family_opts: dict[str, tuple[bool, bool]] = {}
        for root, opts in self.raw_options.items():
            if root == "skip_missing":
                continue
            if root not in self.pools:
                raise self._err(f"options for {root!r}, which is not a placeholder")
            distinct, unordered = True, False
            for k, v in (opts or {}).items():
                if k == "distinct":
                    distinct = bool(v)
                elif k == "repeat":
                    distinct = not v
                elif k in ("unordered", "order"):
                    unordered = bool(v)
                else:
                    raise self._err(f"options for {root}: unknown option {k!r} (distinct, unordered; repeat, order)")
            self.family_opts[root] = (distinct, unordered)
        for members in self.families.values():
            members.sort(key=lambda n: (len(n), n))

    # -- enumeration ------------------------------------------------------------------------------

    def _enumerate(self) -> None:
        domains = [self.vars[v].pool.domains[d] for v, d in self.slots]
        n_combos = math.prod(len(d) for d in domains)
        if n_combos > MAX_COMBINATIONS:
            raise self._err(f"{n_combos} feature combinations (over {len(self.slots)} free dimensions): fix more features")
        self.groups = sorted(self.families.items(), key=lambda kv: min(self._first(v) for v in kv[1]))
        memo: dict[tuple, tuple[int, ...]] = {}
        self.combos: list[Combo] = []
        self.cumulative: list[int] = []
        total = 0
        for features in itertools.product(*domains):
            bundles = [self._bundle(m, features) for m in range(len(self.mentions))]
            groups = []
            weight = 1
            for root, members in self.groups:
                sets = []
                for name in members:
                    var = self.vars[name]
                    key = (root, tuple(bundles[m] for m in var.mentions))
                    if key not in memo:
                        need = key[1]
                        memo[key] = tuple(i for i, t in enumerate(var.pool.tables) if all(b in t for b in need))
                    sets.append(memo[key])
                g = self._group(root, members, sets, features)
                weight *= g[1]
                groups.append(g)
                if not weight:
                    break
            if not weight:
                continue
            values = self._combo_values(features, bundles)
            if values is None:
                continue
            self.combos.append(Combo(features, groups, weight, bundles, values))
            total += weight
            self.cumulative.append(total)
        self.total = total

    def _first(self, var: str) -> int:
        ms = self.vars[var].mentions
        return min(ms) if ms else len(self.mentions)

    def _bundle(self, mid: int, features: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(self._feature(how, features) for how in self.mentions[mid].spec)

    def _feature(self, how: tuple, features: tuple[str, ...]) -> str | None:
        kind = how[0]
        if kind == "fixed":
            return how[1]
        if kind == "slot":
            return features[how[1]]
        cond: Cond = how[1]
        for value, conds in cond.cases:
            if all(features[i] == f for i, f in conds):
                return value
        return cond.default

    def _group(self, root: str, members: list[str], sets: list[tuple[int, ...]], features) -> tuple:
        if len(members) == 1:
            return (members, len(sets[0]), ("single", sets[0]))
        distinct, unordered = self.family_opts.get(root, (True, False))
        if unordered:
            order = [tuple(features[i] for _, i in sorted(self.vars[m].slots.items())) for m in members]
            strict = [distinct or order[i] > order[i + 1] for i in range(len(members) - 1)]
            return _ascending(members, sets, strict)
        if not distinct:
            return (members, math.prod(len(s) for s in sets), ("product", sets))
        return (members, _count_distinct([frozenset(s) for s in sets]), ("distinct", sets))

    def _combo_values(self, features, bundles) -> dict[int, str] | None:
        """Rule, inline-rule values decided by features alone; None drops the combination (skip_missing)."""
        values: dict[int, str] = {}
        for kid, (inline, where) in self.inlines.items():
            for value, conds in inline.alts:
                if all(features[i] == f for i, f in conds):
                    values[kid] = self._modify(value, inline.mods)
                    break
            else:
                if self.skip_missing:
                    return None
                var = self.vars[inline.var]
                have = ".".join(features[i] for i in var.slots.values())
                raise self._err(f"inline rule has no value for {inline.var} with {have}", where)
        for kid, use in self.rule_uses.items():
            feats = {}
            for dim, how in use.spec.items():
                if how[0] in ("word", "next"):
                    continue
                f = self._feature(how, features)
                if f is None:
                    if self.skip_missing:
                        return None
                    raise self._err(f"rule {use.rule}: no condition holds and there is no default for {dim}", use.where)
                feats[dim] = f
            if use.deferred:
                continue
            value = self.lang.rules[use.rule].lookup(feats)
            if value is MISSING:
                if self.skip_missing:
                    return None
                raise self._missing(use, feats)
            values[kid] = self._modify(value, use.mods)
        for m in self.mentions:
            for how in m.spec:
                if how[0] == "cond" and self._feature(how, features) is None:
                    if self.skip_missing:
                        return None
                    raise self._err(f"placeholder {m.var}: no condition holds and there is no default", m.where)
        return values

    def _missing(self, use: RuleUse, feats: dict[str, str]) -> TemplateError:
        rule = self.lang.rules[use.rule]
        bundle = ".".join(feats[d] for d in rule.dims if d in feats)
        open_ = [d for d in rule.dims if d not in feats]
        more = ""
        if open_:
            first = self.lang.dims.by_name[open_[0]]
            more = (f" (and {', '.join(open_)} is not given: fix it in the key or agree on it, e.g. "
                    f".{first.features[0]} or <x.{first.name}>)")
        return self._err(f"rule {use.rule} of {self.lang.name} has no form for {bundle}{more} in {{{use.raw}}}", use.where)

    def _modify(self, value: str, mods: tuple[str, ...]) -> str:
        for m in mods:
            value = self.lang.modifiers[m](value)
        return value

    # -- decoding and rendering -----------------------------------------------------------------

    def __len__(self) -> int:
        return self.total

    def _decode(self, index: int) -> tuple[Combo, dict[str, int]]:
        c = bisect.bisect_right(self.cumulative, index)
        combo = self.combos[c]
        r = index - (self.cumulative[c - 1] if c else 0)
        choice: dict[str, int] = {}
        for members, count, data in reversed(combo.groups):
            r, g = divmod(r, count)
            kind = data[0]
            if kind == "single":
                choice[members[0]] = data[1][g]
            elif kind == "product":
                for name, s in zip(reversed(members), reversed(data[1])):
                    g, k = divmod(g, len(s))
                    choice[name] = s[k]
            elif kind == "distinct":
                for name, x in zip(members, _decode_distinct(data[1], g)):
                    choice[name] = x
            else:
                for name, x in zip(members, _decode_ascending(data, g)):
                    choice[name] = x
        return combo, choice

    def _form(self, mid: int, combo: Combo, choice: dict[str, int]) -> tuple[str, bool]:
        m = self.mentions[mid]
        return self.vars[m.var].pool.tables[choice[m.var]][combo.bundles[mid]]

    def _call_value(self, kid: int, combo: Combo, choice: dict[str, int]):
        args = []
        for a in self.call_args[kid]:
            kind = a[0]
            if kind == "lit":
                args.append(a[1])
            elif kind == "call":
                args.append(self._call_value(a[1], combo, choice))
            elif kind == "feature":
                args.append(combo.features[a[3]])
            else:
                args.append(self._modify(self._form(a[1], combo, choice)[0], a[2]))
        call = self.calls[kid]
        fn = self.functions[call.fn]
        try:
            return fn(*args, lang=self.lang) if _takes_lang(fn) else fn(*args)
        except (FunctionError, ValueError, TypeError, ArithmeticError) as exc:
            raise self._err(f"${call.fn}: {exc}", self.call_where[kid]) from exc

    def _render_field(self, fname: str, combo: Combo, choice: dict[str, int],
                      override: dict[int, str] | None = None) -> tuple[str, list]:
        """The field's text before post-processing, and its pieces (for answer variants)."""
        ops = self.ops[fname]
        parts: list[str] = []
        deferred = []
        for i, op in enumerate(ops):
            kind = op[0]
            if override and i in override:
                parts.append(override[i])
            elif kind == "lit":
                parts.append(op[1])
            elif kind == "mention":
                m = self.mentions[op[1]]
                form = self.vars[m.var].pool.tables[choice[m.var]][combo.bundles[op[1]]][0]
                parts.append(self._modify(form, op[2]) if op[2] else form)
            elif kind == "call":
                value = self._call_value(op[1], combo, choice)
                parts.append(self._modify(str(value), op[2]))
            elif op[1] in combo.values:
                parts.append(combo.values[op[1]])
            else:
                parts.append("")
                deferred.append(i)
        for i in reversed(deferred):
            parts[i] = self._rule_value(ops[i][1], combo, choice, parts, i)
        return "".join(parts), parts

    def _rule_features(self, use: RuleUse, combo: Combo, choice: dict[str, int], parts: list[str], i: int) -> dict[str, str]:
        feats = {}
        for dim, how in use.spec.items():
            if how[0] == "word":
                word = self._modify(self._form(how[1], combo, choice)[0], ())
            elif how[0] == "next":
                word = _next_word(parts, i)
            else:
                feats[dim] = self._feature(how, combo.features)
                continue
            f = self.lang.dims[dim].compute(word)
            if f is None:
                raise self._err(f"rule {use.rule} needs {dim} from the following word, but nothing follows", use.where)
            feats[dim] = f
        return feats

    def _rule_value(self, kid: int, combo: Combo, choice: dict[str, int], parts: list[str], i: int) -> str:
        use = self.rule_uses[kid]
        feats = self._rule_features(use, combo, choice, parts, i)
        value = self.lang.rules[use.rule].lookup(feats)
        if value is MISSING:
            raise self._missing(use, feats)
        return self._modify(value, use.mods)

    def _fill(self, index: int, variants: tuple[str, ...] = (), accepted: tuple[str, ...] = ()) -> Fill:
        combo, choice = self._decode(index)
        texts = {}
        other: dict[str, list[str]] = {}
        right: dict[str, list[str]] = {}
        for fname in self.ops:
            raw, parts = self._render_field(fname, combo, choice)
            texts[fname] = self.lang.postprocess(raw)
            if fname in variants:
                other[fname] = self._variants(fname, combo, choice, texts[fname])
            if fname in accepted:
                right[fname] = self._variants(fname, combo, choice, texts[fname], accepted=True)
        verified = all(self._form(mid, combo, choice)[1] for var in self.vars.values() for mid in var.mentions)
        values = {}
        for name, var in self.vars.items():
            if not var.mentions:
                continue
            mid = var.mentions[0]
            bundle = combo.bundles[mid]
            feats = dict(zip(var.pool.dims, bundle))
            feats.update({d: combo.features[s] for d, s in var.slots.items() if d not in feats})
            values[name] = {"lemma": var.pool.lemmas[choice[name]], "form": self._form(mid, combo, choice)[0],
                            "features": feats}
        return Fill(index, texts, values, verified, other, right)

    def _variants(self, fname: str, combo: Combo, choice: dict[str, int], gold: str, *, accepted: bool = False) -> list[str]:
        """The field rendered with each other verified form of one of its lexemes, another value of one of
        its rules, or another form of a function's value (a number word in another gender); with
        `accepted`, rendered instead with each accepted variant of a rule's or a function's value."""
        out: dict[str, None] = {}
        parts = None
        for i, op in enumerate(self.ops[fname]):
            alts: list[str] = []
            if accepted:
                if op[0] == "call":
                    value = self._call_value(op[1], combo, choice)
                    alts = [self._modify(a, op[2]) for a in value.accepted] if isinstance(value, Forms) else []
                elif op[0] == "rule":
                    use = self.rule_uses[op[1]]
                    if parts is None and use.deferred:
                        parts = self._render_field(fname, combo, choice)[1]
                    feats = self._rule_features(use, combo, choice, parts or [], i)
                    alts = [self._modify(v, op[2]) for v in self.lang.rules[use.rule].accepted(feats)]
            elif op[0] == "mention":
                m = self.mentions[op[1]]
                table = self.vars[m.var].pool.tables[choice[m.var]]
                alts = [self._modify(form, op[2]) for form, ok in table.values() if ok and form]  # dropping a word is no form
            elif op[0] == "call":
                value = self._call_value(op[1], combo, choice)
                if isinstance(value, Forms):
                    alts = [self._modify(o, op[2]) for o in value.others]
            elif op[0] == "rule":  # another article, pronoun or classifier of the same rule
                alts = [self._modify(v, op[2]) for v in sorted(set(self.lang.rules[self.rule_uses[op[1]].rule].table.values()))]
            for alt in dict.fromkeys(alts):
                text = self.lang.postprocess(self._render_field(fname, combo, choice, {i: alt})[0])
                if text != gold:
                    out[text] = None
        return list(out)

    # -- public API ------------------------------------------------------------------------------

    def indices(self, n: int = -1, seed: int = 0) -> Iterator[int]:
        return sorted_sample(self.total, n, seed)

    def fills(self, n: int = -1, seed: int = 0, *, variants: tuple[str, ...] = (),
              accepted: tuple[str, ...] = ()) -> Iterator[Fill]:
        """Fills with their texts, values and verification state; `variants` names fields whose
        renderings with other forms of their lexemes are wanted (answer forms), `accepted` fields whose
        renderings with the accepted variants of their rules' and functions' values are (alternatives)."""
        for index in self.indices(n, seed):
            yield self._fill(index, variants, accepted)

    def stream(self, n: int = -1, seed: int = 0) -> Iterator[str | dict[str, str]]:
        """Rendered tests one at a time: memory stays flat however many are drawn."""
        names = list(self.ops)
        post = self.lang.postprocess
        for index in self.indices(n, seed):
            combo, choice = self._decode(index)
            texts = {f: post(self._render_field(f, combo, choice)[0]) for f in names}
            yield texts["text"] if self.single else texts

    def render(self, n: int = -1, seed: int = 0) -> list:
        """n tests drawn uniformly without replacement (all of them for n=-1), reproducible from seed."""
        return list(self.stream(n, seed))


@functools.lru_cache(maxsize=256)
def _takes_lang(fn: Callable) -> bool:
    """Whether a function accepts the `lang` keyword (the reference's plain lambdas do not)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "lang" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _next_word(parts: list[str], i: int) -> str:
    rest = "".join(parts[i + 1 :]).lstrip()
    word = []
    for ch in rest:
        if ch.isspace():
            break
        word.append(ch)
    return "".join(word)


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


def _decode_distinct(sets: list[tuple[int, ...]], r: int) -> list[int]:
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


def _ascending(members: list[str], sets: list[tuple[int, ...]], strict: list[bool]) -> tuple:
    """Canonical tuples x1 <= x2 <= ... (< where `strict`): counts of completions per position."""
    k = len(sets)
    counts: list[list[int]] = [[] for _ in range(k)]
    counts[k - 1] = [1] * len(sets[k - 1])
    for p in range(k - 2, -1, -1):
        nxt, nxt_counts = sets[p + 1], counts[p + 1]
        suffix = list(itertools.accumulate(reversed(nxt_counts)))[::-1] + [0]
        row = []
        for x in sets[p]:
            j = bisect.bisect_right(nxt, x) if strict[p] else bisect.bisect_left(nxt, x)
            row.append(suffix[j])
        counts[p] = row
    prefix = [list(itertools.accumulate(c)) for c in counts]
    return (members, prefix[0][-1] if prefix[0] else 0, ("ascending", sets, counts, prefix, strict))


def _decode_ascending(data: tuple, r: int) -> list[int]:
    _, sets, counts, prefix, strict = data
    out = []
    lo = 0
    for p in range(len(sets)):
        if p:
            lo = bisect.bisect_right(sets[p], out[-1]) if strict[p - 1] else bisect.bisect_left(sets[p], out[-1])
        base = prefix[p][lo - 1] if lo else 0
        j = bisect.bisect_right(prefix[p], base + r, lo)
        r -= (prefix[p][j - 1] if j else 0) - base
        out.append(sets[p][j])
    return out
