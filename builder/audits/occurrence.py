"""A minimal pair names each of its two concepts once: its own, in its own sentence, and never the other's.

A concept that occurs a second time outside its span (球用于击球, "A ball is used for hitting a ball")
defeats span location and lets the property give the concept away; a sentence that also holds the
other concept's word (Vietnamese "ong", bee, inside "ong bắp cày", wasp) lets a model match the
positive inside the negative. Spaced scripts are matched word by word (`builder.audits.words`),
unspaced ones (Chinese, Japanese) character by character. Pure functions over strings.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from typing import NamedTuple

from builder.audits.words import BETWEEN, bare, words


class Side(NamedTuple):
    """One sentence of a pair with its concept: where the span is and the names it goes by (verified word, form).
    A plain tuple: the release check builds two per released pair."""

    sentence: str
    span: tuple[int, int]
    names: tuple[str, ...]


def names(word: str | None, form: str | None) -> tuple[str, ...]:
    """The names a concept goes by in a sentence: its verified word, and the form recorded for it when that differs."""
    return (word, form) if word and form and form != word else (word,) if word else (form,) if form else ()


@lru_cache(maxsize=65536)
def _name_words(name: str) -> tuple[str, ...]:
    """A name's folded words (names repeat across a language's pairs: each is split once)."""
    return tuple(w for w, _, _ in words(name))


@lru_cache(maxsize=65536)
def _needle(name: str) -> str:
    """A name as an unspaced script's sentence is searched for (no case in these scripts)."""
    return unicodedata.normalize("NFC", name).strip()


class _Sentence:
    """A sentence as names are looked for in it: its words read once, indexed by each word (and each word without
    a prefixed particle), for all the names looked for."""

    def __init__(self, sentence: str, *, spaced: bool, script: str) -> None:
        self.sentence, self.spaced = sentence, spaced
        self._have = words(sentence) if spaced else []
        self._starts: dict[str, list[int]] = {}
        for i, (w, _, _) in enumerate(self._have):
            for b in bare(w, script):
                self._starts.setdefault(b, []).append(i)

    def find(self, name: str, parts: tuple[tuple[int, int], ...] = ()) -> list[tuple[int, int]]:
        """Where `name` occurs, as character offsets; only occurrences inside one of `parts` (offset ranges)
        when they are given."""
        if not self.spaced:
            needle = _needle(name)
            found, at = [], self.sentence.find(needle) if needle else -1
            while at >= 0:
                found.append((at, at + len(needle)))
                at = self.sentence.find(needle, at + len(needle))
        else:
            want, have = _name_words(name), self._have
            found = [(have[i][1], have[i + len(want) - 1][2]) for i in (self._starts.get(want[0], ()) if want else ())
                     if i + len(want) <= len(have) and all(have[i + j][0] == want[j] for j in range(1, len(want)))]
        return [(s, e) for s, e in found if any(lo <= s and e <= hi for lo, hi in parts)] if parts else found


def _absent(names: tuple[str, ...], text: str, folded: str) -> bool:
    """True when none of `names` can occur in `text` (case-folded: `folded`), a part of an NFC sentence of a spaced
    script. A name occurs where its folded words are consecutive words (the first may follow a prefixed particle),
    so they are parts of the case-folded text and, once runs of other characters are made one space, there joined
    by spaces, the last ending a word: `words` splits where `BETWEEN` does and folds a word as NFC, case-folded,
    and a word of an NFC text is NFC itself. The cheap test first, the spaced-out one for the names it leaves."""
    for name in names:
        want = _name_words(name)
        if all(map(folded.__contains__, want)) and " ".join(want) + " " in f"{BETWEEN.sub(' ', text).casefold()} ":
            return False
    return True


def _clear_side(sentence: str, span: tuple[int, int], own: tuple[str, ...], other: tuple[str, ...], spaced: bool) -> bool:
    """True when no name can occur where the rule looks in one sentence: the other concept's names anywhere, its
    own names outside its span (unspaced scripts: a name occurs as its exact text; spaced ones: `_absent`, never
    for a sentence that is not NFC)."""
    start, end = span
    before, after = sentence[:start], sentence[end:]
    if not spaced:
        return (not any(_needle(n) in sentence for n in other)
                and not any(_needle(n) in before or _needle(n) in after for n in own))
    if not unicodedata.is_normalized("NFC", sentence):
        return False
    folded = sentence.casefold()
    same = len(folded) == len(sentence)  # each character folded to one: the folded text's offsets are the sentence's
    return (_absent(other, sentence, folded)
            and _absent(own, before, folded[:start] if same else before.casefold())
            and _absent(own, after, folded[end:] if same else after.casefold()))


def clear(acceptable: Side, unacceptable: Side, *, spaced: bool) -> bool:
    """True when `problems` has nothing to say, found without reading the sentences word by word: the rule's own
    shortcut, exact, not a looser filter. Most pairs end here."""
    return (_clear_side(acceptable.sentence, acceptable.span, acceptable.names, unacceptable.names, spaced)
            and _clear_side(unacceptable.sentence, unacceptable.span, unacceptable.names, acceptable.names, spaced))


def occurrences(sentence: str, name: str, *, spaced: bool, script: str) -> list[tuple[int, int]]:
    """Where `name` occurs in `sentence`, as character offsets: spaced scripts word by word (a first word also
    after a prefixed particle), unspaced ones as the exact text."""
    return _Sentence(sentence, spaced=spaced, script=script).find(name)


def problems(acceptable: Side, unacceptable: Side, *, spaced: bool, script: str) -> list[str]:
    """What is wrong with how the pair names its concepts; empty when each is named once, in its own sentence.

    The one definition of the rule: the audit (`builder.audits.run`) flags what it returns and the release
    check (`builder.releases.checks`) refuses it, on every pair, with no looser filter in front (`clear` is
    the rule's own exact shortcut)."""
    return [] if clear(acceptable, unacceptable, spaced=spaced) else _read(acceptable, unacceptable, spaced=spaced,
                                                                             script=script)


def _read(acceptable: Side, unacceptable: Side, *, spaced: bool, script: str) -> list[str]:
    """The rule, the sentences read word by word."""
    out = []
    for role, own, other in (("acceptable", acceptable, unacceptable), ("unacceptable", unacceptable, acceptable)):
        text = _Sentence(own.sentence, spaced=spaced, script=script)
        start, end = own.span
        outside = ((0, start), (end, len(own.sentence)))
        again = sorted({o for n in own.names for o in text.find(n, outside)})
        if again:
            out.append(f"the {role} concept occurs again outside its span in {own.sentence!r} "
                       f"(at {', '.join(repr(own.sentence[s:e]) for s, e in again)})")
        if any(text.find(n) for n in other.names):
            other_role = "unacceptable" if role == "acceptable" else "acceptable"
            out.append(f"the {role} sentence {own.sentence!r} contains the {other_role} concept "
                       f"({' / '.join(dict.fromkeys(other.names))})")
    return out
