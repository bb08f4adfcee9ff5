"""Answer validation for M2C question answering: is a model's reply the gold answer?

A reply is correct when it equals the gold answer or an alternative after normalisation (Unicode
NFC, case, whitespace, punctuation, any script's decimal digits, Arabic vowel marks), when it names
the same number in words or digits (where the language has a number table), or when it matches an
alternative given as `re:<pattern>`. A reply that is another form of the gold lexeme (`answer_forms`: "Два" for "Две",
"Isoäidilleni" for "Isoäidilläni") is a morphological error rather than a plain miss (M2C paper §7.3).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel

from builder.m2c.language import Language, load_language

How = Literal["exact", "normalised", "alternative", "numeral", "regex", "morphological", "miss"]


class Verdict(BaseModel):
    correct: bool
    morphological_error: bool
    matched: str | None
    how: How


_ARABIC_MARKS = frozenset(map(chr, [*range(0x064B, 0x0660), 0x0670, 0x0640]))  # vowel marks, tatweel


def _strip_punct(text: str) -> str:
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in _ARABIC_MARKS:  # optional in writing: طبيبًا and طبيبا are the same word
            continue
        if cat.startswith("P") or cat.startswith("S"):
            out.append(" ")
        elif cat == "Nd":
            out.append(str(unicodedata.digit(ch)))
        else:
            out.append(ch)
    return "".join(out)


def normalise(text: str, language: Language | None = None, *, numbers: bool = False) -> str:
    """NFC, case-folded, punctuation and symbols as spaces, digits in ASCII, Arabic vowel marks dropped,
    single spaces; with `numbers`, number words of the language become digits."""
    text = _strip_punct(unicodedata.normalize("NFC", text).casefold())
    text = " ".join(text.split())
    if numbers and language is not None and language.numbers:
        pattern, table = _number_pattern(language)
        text = pattern.sub(lambda m: str(table[m.group(0)]), text)
        text = " ".join(text.split())
    return text


@lru_cache(maxsize=64)
def _number_pattern_for(code: str, spaced: bool, words: tuple[tuple[str, int], ...]) -> tuple[re.Pattern, dict[str, int]]:
    table = {_strip_punct(w).strip(): n for w, n in words}
    alts = "|".join(re.escape(w) for w in sorted(table, key=len, reverse=True) if w)
    pattern = re.compile(rf"(?<!\w)(?:{alts})(?!\w)" if spaced else f"(?:{alts})")
    return pattern, table


def _number_pattern(language: Language) -> tuple[re.Pattern, dict[str, int]]:
    return _number_pattern_for(language.code, language.spaced, tuple(sorted(language.number_words.items())))


def _get(test: Any, key: str):
    return test[key] if isinstance(test, Mapping) else getattr(test, key)


def validate(reply: str, test: Any, language: str | Language) -> Verdict:
    """Judge a reply against a test (an `M2CTest` or a release row with answer, alternatives, answer_forms)."""
    lang = load_language(language) if isinstance(language, str) else language
    answer = _get(test, "answer")
    alternatives = list(_get(test, "alternatives") or [])
    forms = list(_get(test, "answer_forms") or [])
    regexes = [a[3:] for a in alternatives if a.startswith("re:")]
    golds = [answer, *(a for a in alternatives if not a.startswith("re:"))]
    if reply.strip() == answer.strip():
        return Verdict(correct=True, morphological_error=False, matched=answer, how="exact")
    r = normalise(reply, lang)
    for i, gold in enumerate(golds):
        if normalise(gold, lang) == r:
            return Verdict(correct=True, morphological_error=False, matched=gold, how="normalised" if i == 0 else "alternative")
    for form in forms:
        if normalise(form, lang) == r:
            return Verdict(correct=False, morphological_error=True, matched=form, how="morphological")
    rn = normalise(reply, lang, numbers=True)
    for gold in golds:
        if normalise(gold, lang, numbers=True) == rn:
            return Verdict(correct=True, morphological_error=False, matched=gold, how="numeral")
    for pattern in regexes:
        if re.fullmatch(pattern, reply.strip(), re.I) or re.fullmatch(pattern, r, re.I):
            return Verdict(correct=True, morphological_error=False, matched="re:" + pattern, how="regex")
    return Verdict(correct=False, morphological_error=False, matched=None, how="miss")
