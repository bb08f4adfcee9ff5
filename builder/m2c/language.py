"""Languages as data: dimensions, rules, modifiers, post-processing, number words and a clock.

A language file (`data/m2c/languages/<code>.yaml`) declares everything the engine knows about a
language, so adding or correcting one never touches code. Feature labels follow UniMorph where it has
them; language-specific dimensions (Italian STARTSWITH, Chinese CLASSIFIER_TYPE) sit beside them.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from builder.inputs import yaml_text_problem
from builder.m2c.errors import LanguageDataError
from builder.paths import data_dir


@dataclass(frozen=True)
class Dimension:
    """A named set of feature labels; `computed` ones are derived from a word by ordered patterns."""

    name: str
    features: tuple[str, ...]
    sampleable: bool = True
    patterns: tuple[tuple[str, re.Pattern], ...] = ()
    default: str | None = None

    @property
    def computed(self) -> bool:
        return bool(self.patterns) or self.default is not None

    def compute(self, word: str) -> str | None:
        """The feature of a rendered word (None for an empty word), first matching pattern wins."""
        word = word.strip().lower()
        if not word:
            return None
        for feature, pattern in self.patterns:
            if pattern.search(word):
                return feature
        return self.default


class Dimensions:
    """Name -> Dimension and feature -> dimension name (labels are unique within one collection)."""

    def __init__(self, dims: list[Dimension]) -> None:
        self.by_name: dict[str, Dimension] = {}
        self.of_feature: dict[str, str] = {}
        for d in dims:
            if d.name in self.by_name:
                raise LanguageDataError(f"dimension {d.name} declared twice")
            self.by_name[d.name] = d
            for f in d.features:
                if f in self.of_feature:
                    raise LanguageDataError(f"feature {f} is in both {self.of_feature[f]} and {d.name}")
                if f in self.by_name or f == d.name:
                    raise LanguageDataError(f"feature {f} has the name of a dimension")
                self.of_feature[f] = d.name
        self.order = {name: i for i, name in enumerate(self.by_name)}

    def __contains__(self, name: str) -> bool:
        return name in self.by_name

    def __getitem__(self, name: str) -> Dimension:
        return self.by_name[name]

    def bundle(self, text: str, *, what: str) -> dict[str, str]:
        """Parse a dot-joined, order-insensitive bundle ("SG.MASC") into {dimension: feature}."""
        out: dict[str, str] = {}
        for label in (p for p in text.split(".") if p):
            dim = self.of_feature.get(label)
            if dim is None:
                raise LanguageDataError(f"{what}: unknown feature {label!r}")
            if dim in out and out[dim] != label:
                raise LanguageDataError(f"{what}: two features of {dim} ({out[dim]}, {label})")
            out[dim] = label
        return out

    def sort(self, dims) -> tuple[str, ...]:
        return tuple(sorted(dims, key=self.order.__getitem__))


MISSING = object()


@dataclass
class Rule:
    """A deterministic value per feature bundle (articles, pronouns, classifiers, number words...).

    Bundles not mentioning one of the rule's dimensions hold for all its features (expansion), and a
    more specific bundle wins over a less specific one. A value may be a list: the first is generated,
    the others are accepted in answers too (狗 counts with 只 or 条; Arabic 8 is ثماني or ثمان).
    """

    name: str
    dims: tuple[str, ...]
    table: dict[tuple[str, ...], str]
    variants: dict[tuple[str, ...], tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def build(cls, name: str, entries: dict[str, Any], dims: Dimensions) -> Rule:
        parsed = []
        for bundle, value in entries.items():
            values = value if isinstance(value, list) else [value]
            if not values or not all(isinstance(v, str) for v in values):
                raise LanguageDataError(f"rule {name}, bundle {bundle}: the value must be a string or a list of strings")
            parsed.append((dims.bundle(str(bundle), what=f"rule {name}"), tuple(values)))
        rule_dims = dims.sort({d for b, _ in parsed for d in b})
        table: dict[tuple[str, ...], tuple[str, ...]] = {}
        specificity: dict[tuple[str, ...], int] = {}
        for b, values in parsed:
            axes = [(b[d],) if d in b else dims[d].features for d in rule_dims]
            for key in itertools.product(*axes):
                if specificity.get(key, -1) < len(b):
                    table[key], specificity[key] = values, len(b)
                elif specificity[key] == len(b) and table[key] != values:
                    raise LanguageDataError(f"rule {name}: bundles give both {table[key][0]!r} and {values[0]!r} "
                                            f"for {'.'.join(key)}")
        return cls(name, rule_dims, {k: v[0] for k, v in table.items()}, {k: v[1:] for k, v in table.items() if len(v) > 1})

    def _keys(self, features: dict[str, str]) -> list[tuple[str, ...]]:
        if all(d in features for d in self.dims):
            key = tuple(features[d] for d in self.dims)
            return [key] if key in self.table else []
        return [k for k in self.table if all(features.get(d, f) == f for d, f in zip(self.dims, k))]

    def lookup(self, features: dict[str, str]) -> str | object:
        """The value for the requested features; MISSING when no bundle serves them.

        Dimensions the request leaves open are allowed when every candidate gives the same value.
        """
        values = {self.table[k] for k in self._keys(features)}
        return values.pop() if len(values) == 1 else MISSING

    def accepted(self, features: dict[str, str]) -> tuple[str, ...]:
        """The accepted variants of the value `lookup` gives for these features (never generated)."""
        return tuple(dict.fromkeys(v for k in self._keys(features) for v in self.variants.get(k, ())))

    @property
    def forms(self) -> set[str]:
        """Every value and accepted variant."""
        return set(self.table.values()) | {v for vs in self.variants.values() for v in vs}


def capitalize(s: str) -> str:
    """Upper-case the first letter only ("new York" -> "New York"; unlike str.capitalize)."""
    for i, ch in enumerate(s):
        if ch.isalpha():
            return s[:i] + ch.upper() + s[i + 1 :]
    return s


BUILTIN_MODIFIERS: dict[str, Callable[[str], str]] = {
    "TO_CAPITALIZE": capitalize,
    "TO_UPPER": str.upper,
    "TO_LOWER": str.lower,
    "TO_TITLE": lambda s: " ".join(capitalize(w) for w in s.split(" ")),
}


def _declared_modifier(name: str, spec: dict) -> Callable[[str], str]:
    prefix, suffix = spec.get("prefix", ""), spec.get("suffix", "")
    subs = [(re.compile(p), r) for p, r in spec.get("replace", [])]

    def apply(s: str) -> str:
        for p, r in subs:
            s = p.sub(r, s)
        return prefix + s + suffix if s else s

    if not (prefix or suffix or subs):
        raise LanguageDataError(f"modifier {name}: give a prefix, a suffix or replace patterns")
    return apply


def _keep_case(src: str, repl: str) -> str:
    return capitalize(repl) if src[:1].isupper() else repl


def _alternation(keys) -> str:
    return "|".join(r"\s+".join(re.escape(w) for w in k.split()) for k in sorted(keys, key=len, reverse=True))


@dataclass
class PostProcess:
    """Clean-up applied to every rendered text of a language, in this order:
    elision, contractions, apostrophe gluing, whitespace, punctuation spacing, sentence capitals.
    Each step is one regular expression, whatever the size of its table."""

    elision: re.Pattern | None = None
    elided: dict[str, str] = field(default_factory=dict)
    contractions: re.Pattern | None = None
    contracted: dict[str, str] = field(default_factory=dict)
    glue: re.Pattern | None = None
    tight: re.Pattern | None = None
    capitalize_sentences: bool = True

    @classmethod
    def build(cls, spec: dict) -> PostProcess:
        pp = cls(capitalize_sentences=spec.get("capitalize_sentences", True))
        el = spec.get("elision")
        if el:
            guard = "".join(f"(?!{w})" for w in el.get("except", []))  # word beginnings, as patterns
            pp.elided = {w.lower(): short for w, short in el["words"].items()}
            pp.elision = re.compile(rf"(?<!\w)({_alternation(pp.elided)})\s+(?={guard}(?:{el['before']}))", re.I)
        table = spec.get("contractions") or {}
        if table:
            pp.contracted = {" ".join(k.lower().split()): v for k, v in table.items()}
            plain = [k for k in table if not k.endswith("'")]
            elided = [k for k in table if k.endswith("'")]
            alts = [rf"(?:{_alternation(plain)})(?!\w)"] if plain else []
            alts += [f"(?:{_alternation(elided)})"] if elided else []
            pp.contractions = re.compile(rf"(?<!\w)(?:{'|'.join(alts)})", re.I)
        glued = spec.get("glue_after_apostrophe") or []
        if glued:
            alts = "|".join(sorted((re.escape(w) for w in glued), key=len, reverse=True))
            pp.glue = re.compile(rf"(?<!\w)((?:{alts})['’])\s+", re.I)
        tight = spec.get("no_space_before", ".,!?;:")
        if tight:
            pp.tight = re.compile(rf"\s+([{re.escape(tight)}])")
        return pp

    def __call__(self, text: str) -> str:
        if self.elision is not None:
            text = self.elision.sub(lambda m: _keep_case(m.group(1), self.elided[m.group(1).lower()]), text)
        if self.contractions is not None:
            text = self.contractions.sub(
                lambda m: _keep_case(m.group(0), self.contracted[" ".join(m.group(0).lower().split())]), text)
        if self.glue is not None:
            text = self.glue.sub(r"\1", text)
        text = " ".join(text.split())
        if self.tight is not None:
            text = self.tight.sub(r"\1", text)
        if self.capitalize_sentences and text:
            text = capitalize(text[:1]) + text[1:] if text[:1].isalpha() else text
            text = _SENTENCE.sub(lambda m: m.group(1) + m.group(2).upper(), text)
        return text


_SENTENCE = re.compile(r"([.?!]\s+)(\w)")


@dataclass(frozen=True)
class Replies:
    """What answer validation needs to know of a language (`replies:` in its file): the words a
    whole-sentence reply may add to the question's (pronouns, copulas, "the answer is"), its negation
    words, forms that are never right (Chinese 二 before a measure word, where 两 belongs), and clitics
    a word of the reply may have or lack against the question's (Arabic ال)."""

    words: frozenset[str] = frozenset()
    negation: frozenset[str] = frozenset()
    wrong: tuple[re.Pattern, ...] = ()
    clitics: tuple[str, ...] = ()  # written onto the next word (Arabic ال): أفقر is the question's الأفقر


