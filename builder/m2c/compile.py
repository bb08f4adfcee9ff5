"""Compilation: a template's texts and values checked and resolved once into a `CompiledTemplate`.

The parser (syntax.py) splits each text into literals and keys; the compiler checks every key
against the language and the placeholder values (each error names file, line and column), resolves
it into typed nodes (nodes.py) and finally enumerates the space of fills (enumeration.py). Its
bookkeeping lives in `_Compiler` and dies with it: the compiled template is frozen, so rendering
can never depend on the order in which tests were drawn.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from builder.m2c import functions as fn_registry
from builder.m2c.enumeration import Space, choices, enumerate_space
from builder.m2c.errors import TemplateError, Where
from builder.m2c.language import Grammar, LanguageDataError, Rule, custom, load_language
from builder.m2c.nodes import (
    Arg,
    CallUse,
    Conditional,
    Const,
    FeatureOf,
    FeatureSpec,
    Fixed,
    FromNext,
    FromWord,
    FunctionValue,
    InlineUse,
    InlineValue,
    Lexeme,
    Literal,
    Mention,
    Modifiers,
    NestedCall,
    Op,
    Placeholder,
    Pool,
    RuleSpec,
    RuleUse,
    RuleValue,
    Slot,
    Var,
    Word,
)
from builder.m2c.syntax import Agree, Call, Cond, Feature, Inline, Key, Locate, Parser, Ref


@dataclass(frozen=True)
class CompiledTemplate:
    """What rendering reads: each field's ops over the template's variables, mentions, rules and
    calls, and the space of fills an index addresses."""

    name: str | None
    single: bool  # one text, rendered as a string rather than a mapping of fields
    lang: Grammar
    fields: dict[str, tuple[Op, ...]]
    vars: dict[str, Var]
    mentions: tuple[Mention, ...]
    rules: dict[int, RuleUse]
    calls: dict[int, CallUse]
    space: Space
    # Optional fields (answers' alternatives): their mentions, and those of them whose form some fill's
    # lexeme lacks (mention, variable), checked per fill; empty when no fill can lack one.
    optional: dict[str, tuple[int, ...]] = field(default_factory=dict)
    guards: dict[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)


def compile_template(text: str | Mapping[str, str], language: str | Grammar | None,
                     options: Mapping[str, Any] | None, dimensions: Mapping[str, list[str]] | None, *,
                     functions: Mapping[str, Callable] | None, name: str | None, locators: Mapping[str, Locate],
                     value_where: Mapping[str, Where], placeholders: Mapping[str, Any],
                     optional: tuple[str, ...] = ()) -> CompiledTemplate:
    """Callables among the placeholders are template-local functions; the rest are values. The forms
    that `optional` fields name do not restrict the fills: such a field is left out of a fill whose
    lexeme lacks one, and refused only when no fill has it."""
    if language is None and dimensions is None:
        dimensions = {}
    if language is not None and dimensions is not None:
        raise TemplateError("give a language or custom dimensions, not both", template=name)
    try:
        lang = load_language(language) if isinstance(language, str) else language or custom(dict(dimensions))
    except LanguageDataError as exc:
        raise TemplateError(str(exc), template=name) from exc
    known = {**fn_registry.FUNCTIONS, **(functions or {})}
    values = {}
    for key, v in placeholders.items():
        if callable(v):
            known[key] = v
        else:
            values[key] = v
    texts = {"text": text} if isinstance(text, str) else dict(text)
    compiler = _Compiler(lang, known, name, value_where)
    return compiler.compile(texts, values, dict(options or {}), locators, single=isinstance(text, str),
                            optional=tuple(optional))


def _text_locator(text: str, field_name: str) -> Locate:
    def locate(offset: int) -> Where:
        line = text.count("\n", 0, offset) + 1
        col = offset - (text.rfind("\n", 0, offset) + 1) + 1
        return Where(None, line, col, field_name)

    return locate


def _takes_lang(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "lang" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


@dataclass
class _VarDraft:
    name: str
    pool: Pool
    mentions: list[int] = field(default_factory=list)
    slots: dict[str, int] = field(default_factory=dict)


@dataclass
class _RuleDraft:
    """A rule key until the mentions its computed dimensions read from are known (after parsing)."""

    rule: Rule
    spec: dict[str, RuleSpec | None]
    mods: Modifiers
    where: Where
    raw: str


@dataclass(frozen=True, eq=False)
class _Bare:
    """A bare placeholder argument: its first mention is known only after parsing every field."""

    ref: Ref
    locate: Locate


class _Compiler:
    def __init__(self, lang: Grammar, functions: dict[str, Callable], name: str | None,
                 value_where: Mapping[str, Where]) -> None:
        self.lang = lang
        self.functions = functions
        self.name = name
        self.value_where = value_where
        self.pools: dict[str, Pool] = {}
        self.vars: dict[str, _VarDraft] = {}
        self.mentions: list[Mention] = []
        self.slots: list[tuple[str, str]] = []
        self.rules: dict[int, _RuleDraft] = {}
        self.inlines: dict[int, InlineUse] = {}
        self.calls: dict[int, tuple[Call, Where, list[Arg | _Bare]]] = {}
        self.fields: dict[str, tuple[Op, ...]] = {}
        self.keys = 0
        self.bare: list[_Bare] = []  # in the order met, which decides the ids of the mentions they add
        self.words: list[tuple[_RuleDraft, str, str, str, int]] = []  # rule, var, field, dimension, op position

    def err(self, message: str, where: Where | None = None) -> TemplateError:
        return TemplateError(message, where, self.name)

    def mods(self, names: tuple[str, ...]) -> Modifiers:
        return tuple(self.lang.modifiers[m] for m in names)

    def compile(self, texts: dict[str, str], values: dict[str, Any], options: dict[str, Any],
                locators: Mapping[str, Locate], *, single: bool, optional: tuple[str, ...] = ()) -> CompiledTemplate:
        skip_missing = bool(options.get("skip_missing", False))
        for key, v in values.items():
            if key[-1:].isdigit():
                root = key.rstrip("0123456789")
                raise self.err(f"placeholder values {key!r}: a name ending in a digit is reserved for numbered copies "
                               f"({root}1, {root}2 draw from {root})", self.value_where.get(key))
            self.pools[key] = self.pool(key, v)
        modifiers = set(self.lang.modifiers)
        own: dict[str, tuple[int, ...]] = {}
        for fname, text in texts.items():
            locate = locators.get(fname) or _text_locator(text, fname)
            ops: list[Op] = []
            first = len(self.mentions)
            for piece in Parser(text, locate, modifiers, self.name).pieces():
                ops.append(Literal(piece) if isinstance(piece, str) else self.key(piece, locate, fname, len(ops)))
            self.fields[fname] = tuple(ops)
            if fname in optional:
                own[fname] = tuple(range(first, len(self.mentions)))
        bare = {}
        for a in self.bare:
            mentions = self.vars[a.ref.name].mentions
            bare[a] = Word(mentions[0] if mentions else self.mention(a.ref, a.locate), self.mods(a.ref.mods))
        for draft, var, fname, dim, pos in self.words:
            draft.spec[dim] = FromWord(self.nearest_mention(var, fname, pos))
        for name, var in self.vars.items():
            if not var.mentions and not var.slots:
                raise self.err(f"placeholder {name} is referenced but never rendered")
        families, family_options = self.families(options)
        frozen_vars = {n: Var(n, v.pool, tuple(v.mentions), tuple(v.slots.items())) for n, v in self.vars.items()}
        rules = {kid: RuleUse(d.rule, tuple(d.spec.items()), d.mods, d.where, d.raw,
                              any(isinstance(s, FromWord | FromNext) for s in d.spec.values()))
                 for kid, d in self.rules.items()}
        mentions = tuple(self.mentions)
        loose = frozenset(m for ms in own.values() for m in ms)
        space = enumerate_space(vars=frozen_vars, mentions=mentions, slots=tuple(self.slots), families=families,
                                options=family_options, inlines=self.inlines, rules=rules,
                                skip_missing=skip_missing, lang=self.lang, template=self.name, optional=loose)
        guards = self.guards(own, frozen_vars, mentions, space)
        calls = {kid: CallUse(call.fn, self.functions[call.fn], _takes_lang(self.functions[call.fn]),
                              tuple(bare[a] if isinstance(a, _Bare) else a for a in args), where)
                 for kid, (call, where, args) in self.calls.items()}
        return CompiledTemplate(self.name, single, self.lang, self.fields, frozen_vars, mentions, rules, calls, space,
                                own, guards)

    def guards(self, own: dict[str, tuple[int, ...]], vars: dict[str, Var], mentions: tuple[Mention, ...],
               space: Space) -> dict[str, tuple[tuple[int, str], ...]]:
        """Per optional field, its mentions whose form some fill's lexeme lacks; a mention whose form no
        fill has is a mistake (a typo, a case no value gives), refused where it is written."""
        out = {}
        for fname, mids in own.items():
            guarded = []
            for mid in mids:
                var = mentions[mid].var
                tables = vars[var].pool.tables
                found = lacking = False
                for combo in space.combos:
                    bundle = combo.bundles[mid]
                    for i in choices(combo, var):
                        if bundle in tables[i]:
                            found = True
                        else:
                            lacking = True
                    if found and lacking:
                        break
                if space.total and not found:
                    named = ".".join(s.feature for s in mentions[mid].spec if isinstance(s, Fixed))
                    raise self.err(f"no value of placeholder {var} has a {named} form in any fill, so this "
                                   "text would never be rendered", mentions[mid].where)
                if lacking:
                    guarded.append((mid, var))
            if guarded:
                out[fname] = tuple(guarded)
        return out

    # -- values --------------------------------------------------------------------------------------

    def pool(self, key: str, values: Any) -> Pool:
        where = self.value_where.get(key)
        if not isinstance(values, (list, tuple)) or not values:
            raise self.err(f"placeholder {key}: values must be a non-empty list", where)
        if all(isinstance(v, str) for v in values):
            return Pool(key, (), {}, tuple({(): (v, True)} for v in values), tuple(values), True)
        dims = self.lang.dims
        lexemes = []
        for i, v in enumerate(values):
            lex = v if isinstance(v, Lexeme) else Lexeme(dict(v)) if isinstance(v, Mapping) else None
            if lex is None:
                raise self.err(f"placeholder {key}, value #{i + 1}: expected a string or a mapping of bundle -> form", where)
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
                raise self.err(str(exc), where) from exc
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
                        raise self.err(f"placeholder {key}, value #{i + 1}: two forms ({table[k][0]!r}, {form!r}) "
                                       f"for {'.'.join(k)}", where)
            tables.append(table)
            lemmas.append(lex.lemma or (parsed[0][1] if parsed else ""))
        return Pool(key, pool_dims, domains, tuple(tables), tuple(lemmas), False)

    def var(self, name: str, where: Where) -> _VarDraft:
        if name in self.vars:
            return self.vars[name]
        root = name if name in self.pools else name.rstrip("0123456789")
        if root not in self.pools:
            known = ", ".join(sorted(self.pools)) or "none"
            rules = ", ".join(sorted(self.lang.rules)) or "none"
            raise self.err(f"unknown placeholder {name!r} (placeholders: {known}; rules of {self.lang.name}: {rules})"
                           f"{self.lang.reference_note(name)}", where)
        self.vars[name] = _VarDraft(name, self.pools[root])
        return self.vars[name]

    def slot(self, var: _VarDraft, dim: str, where: Where) -> int:
        if dim not in var.slots:
            d = self.lang.dims.by_name.get(dim)
            if d is None:
                raise self.err(f"{dim!r} is not a dimension of {self.lang.name}{self.lang.reference_note(dim)}", where)
            if dim not in var.pool.dims:
                raise self.err(f"placeholder {var.name} has no {dim} (its values never mention it)", where)
            if not d.sampleable:
                raise self.err(f"{dim} of {var.name} is not sampled: fix it in the key instead of leaving it open "
                               "or agreeing on it", where)
            var.slots[dim] = len(self.slots)
            self.slots.append((var.name, dim))
        return var.slots[dim]

    def dim_of(self, label: str, where: Where) -> str:
        dim = self.lang.dims.of_feature.get(label)
        if dim is None:
            raise self.err(f"unknown feature {label!r} in {self.lang.name}{self.lang.reference_note(label)}", where)
        return dim

    def conditions(self, var_name: str, feats: tuple[str, ...], where: Where) -> tuple[tuple[int, str], ...]:
        var = self.var(var_name, where)
        return tuple((self.slot(var, self.dim_of(f, where), where), f) for f in feats)

    # -- keys ----------------------------------------------------------------------------------------

    def cond(self, cond: Cond, locate: Locate) -> tuple[str, Conditional]:
        where = locate(cond.at)
        labels = [v for v, _, _ in cond.cases] + ([cond.default] if cond.default is not None else [])
        dims = {self.dim_of(v, where) for v in labels}
        if len(dims) != 1:
            raise self.err(f"a conditional feature chooses among features of one dimension, not {', '.join(sorted(dims))}", where)
        cases = tuple((value, self.conditions(var_name, feats, where)) for value, var_name, feats in cond.cases)
        return dims.pop(), Conditional(cases, cond.default)

    def segments(self, segments, target_dims: tuple[str, ...], owner: str, locate: Locate,
                 allow_computed: bool) -> tuple[dict[str, RuleSpec | None], list[tuple[str, str]]]:
        """How the key's own dimensions get features; the dimensions computed from another placeholder's
        word are returned apart (var, dimension), their spec left None until that word is known."""
        spec: dict[str, RuleSpec | None] = {}
        words = []

        def put(dim: str, how: FeatureSpec, where: Where) -> None:
            if dim not in target_dims:
                raise self.err(f"{owner} has no {dim}", where)
            if dim in spec:
                raise self.err(f"{owner}: {dim} is given twice", where)
            spec[dim] = how

        for seg in segments:
            where = locate(seg.at)
            match seg:
                case Feature(label):
                    put(self.dim_of(label, where), Fixed(label), where)
                case Agree(var_name, dims):
                    other = self.var(var_name, where)
                    for dim in dims:
                        d = self.lang.dims.by_name.get(dim)
                        if d is None:
                            raise self.err(f"{dim!r} is not a dimension of {self.lang.name}{self.lang.reference_note(dim)}",
                                           where)
                        if d.computed and not d.sampleable:
                            if not allow_computed:
                                raise self.err(f"{owner}: {dim} is computed from words; only rules can agree on it"
                                               f"{self.lang.reference_note(dim)}", where)
                            if dim not in target_dims:
                                raise self.err(f"{owner} has no {dim}", where)
                            words.append((var_name, dim))
                            spec[dim] = None
                        else:
                            if dim not in target_dims:
                                raise self.err(f"{owner} has no {dim}", where)
                            put(dim, Slot(self.slot(other, dim, where)), where)
                case Cond():
                    dim, conditional = self.cond(seg, locate)
                    put(dim, conditional, where)
        return spec, words

    def key(self, key: Key, locate: Locate, fname: str, pos: int) -> Op:
        kid = self.keys
        self.keys += 1
        where = locate(key.at)
        match key:
            case Call():
                self.call(kid, key, locate)
                return FunctionValue(kid, self.mods(key.mods))
            case Inline(var_name, alts, mods):
                self.inlines[kid] = InlineUse(var_name, tuple((value, self.conditions(var_name, feats, where))
                                                              for value, feats in alts), self.mods(mods), where)
                return InlineValue(kid)
        name = key.name
        root = name.rstrip("0123456789") or name
        if name in self.pools or root in self.pools:
            mid = self.mention(key, locate)
            var = self.vars[key.name]
            return Placeholder(mid, var.name, var.pool.tables, self.mods(key.mods))
        rule_name = name if name in self.lang.rules else root
        if rule_name not in self.lang.rules:
            self.var(name, where)  # raises: unknown placeholder
        rule = self.lang.rules[rule_name]
        spec, words = self.segments(key.segments, rule.dims, f"rule {rule_name}", locate, allow_computed=True)
        for dim in rule.dims:
            d = self.lang.dims[dim]
            if dim not in spec and d.computed and not d.sampleable:
                spec[dim] = FromNext()
        draft = _RuleDraft(rule, spec, self.mods(key.mods), where, key.raw)
        self.words.extend((draft, var, fname, dim, pos) for var, dim in words)
        self.rules[kid] = draft
        return RuleValue(kid)

    def mention(self, key: Ref, locate: Locate) -> int:
        where = locate(key.at)
        var = self.var(key.name, where)
        if var.pool.plain and key.segments:
            raise self.err(f"placeholder {var.name} has plain values (strings); it has no features to select", where)
        spec, _ = self.segments(key.segments, var.pool.dims, f"placeholder {var.name}", locate, allow_computed=False)
        full = []
        for dim in var.pool.dims:
            if dim not in spec:
                if not self.lang.dims[dim].sampleable:
                    raise self.err(f"placeholder {var.name} needs a {dim} feature here ({dim} is not sampled; "
                                   f"add one of {', '.join(var.pool.domains[dim])})", where)
                spec[dim] = Slot(self.slot(var, dim, where))
            full.append(spec[dim])
        mid = len(self.mentions)
        self.mentions.append(Mention(var.name, tuple(full), where))
        var.mentions.append(mid)
        return mid

    def call(self, kid: int, call: Call, locate: Locate) -> None:
        where = locate(call.at)
        if call.fn not in self.functions:
            raise self.err(f"unknown function ${call.fn} (known: {', '.join(sorted(self.functions))}; "
                           "register one with register_function or pass it to the template)", where)
        self.calls[kid] = (call, where, [self.arg(a, locate) for a in call.args])

    def arg(self, arg: Call | Ref | int | str, locate: Locate) -> Arg | _Bare:
        if isinstance(arg, (int, str)):
            return Const(arg)
        if isinstance(arg, Call):
            kid = self.keys
            self.keys += 1
            self.call(kid, arg, locate)
            return NestedCall(kid)
        where = locate(arg.at)
        if len(arg.segments) == 1 and isinstance(arg.segments[0], Feature) and arg.segments[0].label in self.lang.dims:
            var = self.var(arg.name, where)
            dim = arg.segments[0].label
            if dim not in var.pool.dims:
                raise self.err(f"placeholder {var.name} has no {dim} (its values never mention it)", where)
            return FeatureOf(self.slot(var, dim, where))
        if not arg.segments:  # a bare placeholder: its value as the text shows it
            self.var(arg.name, where)
            self.bare.append(_Bare(arg, locate))
            return self.bare[-1]
        return Word(self.mention(arg, locate), self.mods(arg.mods))

    def nearest_mention(self, var: str, fname: str, pos: int) -> int:
        if var not in self.vars or not self.vars[var].mentions:
            raise self.err(f"placeholder {var} is never rendered, so its word cannot be inspected")
        in_field = [(i, op.mention) for i, op in enumerate(self.fields[fname])
                    if isinstance(op, Placeholder) and op.var == var]
        after = [m for i, m in in_field if i > pos]
        before = [m for i, m in in_field if i < pos]
        return (after or before[::-1] or self.vars[var].mentions)[0]

    # -- families of numbered copies -----------------------------------------------------------------

    def families(self, options: dict[str, Any]) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[bool, bool]]]:
        """The variables of each placeholder root, and (distinct, unordered) per root from the options
        and their reference aliases."""
        members: dict[str, list[str]] = {}
        for name, var in self.vars.items():
            members.setdefault(var.pool.root, []).append(name)
        chosen = {}
        for root, opts in options.items():
            if root == "skip_missing":
                continue
            if root not in self.pools:
                raise self.err(f"options for {root!r}, which is not a placeholder")
            distinct, unordered = True, False
            for k, v in (opts or {}).items():
                if k == "distinct":
                    distinct = bool(v)
                elif k == "repeat":
                    distinct = not v
                elif k in ("unordered", "order"):
                    unordered = bool(v)
                else:
                    raise self.err(f"options for {root}: unknown option {k!r} (distinct, unordered; repeat, order)")
            chosen[root] = (distinct, unordered)
        return {root: tuple(sorted(names, key=lambda n: (len(n), n))) for root, names in members.items()}, chosen
