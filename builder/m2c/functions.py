"""Template functions: `{$name(arg, ...)}`, a registry with common built-ins, open to registration.

A function gets its arguments resolved per fill (a placeholder key gives its rendered string, a
`placeholder.DIMENSION` argument the feature label, literals stay as written) and the fill's
language as the keyword `lang`. It returns a string or number, or `Forms` when the value has other
inflected forms that an answer checker should recognise as morphological errors, or accepted variants
that are right too.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from builder.errors import BuilderError
from builder.m2c.language import MISSING, Grammar


class FunctionError(BuilderError, ValueError):
    """A function could not compute its value for a fill."""


@dataclass(frozen=True)
class Forms:
    """A function's value with its wrong forms (`others`) and its accepted variants (`accepted`)."""

    value: str
    others: tuple[str, ...] = ()
    accepted: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.value


FUNCTIONS: dict[str, Callable] = {}


def register_function(name: str | None = None):
    """Decorator: make a function available to every template as `{$name(...)}`."""

    def deco(fn: Callable) -> Callable:
        FUNCTIONS[name or fn.__name__] = fn
        return fn

    return deco


def as_number(value, lang: Grammar) -> int:
    """An integer from an int, a digit string or a number word of the language (any form)."""
    if isinstance(value, int):
        return value
    if isinstance(value, Forms):
        value = value.value
    if value.isdecimal():
        return int(value)
    text = unicodedata.normalize("NFC", str(value)).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    n = lang.number_words.get(text.casefold())
    if n is None:
        raise FunctionError(f"{value!r} is neither digits nor a number word of {lang.name}")
    return n


@register_function("sum")
def _sum(*args, lang: Grammar) -> int:
    return sum(as_number(a, lang) for a in args)


@register_function("diff")
def _diff(a, b, *, lang: Grammar) -> int:
    return as_number(a, lang) - as_number(b, lang)


@register_function("mul")
def _mul(a, b, *, lang: Grammar) -> int:
    return as_number(a, lang) * as_number(b, lang)


@register_function("words")
def _words(n, *features, lang: Grammar) -> Forms:
    """The number word for n in the features given (e.g. gender and case); the other forms come along."""
    value = as_number(n, lang)
    rule = lang.numbers.get(value)
    if rule is None:
        raise FunctionError(f"{lang.name} has no number word for {value} (add it under numbers: in its language file)")
    wanted: dict[str, str] = {}
    for f in features:
        dim = lang.dims.of_feature.get(str(f))
        if dim is None:
            raise FunctionError(f"{f!r} is not a feature of {lang.name}")
        if dim in rule.dims:
            wanted[dim] = str(f)
    form = rule.lookup(wanted)
    if form is MISSING:
        raise FunctionError(f"number {value} has no single form for {'.'.join(wanted.values()) or 'no features'} "
                            f"(its forms vary by {', '.join(d for d in rule.dims if d not in wanted)})")
    accepted = rule.accepted(wanted)
    return Forms(form, tuple(sorted(rule.forms - {form, *accepted})), accepted)  # other forms' variants too (ثمان)


@register_function("clock")
def _clock(hour, since=None, *, lang: Grammar) -> Forms:
    """The time of day at a full hour (any integer, taken modulo 24), from the language's `clock:` table:
    Swahili counts the hours from sunrise and sunset (saa moja asubuhi is 7 a.m.). With `since`, the
    hour a context states, the time without its part of the day ("saa tano" for "saa tano asubuhi") is
    accepted too when that part is the context's: the reader carries it over, nothing is left open."""
    if not lang.clock:
        raise FunctionError(f"{lang.name} has no clock (add clock: with the hours 0-23 to its language file)")
    said = lang.clock[as_number(hour, lang) % 24]
    accepted = said[1:]
    if since is not None:
        parts = {s.split()[-1] for s in said} & lang.day_parts
        if parts & {s.split()[-1] for s in lang.clock[as_number(since, lang) % 24]}:
            accepted += tuple(dict.fromkeys(s.rsplit(" ", 1)[0] for s in said if s.split()[-1] in parts))
    return Forms(said[0], (), accepted)
