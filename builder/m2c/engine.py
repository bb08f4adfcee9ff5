"""Rendering: a compiled template's fills drawn by index and rendered into texts.

`Template` compiles once (compile.py) and keeps only the frozen `CompiledTemplate`; drawing tests
picks a uniformly random subset of fill indices in increasing order (sampling.py), decodes each
(enumeration.py) and renders its fields, so memory does not grow with the number of tests and the
same seed always yields the same tests.

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
- `optional` fields (answers' alternatives) do not restrict the fills: a fill whose lexeme lacks a
  form one of them names leaves that field out (у has a V4 form "рядом с", на has none, so "рядом с
  {place.INS.SG}" is an alternative only where the answer is "у ..."); a form no fill has is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from builder.m2c.compile import CompiledTemplate, compile_template
from builder.m2c.enumeration import Combo
from builder.m2c.errors import TemplateError, Where
from builder.m2c.functions import Forms, FunctionError
from builder.m2c.language import MISSING, Grammar
from builder.m2c.nodes import (
    Const,
    FeatureOf,
    FromNext,
    FromWord,
    FunctionValue,
    Literal,
    NestedCall,
    Placeholder,
    RuleUse,
    RuleValue,
    Word,
    feature,
    missing_form,
    modify,
)
from builder.m2c.sampling import sorted_sample
from builder.m2c.syntax import Locate


@dataclass
class Fill:
    index: int
    texts: dict[str, str]
    values: dict[str, dict]  # placeholder -> {"lemma", "form", "features"}
    verified: bool
    other_forms: dict[str, list[str]]  # field -> the field rendered with other forms of its lexemes
    accepted_forms: dict[str, list[str]] = field(default_factory=dict)  # field -> rendered with accepted variants


class Template:
    """A template in one language (or over custom dimensions), with its placeholder values.

    `text` is one string or a mapping of named texts (context, question, answer...) sharing fills.
    Keyword arguments (or `placeholders`) are placeholder values: a list of strings (plain) or of
    dicts/`Lexeme`s (feature bundle -> form); callables are template-local functions.
    """

    __slots__ = ("compiled",)

    def __init__(
        self,
        text: str | Mapping[str, str],
        language: str | Grammar | None = None,
        options: Mapping[str, Any] | None = None,
        dimensions: Mapping[str, list[str]] | None = None,
        *,
        functions: Mapping[str, Callable] | None = None,
        template_name: str | None = None,
        locators: Mapping[str, Locate] | None = None,
        value_where: Mapping[str, Where] | None = None,
        placeholders: Mapping[str, Any] | None = None,
        optional: tuple[str, ...] = (),
        **kw_placeholders: Any,
    ) -> None:
        self.compiled = compile_template(text, language, options, dimensions, functions=functions, name=template_name,
                                         locators=locators or {}, value_where=value_where or {},
                                         placeholders={**(placeholders or {}), **kw_placeholders}, optional=optional)

    def __len__(self) -> int:
        return self.compiled.space.total

    def indices(self, n: int = -1, seed: int = 0) -> Iterator[int]:
        return sorted_sample(self.compiled.space.total, n, seed)

    def fills(self, n: int = -1, seed: int = 0, *, variants: tuple[str, ...] = (),
              accepted: tuple[str, ...] = ()) -> Iterator[Fill]:
        """Fills with their texts, values and verification state; `variants` names fields whose
        renderings with other forms of their lexemes are wanted (answer forms), `accepted` fields whose
        renderings with the accepted variants of their rules' and functions' values are (alternatives)."""
        for index in self.indices(n, seed):
            yield _fill(self.compiled, index, variants, accepted)

    def stream(self, n: int = -1, seed: int = 0) -> Iterator[str | dict[str, str]]:
        """Rendered tests one at a time: memory stays flat however many are drawn."""
        ct = self.compiled
        names = list(ct.fields)
        post = ct.lang.postprocess
        decode = ct.space.decode
        for index in self.indices(n, seed):
            combo, choice = decode(index)
            if ct.single:
                yield post(render_text(ct, "text", combo, choice)[0])
            else:
                skip = _skipped(ct, combo, choice) if ct.guards else ()
                yield {f: post(render_text(ct, f, combo, choice)[0]) for f in names if f not in skip}

    def render(self, n: int = -1, seed: int = 0) -> list:
        """n tests drawn uniformly without replacement (all of them for n=-1), reproducible from seed."""
        return list(self.stream(n, seed))


def render_text(ct: CompiledTemplate, fname: str, combo: Combo, choice: dict[str, int],
                override: dict[int, str] | None = None) -> tuple[str, list[str]]:
    """The field's text before post-processing, and its pieces (for answer variants); `override`
    replaces the pieces at some positions."""
    ops = ct.fields[fname]
    if override:  # an overridden piece is a literal, even where a deferred rule was
        ops = tuple(Literal(override[i]) if i in override else op for i, op in enumerate(ops))
    bundles, values = combo.bundles, combo.values
    parts: list[str] = []
    append = parts.append
    deferred = []
    for op in ops:  # dispatched by type identity, not `match`: class patterns made bench/render.py ~10% slower
        kind = op.__class__
        if kind is Literal:
            append(op.text)
        elif kind is Placeholder:
            form = op.tables[choice[op.var]][bundles[op.mention]][0]
            append(modify(form, op.mods) if op.mods else form)
        elif kind is FunctionValue:
            append(modify(str(_call_value(ct, op.key, combo, choice)), op.mods))
        else:  # RuleValue, InlineValue
            value = values.get(op.key)
            if value is None:  # read from a rendered word: once the rest of the text is known
                deferred.append(len(parts))
                append("")
            else:
                append(value)
    for i in reversed(deferred):
        parts[i] = _rule_value(ct, ct.rules[ops[i].key], combo, choice, parts, i)
    return "".join(parts), parts


def _form(ct: CompiledTemplate, mention: int, combo: Combo, choice: dict[str, int]) -> tuple[str, bool]:
    var = ct.mentions[mention].var
    return ct.vars[var].pool.tables[choice[var]][combo.bundles[mention]]


def _call_value(ct: CompiledTemplate, key: int, combo: Combo, choice: dict[str, int]):
    call = ct.calls[key]
    args = []
    for a in call.args:
        match a:
            case Word():
                args.append(modify(_form(ct, a.mention, combo, choice)[0], a.mods))
            case Const():
                args.append(a.value)
            case FeatureOf():
                args.append(combo.features[a.slot])
            case NestedCall():
                args.append(_call_value(ct, a.key, combo, choice))
    try:
        return call.fn(*args, lang=ct.lang) if call.takes_lang else call.fn(*args)
    except (FunctionError, ValueError, TypeError, ArithmeticError) as exc:
        raise TemplateError(f"${call.name}: {exc}", call.where, ct.name) from exc


def _rule_features(ct: CompiledTemplate, use: RuleUse, combo: Combo, choice: dict[str, int], parts: list[str],
                   i: int) -> dict[str, str]:
    feats = {}
    for dim, spec in use.spec:
        match spec:
            case FromWord(mention):
                word = _form(ct, mention, combo, choice)[0]
            case FromNext():
                word = _next_word(parts, i)
            case _:
                feats[dim] = feature(spec, combo.features)
                continue
        f = ct.lang.dims[dim].compute(word)
        if f is None:
            raise TemplateError(f"rule {use.rule.name} needs {dim} from the following word, but nothing follows",
                                use.where, ct.name)
        feats[dim] = f
    return feats


def _rule_value(ct: CompiledTemplate, use: RuleUse, combo: Combo, choice: dict[str, int], parts: list[str], i: int) -> str:
    feats = _rule_features(ct, use, combo, choice, parts, i)
    value = use.rule.lookup(feats)
    if value is MISSING:
        raise missing_form(use, feats, ct.lang, ct.name)
    return modify(value, use.mods)


def _next_word(parts: list[str], i: int) -> str:
    rest = "".join(parts[i + 1 :]).lstrip()
    word = []
    for ch in rest:
        if ch.isspace():
            break
        word.append(ch)
    return "".join(word)


def _skipped(ct: CompiledTemplate, combo: Combo, choice: dict[str, int]) -> set[str]:
    """The optional fields that name a form this fill's lexemes lack."""
    bundles, vars = combo.bundles, ct.vars
    return {f for f, guards in ct.guards.items()
            if any(bundles[m] not in vars[v].pool.tables[choice[v]] for m, v in guards)}