def _replies(raw: Any) -> Replies:
    raw = raw or {}
    unknown = set(raw) - {"words", "negation", "wrong", "clitics"}
    if unknown:
        raise LanguageDataError(f"replies: unknown keys {sorted(unknown)} (words, negation, wrong, clitics)")
    return Replies(_folded(raw.get("words")), _folded(raw.get("negation")), tuple(re.compile(p) for p in raw.get("wrong") or []),
                   tuple(sorted(_folded(raw.get("clitics")), key=len, reverse=True)))


def _folded(words: Any) -> frozenset[str]:
    if not all(isinstance(w, str) for w in words or []):
        raise LanguageDataError(f"replies: {words!r}: give words as strings (quote no, on, yes)")
    return frozenset(unicodedata.normalize("NFC", str(w)).casefold() for w in words or [])


INLINE_RULE_NAME = re.compile(r"exp_\d+")


@dataclass
class Grammar:
    """A language's grammar as the engine uses it (or a bare set of custom dimensions): its dimensions, rules,
    number words and the rest of its data file; `builder.records.Language` is the language as a benchmark declares it."""

    code: str
    name: str
    dims: Dimensions
    rules: dict[str, Rule] = field(default_factory=dict)
    modifiers: dict[str, Callable[[str], str]] = field(default_factory=lambda: dict(BUILTIN_MODIFIERS))
    post: PostProcess | None = None
    numbers: dict[int, Rule] = field(default_factory=dict)
    clock: dict[int, tuple[str, ...]] = field(default_factory=dict)  # hour 0-23 -> the time of day, accepted variants
    unimorph_ignore: frozenset[str] = frozenset()
    unimorph_map: dict[str, str] = field(default_factory=dict)
    spaced: bool = True  # words separated by spaces (number words are matched as whole words)
    day_parts: frozenset[str] = frozenset()  # words that end a time of day and name its part (asubuhi, usiku)
    replies: Replies = field(default_factory=Replies)
    reference: dict[str, str] = field(default_factory=dict)  # a name of M2C's reference templates -> how to write it here
    _number_words: dict[str, int] | None = field(default=None, repr=False)

    def reference_note(self, name: str) -> str:
        """How a template ported from M2C's reference writes `name` here, for an error about it ('' if unknown)."""
        if note := self.reference.get(name):
            return f" (M2C's reference writes {name}; here: {note})"
        if INLINE_RULE_NAME.fullmatch(name):
            return (f" ({name} is M2C's reference's name for an inline rule; here: a rule's STARTSWITH is computed from "
                    "the word after it, so `<exp_0.STARTSWITH>` is left out; agree with the inline rule's placeholder instead)")
        return ""

    def postprocess(self, text: str) -> str:
        return self.post(text) if self.post else " ".join(text.split())

    @property
    def number_words(self) -> dict[str, int]:
        """Every form of every number word (case-folded) -> its value, for answer normalisation."""
        if self._number_words is None:
            self._number_words = {}
            for n, rule in sorted(self.numbers.items()):
                for form in sorted(rule.forms):
                    self._number_words.setdefault(unicodedata.normalize("NFC", form).casefold(), n)
        return self._number_words


