"""Answer validation for M2C question answering: is a model's reply the gold answer?

A reply is correct when it equals the gold answer or an alternative after normalisation (Unicode
NFC, case, whitespace, punctuation, any script's decimal digits, Arabic vowel marks), when it names
the same number in words or digits (where the language has a number table), or when it matches an
alternative given as `re:<pattern>`. A reply that is another form of the gold lexeme (`answer_forms`: "Два" for "Две",
"Isoäidilleni" for "Isoäidilläni") is a morphological error rather than a plain miss (M2C paper §7.3).

Elliptical and whole-sentence replies count alike, in every language, by one rule: a reply is also
correct when it holds the gold answer (or an accepted variant) and otherwise only words of the
question, in any of their forms, and the language's reply words (`replies.words`: pronouns, copulas,
"the answer is"), keeping the question's negation and adding none: "The cup is behind the bed." and
"It's behind the bed." for "Behind the bed.", "John is not a doctor." for "John.", but neither "John is a
doctor." nor "Not John.". After the gold and a word that only the question has (its predicate: "weaker"),
such a sentence may also repeat up to two words of the context ("Sarah is weaker than David.", and where words
are not spaced only after a reply word and before more of the question's: "陈静比张伟穷。", not "三个橙子"),
but not put a word of the context first ("Sarah and David") nor say the question's predicate twice ("Peter is
not a doctor, Maria is not a doctor"). A sentence built around another form of the gold lexeme is a morphological
error. A language's `replies.wrong` patterns are forms that are never right (Chinese 二 before a
measure word): such a reply naming the right number is a morphological error, not a match.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel

from builder.m2c.language import Grammar, load_language

How = Literal["exact", "normalised", "alternative", "numeral", "regex", "sentence", "morphological", "miss"]


class ReplyVerdict(BaseModel):
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


def match_key(text: str, language: Grammar | None = None, *, numbers: bool = False) -> str:
    """The form in which a reply and an answer are compared: NFC, case-folded, punctuation and symbols as
    spaces, digits in ASCII, Arabic vowel marks dropped, single spaces; with `numbers`, number words of the
    language become digits."""
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


def _number_pattern(language: Grammar) -> tuple[re.Pattern, dict[str, int]]:
    return _number_pattern_for(language.code, language.spaced, tuple(sorted(language.number_words.items())))


def _get(test: Any, key: str):
    return test[key] if isinstance(test, Mapping) else getattr(test, key)


def validate(reply: str, test: Any, language: str | Grammar) -> ReplyVerdict:
    """Judge a reply against a test (an `M2CTest` or a release row with answer, alternatives, answer_forms
    and question)."""
    lang = load_language(language) if isinstance(language, str) else language
    answer = _get(test, "answer")
    alternatives = list(_get(test, "alternatives") or [])
    forms = list(_get(test, "answer_forms") or [])
    regexes = [a[3:] for a in alternatives if a.startswith("re:")]
    golds = [answer, *(a for a in alternatives if not a.startswith("re:"))]
    if reply.strip() == answer.strip():
        return ReplyVerdict(correct=True, morphological_error=False, matched=answer, how="exact")
    r = match_key(reply, lang)
    for i, gold in enumerate(golds):
        if match_key(gold, lang) == r:
            return ReplyVerdict(correct=True, morphological_error=False, matched=gold, how="normalised" if i == 0 else "alternative")
    for form in forms:
        if match_key(form, lang) == r:
            return ReplyVerdict(correct=False, morphological_error=True, matched=form, how="morphological")
    wrong = any(p.search(r) for p in lang.replies.wrong)
    rn = match_key(reply, lang, numbers=True)
    for gold in golds:
        if match_key(gold, lang, numbers=True) == rn:
            if wrong:
                return ReplyVerdict(correct=False, morphological_error=True, matched=gold, how="morphological")
            return ReplyVerdict(correct=True, morphological_error=False, matched=gold, how="numeral")
    for pattern in regexes:
        if re.fullmatch(pattern, reply.strip(), re.I) or re.fullmatch(pattern, r, re.I):
            return ReplyVerdict(correct=True, morphological_error=False, matched="re:" + pattern, how="regex")
    question = test.get("question") if isinstance(test, Mapping) else getattr(test, "question", "")
    context = (test.get("context") if isinstance(test, Mapping) else getattr(test, "context", "")) or ""
    if question:  # the longest answer the sentence states decides ("He was a engineer": not "engineer"), then
        # words as written over numbers read as digits ("Queda una.": the wrong gender, not "1"), then the gold
        found = [(span, not numbers, right, c) for numbers in (False, True) for right, cands in ((True, golds), (False, forms))
                 for c in cands if (span := _in_sentence(reply, c, question, context, lang, numbers))]
        if found:
            *_, right, c = max(found, key=lambda x: x[:3])
            if right and not wrong:
                return ReplyVerdict(correct=True, morphological_error=False, matched=c, how="sentence")
            return ReplyVerdict(correct=False, morphological_error=True, matched=c, how="morphological")
    return ReplyVerdict(correct=False, morphological_error=False, matched=None, how="miss")


def _tokens(text: str, lang: Grammar, numbers: bool) -> list[list[str]]:
    """Words of a text, per stretch between punctuation marks (characters where words are not spaced)."""
    out = []
    pieces = "".join("\n" if unicodedata.category(ch)[0] in "PS" else ch for ch in unicodedata.normalize("NFC", text))
    for piece in pieces.split("\n"):
        words = match_key(piece, lang, numbers=numbers).split()
        if not lang.spaced:
            words = [ch for w in words for ch in (re.findall(r"\d+|\D", w))]
        if words:
            out.append(words)
    return out


def _bare(word: str, clitics: tuple[str, ...]) -> str:
    """A word without a clitic written onto it (الأفقر -> أفقر), where two letters or more remain."""
    return next((word[len(c):] for c in clitics if word.startswith(c) and len(word) - len(c) >= 2), word)


def _akin(word: str, other: str, spaced: bool, clitics: tuple[str, ...] = ()) -> bool:
    """The same word, or (spaced languages) another form of it: a shared stem of four letters or more
    that leaves at most two letters of the shorter word (груши ~ груш, queda ~ quedan), also once a
    clitic is taken off either (أفقر ~ الأفقر)."""
    if word == other or (clitics and _bare(word, clitics) == _bare(other, clitics)):
        return True
    if not spaced or min(len(word), len(other)) < 4:
        return False
    stem = len(os.path.commonprefix([word, other]))
    return stem >= 4 and stem >= min(len(word), len(other)) - 2


ECHOED = 2  # words of the context a sentence may repeat after the gold ("than David")


def _in_sentence(reply: str, candidate: str, question: str, context: str, lang: Grammar, numbers: bool) -> int:
    """How many words of the reply the candidate is, when the reply states it in a sentence made of the
    question's words, and after them at most `ECHOED` words of the context (see the module); 0 when it does not."""
    said = [w for part in _tokens(reply, lang, numbers) for w in part]
    cand = [w for part in _tokens(candidate, lang, numbers) for w in part]
    if not cand or len(cand) >= len(said):
        return 0
    at = next((i for i in range(len(said) - len(cand) + 1) if said[i:i + len(cand)] == cand), -1)
    if at < 0:
        return 0
    rest = said[:at] + said[at + len(cand):]
    asked = _tokens(question, lang, numbers)
    words = {w for part in asked for w in part}
    negation = lang.replies.negation
    negated = any(w in negation for w in words)
    scope = {w for part in asked for i, n in enumerate(part) if n in negation for w in part[i + 1:]}

    clitics = lang.replies.clitics

    def asks(w: str) -> bool:  # a word of the question's own, not one any reply may hold
        return w not in lang.replies.words and w not in negation and any(_akin(w, q, lang.spaced, clitics) for q in words)

    told = {w for part in _tokens(context, lang, numbers) for w in part}
    after = said[at + len(cand):]
    content = [w for w in said if asks(w)]
    echo = bool(after) and (after[0] in lang.replies.words or after[0] in negation or asks(after[0])) and any(
        asks(w) and not any(_akin(w, c, lang.spaced, clitics) for c in told) for w in after) and len(content) == len(set(content))
    echoed, first, last = 0, -1, -1
    for i, w in enumerate(rest):
        if w in negation:
            if not negated:
                return 0
        elif w not in lang.replies.words and not any(_akin(w, q, lang.spaced, clitics) for q in words):
            echoed, last = echoed + 1, i - at
            first = last if first < 0 else first
            if not (echo and i >= at and echoed <= ECHOED and any(_akin(w, c, lang.spaced, clitics) for c in told)):
                return 0
    if echoed and not lang.spaced and not (first > 0 and after[first - 1] in lang.replies.words
                                           and any(asks(w) for w in after[last + 1:])):
        return 0  # unspaced, an echo only follows a reply word and precedes the question's ("陈静比张伟穷", not "三个橙子")
    before = at - 1
    while before >= 0 and said[before] in lang.replies.words:
        before -= 1
    if before >= 0 and said[before] in negation:  # "Not the camera.": the negation is the answer's
        return 0
    for i, w in enumerate(said):  # a negation negates what the question's does ("John is not a doctor", "John isn't")
        if w in negation and i < len(said) - 1 and not any(_akin(x, q, lang.spaced) for x in said[i + 1:] for q in scope):
            return 0
    dropped = not any(w in negation for w in rest) and any(  # "John is a doctor." for "Who is not a doctor?"
        _akin(w, q, lang.spaced) for w in rest if w not in lang.replies.words for q in scope)
    return 0 if dropped else len(cand)