def _fill(ct: CompiledTemplate, index: int, variants: tuple[str, ...], accepted: tuple[str, ...]) -> Fill:
    combo, choice = ct.space.decode(index)
    texts = {}
    other: dict[str, list[str]] = {}
    right: dict[str, list[str]] = {}
    skip = _skipped(ct, combo, choice) if ct.guards else ()
    gone = {m for f in skip for m in ct.optional[f]} if skip else ()  # mentions not rendered in this fill
    for fname in ct.fields:
        if fname in skip:
            continue
        texts[fname] = ct.lang.postprocess(render_text(ct, fname, combo, choice)[0])
        if fname in variants:
            other[fname] = _variants(ct, fname, combo, choice, texts[fname])
        if fname in accepted:
            right[fname] = _variants(ct, fname, combo, choice, texts[fname], accepted=True)
    verified = all(_form(ct, mid, combo, choice)[1] for var in ct.vars.values() for mid in var.mentions if mid not in gone)
    values = {}
    for name, var in ct.vars.items():
        mid = next((m for m in var.mentions if m not in gone), None)
        if mid is None:
            continue
        feats = dict(zip(var.pool.dims, combo.bundles[mid]))
        feats.update({d: combo.features[s] for d, s in var.slots if d not in feats})
        values[name] = {"lemma": var.pool.lemmas[choice[name]], "form": _form(ct, mid, combo, choice)[0],
                        "features": feats}
    return Fill(index, texts, values, verified, other, right)