def with_dimensions(language: Grammar, extra: dict[str, Any]) -> Grammar:
    """The language with more dimensions (a template file's own, e.g. which things an adjective fits)."""
    if not isinstance(extra, dict):
        raise LanguageDataError("dimensions: give a mapping of name -> features")
    dims = list(language.dims.by_name.values()) + [_dimension(str(n), s) for n, s in extra.items()]
    return replace(language, dims=Dimensions(dims))


def custom(dimensions: dict[str, list[str]]) -> Grammar:
    """A language-less set of dimensions, e.g. {"d1": ["A", "B"]}, with the built-in modifiers."""
    return Grammar("xx", "custom", Dimensions([Dimension(k, tuple(v)) for k, v in dimensions.items()]))


def languages_dir() -> Path:
    return data_dir() / "m2c" / "languages"


def available() -> list[str]:
    return sorted(p.stem for p in languages_dir().glob("*.yaml"))


class UniMorphSchema(NamedTuple):
    parts_of_speech: frozenset[str]
    dimensions: tuple[Dimension, ...]
    aliases: dict[str, str]  # another spelling real files use -> the schema's label


@cache
def unimorph_schema() -> UniMorphSchema:
    """UniMorph's parts of speech, its universal dimensions and the other spellings of its labels
    (data/m2c/unimorph.yaml)."""
    raw = yaml.safe_load((data_dir() / "m2c" / "unimorph.yaml").read_text(encoding="utf-8"))
    return UniMorphSchema(frozenset(raw["part_of_speech"]),
                          tuple(Dimension(n, tuple(map(str, f))) for n, f in raw["dimensions"].items()),
                          {str(k): str(v) for k, v in (raw.get("aliases") or {}).items()})


