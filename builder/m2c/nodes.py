"""The typed nodes a template compiles to, and the `Lexeme` values it is given.

Compilation (compile.py) resolves every key once: names become indices (mentions, feature slots,
key ids), modifier names the functions that apply them, rule names their tables. The enumerator and
the renderer then read plain frozen data and dispatch on node types (`match`, or type identity in
the two hot loops), so nothing is looked up, parsed or changed while tests are drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from builder.m2c.errors import TemplateError, Where
from builder.m2c.language import Grammar, Rule

Modifiers = tuple[Callable[[str], str], ...]


@dataclass
class Lexeme:
    """Forms by feature bundle ("SG.NOM"); `features` hold for every form (a noun's gender).

    `unverified` lists bundles whose form no curator has verified yet (LLM proposals)."""

    forms: dict[str, str]
    lemma: str | None = None
    features: str = ""
    unverified: frozenset[str] = frozenset()


def modify(value: str, mods: Modifiers) -> str:
    for m in mods:
        value = m(value)
    return value


# -- how a dimension gets its feature in a feature combination ------------------------------------


@dataclass(frozen=True, slots=True)
class Fixed:
    """A feature written in the key (`obj.PL`)."""

    feature: str


@dataclass(frozen=True, slots=True)
class Slot:
    """A free dimension (left open or agreed on): the combination's feature at this slot."""

    index: int


@dataclass(frozen=True, slots=True)
class Conditional:
    """`<V1:var.F1|V2>`: the first value whose (slot, feature) conditions all hold, else the default."""

    cases: tuple[tuple[str, tuple[tuple[int, str], ...]], ...]
    default: str | None


@dataclass(frozen=True, slots=True)
class FromWord:
    """A dimension computed from words (STARTSWITH), read from this mention's rendered form."""

    mention: int


@dataclass(frozen=True, slots=True)
class FromNext:
    """A dimension computed from words, read from the word that follows the key in the rendered text."""


FeatureSpec = Fixed | Slot | Conditional
RuleSpec = FeatureSpec | FromWord | FromNext


def feature(spec: FeatureSpec, features: tuple[str, ...]) -> str | None:
    """The feature a spec gives in a combination; None when no condition holds and there is no default."""
    match spec:
        case Slot(index):
            return features[index]
        case Fixed(label):
            return label
        case Conditional(cases, default):
            for value, conds in cases:
                if all(features[i] == f for i, f in conds):
                    return value
            return default


# -- placeholders, rules and calls as the template uses them ----------------------------------------


@dataclass(frozen=True, slots=True)
class Pool:
    """The values of one placeholder root, shared by its numbered copies."""

    root: str
    dims: tuple[str, ...]
    domains: dict[str, tuple[str, ...]]  # dimension -> the features some value has
    tables: tuple[dict[tuple[str, ...], tuple[str, bool]], ...]  # per lexeme: bundle -> (form, verified)
    lemmas: tuple[str, ...]
    plain: bool


@dataclass(frozen=True, slots=True)
class Var:
    """A placeholder (`name`, or a numbered copy `name2` drawing from `name`'s pool)."""

    name: str
    pool: Pool
    mentions: tuple[int, ...]
    slots: tuple[tuple[str, int], ...]  # free dimension -> slot, in the order the text opens them


@dataclass(frozen=True, slots=True)
class Mention:
    """A placeholder key (or function argument) as rendered: how each pool dimension gets its feature."""

    var: str
    spec: tuple[FeatureSpec, ...]
    where: Where


@dataclass(frozen=True, slots=True)
class RuleUse:
    """A language rule's key; `deferred` when a dimension is read from a rendered word."""

    rule: Rule
    spec: tuple[tuple[str, RuleSpec], ...]  # rule dimension -> how it gets its feature
    mods: Modifiers
    where: Where
    raw: str
    deferred: bool


def missing_form(use: RuleUse, feats: dict[str, str], lang: Grammar, template: str | None) -> TemplateError:
    rule = use.rule
    bundle = ".".join(feats[d] for d in rule.dims if d in feats)
    open_ = [d for d in rule.dims if d not in feats]
    more = ""
    if open_:
        first = lang.dims.by_name[open_[0]]
        more = (f" (and {', '.join(open_)} is not given: fix it in the key or agree on it, e.g. "
                f".{first.features[0]} or <x.{first.name}>)")
    return TemplateError(f"rule {rule.name} of {lang.name} has no form for {bundle}{more} in {{{use.raw}}}",
                         use.where, template)


@dataclass(frozen=True, slots=True)
class InlineUse:
    """`{is:x.SG|are:x.PL}`: a value per condition, conditions as (slot, feature)."""

    var: str
    alts: tuple[tuple[str, tuple[tuple[int, str], ...]], ...]
    mods: Modifiers
    where: Where


@dataclass(frozen=True, slots=True)
class Const:
    """A literal argument (`'NOM'`, `3`)."""

    value: int | str


@dataclass(frozen=True, slots=True)
class NestedCall:
    key: int


@dataclass(frozen=True, slots=True)
class FeatureOf:
    """`x.GENDER` as an argument: the feature label, not a form."""

    slot: int


@dataclass(frozen=True, slots=True)
class Word:
    """A placeholder argument: its form as the text shows it."""

    mention: int
    mods: Modifiers


Arg = Const | NestedCall | FeatureOf | Word


@dataclass(frozen=True, slots=True)
class CallUse:
    name: str
    fn: Callable
    takes_lang: bool  # the reference's plain lambdas take no `lang`
    args: tuple[Arg, ...]
    where: Where


# -- the pieces of a rendered text ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Literal:
    text: str


@dataclass(frozen=True, slots=True)
class Placeholder:
    mention: int
    var: str
    tables: tuple[dict[tuple[str, ...], tuple[str, bool]], ...]  # the var's pool's: one lookup less per form
    mods: Modifiers


@dataclass(frozen=True, slots=True)
class FunctionValue:
    key: int
    mods: Modifiers


@dataclass(frozen=True, slots=True)
class RuleValue:
    """A rule key: its value is the combination's unless it is `deferred` (read from a word)."""

    key: int


@dataclass(frozen=True, slots=True)
class InlineValue:
    key: int


Op = Literal | Placeholder | FunctionValue | RuleValue | InlineValue
