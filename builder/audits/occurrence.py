"""A minimal pair names each of its two concepts once: its own, in its own sentence, and never the other's.

A concept that occurs a second time outside its span (球用于击球, "A ball is used for hitting a ball")
defeats span location and lets the property give the concept away; a sentence that also holds the
other concept's word (Vietnamese "ong", bee, inside "ong bắp cày", wasp) lets a model match the
positive inside the negative. Spaced scripts are matched word by word (`builder.audits.words`),
unspaced ones (Chinese, Japanese) character by character. Pure functions over strings.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from pydantic import BaseModel

from builder.audits.words import bare, words


class Side(BaseModel):
    """One sentence of a pair with its concept: where the span is and the names it goes by (verified word, form)."""

    sentence: str
    span: tuple[int, int]
    names: tuple[str, ...]


def occurrences(sentence: str, name: str, *, spaced: bool, script: str) -> list[tuple[int, int]]:
    """Where `name` occurs in `sentence`, as character offsets."""
    if not name.strip():
        return []
    if not spaced:
        text, needle = sentence, unicodedata.normalize("NFC", name).strip()  # no case in these scripts
        found, at = [], text.find(needle)
        while at >= 0:
            found.append((at, at + len(needle)))
            at = text.find(needle, at + len(needle))
        return found
    have, want = words(sentence), [w for w, _, _ in words(name)]
    return [(have[i][1], have[i + len(want) - 1][2]) for i in range(len(have) - len(want) + 1)
            if want[0] in bare(have[i][0], script) and all(have[i + j][0] == want[j] for j in range(1, len(want)))]


def _found(side: Side, names: Iterable[str], *, spaced: bool, script: str) -> list[tuple[int, int]]:
    return sorted({o for n in names for o in occurrences(side.sentence, n, spaced=spaced, script=script)})


def problems(acceptable: Side, unacceptable: Side, *, spaced: bool, script: str) -> list[str]:
    """What is wrong with how the pair names its concepts; empty when each is named once, in its own sentence."""
    out = []
    for role, own, other in (("acceptable", acceptable, unacceptable), ("unacceptable", unacceptable, acceptable)):
        start, end = own.span
        again = [(s, e) for s, e in _found(own, own.names, spaced=spaced, script=script) if e <= start or s >= end]
        if again:
            out.append(f"the {role} concept occurs again outside its span in {own.sentence!r} "
                       f"(at {', '.join(repr(own.sentence[s:e]) for s, e in again)})")
        if _found(own, other.names, spaced=spaced, script=script):
            other_role = "unacceptable" if role == "acceptable" else "acceptable"
            out.append(f"the {role} sentence {own.sentence!r} contains the {other_role} concept "
                       f"({' / '.join(dict.fromkeys(other.names))})")
    return out