@cache
def unimorph_language(code: str, name: str) -> Grammar:
    """What a UniMorph import reads a language's feature labels with.

    UniMorph's labels are universal, so any language imports with them alone. A language file, where
    there is one, comes first: its dimensions, maps and ignores; UniMorph's labels it does not declare
    join its dimension of the same name, or their own dimension, after it.
    """
    base = load_language(code) if code in available() else Grammar(code, name, Dimensions([]))
    taken = dict(base.dims.of_feature)
    extra = {d.name: [f for f in d.features if f not in taken] for d in unimorph_schema().dimensions}
    dims = [Dimension(d.name, d.features + tuple(extra.pop(d.name, ())), d.sampleable, d.patterns, d.default)
            for d in base.dims.by_name.values()]
    dims += [Dimension(n, tuple(f)) for n, f in extra.items() if f]
    return replace(base, dims=Dimensions(dims))


@cache
def load_language(code: str) -> Grammar:
    """The language declared in data/m2c/languages/<code>.yaml."""
    path = languages_dir() / f"{code}.yaml"
    if not path.is_file():
        raise LanguageDataError(f"no M2C language data for {code!r} (have: {', '.join(available())})")
    raw = _read(path)
    try:
        return parse_language(raw)
    except (LanguageDataError, KeyError, TypeError, AttributeError, re.error) as exc:
        raise LanguageDataError(f"{path}: {exc}") from exc