def _variants(ct: CompiledTemplate, fname: str, combo: Combo, choice: dict[str, int], gold: str, *,
              accepted: bool = False) -> list[str]:
    """The field rendered with each other verified form of one of its lexemes, another value of one of
    its rules, or another form of a function's value (a number word in another gender); with
    `accepted`, rendered instead with each accepted variant of a rule's or a function's value."""
    out: dict[str, None] = {}
    parts = None
    for i, op in enumerate(ct.fields[fname]):
        alts: list[str] = []
        match op:
            case FunctionValue(key, mods):
                value = _call_value(ct, key, combo, choice)
                if isinstance(value, Forms):
                    alts = [modify(a, mods) for a in (value.accepted if accepted else value.others)]
            case RuleValue(key) if accepted:
                use = ct.rules[key]
                if parts is None and use.deferred:
                    parts = render_text(ct, fname, combo, choice)[1]
                feats = _rule_features(ct, use, combo, choice, parts or [], i)
                alts = [modify(v, use.mods) for v in use.rule.accepted(feats)]
            case RuleValue(key):  # another article, pronoun or classifier of the same rule
                use = ct.rules[key]
                alts = [modify(v, use.mods) for v in sorted(set(use.rule.table.values()))]
            case Placeholder(_, var, tables, mods) if not accepted:
                table = tables[choice[var]]
                alts = [modify(form, mods) for form, ok in table.values() if ok and form]  # dropping a word is no form
        for alt in dict.fromkeys(alts):
            text = ct.lang.postprocess(render_text(ct, fname, combo, choice, {i: alt})[0])
            if text != gold:
                out[text] = None
    return list(out)
