"""A minimal pair names each of its two concepts once: its own, in its own sentence, and never the other's.

A concept that occurs a second time outside its span (球用于击球, "A ball is used for hitting a ball")
defeats span location and lets the property give the concept away; a sentence that also holds the
other concept's word (Vietnamese "ong", bee, inside "ong bắp cày", wasp) lets a model match the
positive inside the negative. Spaced scripts are matched word by word (`builder.audits.words`),
unspaced ones (Chinese, Japanese) character by character. Pure functions over strings.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable
from functools import lru_cache

from pydantic import BaseModel

from builder.audits.words import bare, words


class Side(BaseModel):
    """One sentence of a pair with its concept: where the span is and the names it goes by (verified word, form)."""

    sentence: str
    span: tuple[int, int]
    names: tuple[str, ...]


@lru_cache(maxsize=65536)
def _name_words(name: str) -> tuple[str, ...]:
    """A name's folded words (names repeat across a language's pairs: each is split once)."""
    return tuple(w for w, _, _ in words(name))


def _finder(sentence: str, *, spaced: bool, script: str) -> Callable[[str], list[tuple[int, int]]]:
    """Where a name occurs in `sentence`, as character offsets: the sentence read once for all its names."""
    if not spaced:
        def find_unspaced(name: str) -> list[tuple[int, int]]:
            needle = unicodedata.normalize("NFC", name).strip()  # no case in these scripts
            found, at = [], sentence.find(needle) if needle else -1
            while at >= 0:
                found.append((at, at + len(needle)))
                at = sentence.find(needle, at + len(needle))
            return found
        return find_unspaced
    have = words(sentence)
    joined = "\x00".join(w for w, _, _ in have)  # no word holds a NUL: a name's word is in this only inside one word

    def find(name: str) -> list[tuple[int, int]]:
        want = _name_words(name)
        # Each word of a name is (a part of) some word of the sentence wherever the name occurs, so a sentence
        # without one of them is done without the scan; this is the rule's own shortcut, never a looser one.
        if not want or not all(w in joined for w in want):
            return []
        return [(have[i][1], have[i + len(want) - 1][2]) for i in range(len(have) - len(want) + 1)
                if want[0] in bare(have[i][0], script) and all(have[i + j][0] == want[j] for j in range(1, len(want)))]
    return find


def occurrences(sentence: str, name: str, *, spaced: bool, script: str) -> list[tuple[int, int]]:
    """Where `name` occurs in `sentence`, as character offsets: spaced scripts word by word (a first word also
    after a prefixed particle), unspaced ones as the exact text."""
    return _finder(sentence, spaced=spaced, script=script)(name)


def _found(find: Callable[[str], list[tuple[int, int]]], names: Iterable[str]) -> list[tuple[int, int]]:
    return sorted({o for n in names for o in find(n)})


def problems(acceptable: Side, unacceptable: Side, *, spaced: bool, script: str) -> list[str]:
    """What is wrong with how the pair names its concepts; empty when each is named once, in its own sentence.

    The one definition of the rule: the audit (`builder.audits.run`) flags what it returns and the release
    check (`builder.releases.checks`) refuses it, on every pair, with no looser filter in front."""
    out = []
    for role, own, other in (("acceptable", acceptable, unacceptable), ("unacceptable", unacceptable, acceptable)):
        find = _finder(own.sentence, spaced=spaced, script=script)
        start, end = own.span
        again = [(s, e) for s, e in _found(find, own.names) if e <= start or s >= end]
        if again:
            out.append(f"the {role} concept occurs again outside its span in {own.sentence!r} "
                       f"(at {', '.join(repr(own.sentence[s:e]) for s, e in again)})")
        if _found(find, other.names):
            other_role = "unacceptable" if role == "acceptable" else "acceptable"
            out.append(f"the {role} sentence {own.sentence!r} contains the {other_role} concept "
                       f"({' / '.join(dict.fromkeys(other.names))})")
    return out