def _read(path: Path) -> Any:
    """A language file's YAML, its text checked first as any user-supplied text is (`builder.inputs`): a file with
    a control character, a lone surrogate or an overlong field is refused with its line and column."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
        found = yaml_text_problem(yaml.compose(text))
        if found:
            node, problem = found
            raise LanguageDataError(f"{path}:{node.start_mark.line + 1}:{node.start_mark.column + 1}: {problem}")
        return yaml.safe_load(text)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise LanguageDataError(f"{path}:{line}: not valid UTF-8 ({exc.reason}): save it as UTF-8") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise LanguageDataError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from exc


def _dimension(name: str, spec: Any) -> Dimension:
    if isinstance(spec, list):
        return Dimension(name, tuple(spec))
    patterns = tuple((feat, re.compile(pat, re.I)) for item in spec.get("computed", []) for feat, pat in item.items())
    dim = Dimension(name, tuple(spec["features"]), spec.get("sampleable", not patterns), patterns, spec.get("default"))
    for feat, _ in patterns:
        if feat not in dim.features:
            raise LanguageDataError(f"dimension {name}: computed feature {feat} is not one of its features")
    return dim


def _clock(raw: Any) -> dict[int, tuple[str, ...]]:
    """`clock:` gives the time of day at every full hour 0-23 as the language says it (a list: the
    first is generated, the others accepted), for the built-in function $clock."""
    if not raw:
        return {}
    clock = {}
    for hour, said in raw.items():
        said = said if isinstance(said, list) else [said]
        if not isinstance(hour, int) or not 0 <= hour <= 23 or not said or not all(isinstance(x, str) for x in said):
            raise LanguageDataError(f"clock, hour {hour!r}: give an hour 0-23 and a string or a list of strings")
        clock[hour] = tuple(said)
    missing = sorted(set(range(24)) - set(clock))
    if missing:
        raise LanguageDataError(f"clock: every hour 0-23 needs its time of day (missing: {', '.join(map(str, missing))})")
    return clock


def parse_language(raw: dict) -> Grammar:
    dims = Dimensions([_dimension(n, s) for n, s in raw["dimensions"].items()])
    rules = {}
    for name, entries in (raw.get("rules") or {}).items():
        if name[-1:].isdigit():
            raise LanguageDataError(f"rule {name}: a rule name cannot end in a digit (digits number duplicate keys)")
        rules[name] = Rule.build(name, entries, dims)
    modifiers = dict(BUILTIN_MODIFIERS)
    for name, spec in (raw.get("modifiers") or {}).items():
        modifiers[name] = _declared_modifier(name, spec)
    numbers = {}
    for n, forms in (raw.get("numbers") or {}).items():  # a list: the first is generated, the others accepted
        entries = {"": forms} if isinstance(forms, (str, list)) else forms
        numbers[int(n)] = Rule.build(f"number {n}", entries, dims)
    clock = _clock(raw.get("clock"))
    unimorph = raw.get("unimorph") or {}
    return Grammar(
        code=raw["code"], name=raw["name"], dims=dims, rules=rules, modifiers=modifiers,
        post=PostProcess.build(raw.get("postprocess") or {}), numbers=numbers, clock=clock,
        unimorph_ignore=frozenset(unimorph.get("ignore", [])), unimorph_map=dict(unimorph.get("map", {})),
        spaced=raw.get("spaced", True), day_parts=frozenset(raw.get("day_parts") or []), replies=_replies(raw.get("replies")),
        reference=_reference(raw.get("reference")),
    )


def _reference(raw: Any) -> dict[str, str]:
    """`reference:` says how this file writes the names (rules, dimensions, features) that M2C's reference
    templates use and it does not have, so that an error about a ported template says how to write it here."""
    if not raw:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise LanguageDataError("reference: give a mapping of a reference name to how it is written here (both strings)")
    return {k: " ".join(v.split()) for k, v in raw.items()}
