"""Concept–property lexical overlap: does a concept's name share a piece with the property's wording?

When the positive concept shares a character or a word stem with the property (书架 / 存放书籍,
蜜蜂 / 酿蜜, "bookcase" / "storing books") and the negative does not, a model can pick the positive
by surface form alone. The pieces compared are, for unspaced scripts, single Han characters and
pairs of adjacent kana or other letters; for spaced scripts, words (after prefixed particles,
`builder.audits.words`) that are equal (three letters or more) or share a stem: the first four
letters of one word occurring in the other ("book" in "bookcase" and "books"; "wash" in
"dishwasher"). It is reported per language and negative type (`builder status`, the release card),
not flagged per pair: it is a property of a language's words that curators weigh, not an error.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

import regex
from pydantic import BaseModel

from builder.audits.words import bare, words
from builder.records import NEGATIVE_TYPES

_HAN = regex.compile(r"\p{Han}")
_OTHER_RUN = regex.compile(r"(?:(?!\p{Han})[\p{L}\p{M}])+")
STEM = 4  # letters of a word taken as its stem
MIN_WORD = 3  # shorter words (particles, articles) never count as shared


def _unspaced_pieces(text: str) -> set[str]:
    """An unspaced script's pieces: each Han character, and each pair of adjacent other letters."""
    runs = _OTHER_RUN.findall(text)
    return set(_HAN.findall(text)) | {run[i:i + 2] for run in runs for i in range(len(run) - 1)}


def pieces(text: str, *, spaced: bool, script: str = "Latn") -> frozenset[str]:
    """What of a text is compared: an unspaced script's pieces; a spaced script's words of `MIN_WORD` letters or
    more, each also without a prefixed particle."""
    if not spaced:
        return frozenset(_unspaced_pieces(text))
    return frozenset(b for w, _, _ in words(text) for b in bare(w, script) if len(b) >= MIN_WORD)


def _common(concept: frozenset[str], prop: frozenset[str], spaced: bool) -> set[str]:
    out = set(concept & prop)
    if spaced:  # a stem (the first STEM letters) of a word in one occurring in a word of the other
        stems = [(w, w[:STEM] if len(w) >= STEM else None) for w in prop]
        for a in concept:
            stem = a[:STEM] if len(a) >= STEM else None
            for b, b_stem in stems:
                if stem and stem in b:
                    out.add(stem)
                if b_stem and b_stem in a:
                    out.add(b_stem)
    return out


def shared(concept: str, prop: str, *, spaced: bool, script: str = "Latn") -> set[str]:
    """The pieces the concept's name shares with the property's wording (empty: no overlap)."""
    return _common(pieces(concept, spaced=spaced, script=script), pieces(prop, spaced=spaced, script=script), spaced)


class OverlapRow(BaseModel):
    """One language and negative type: how many pairs have a concept sharing a piece with the property."""

    lang: str
    negative_type: str
    pairs: int
    positive: int  # the acceptable concept shares a piece with the property
    negative: int  # the unacceptable concept does
    shortcut: int  # the acceptable concept does and the unacceptable one does not

    @property
    def shortcut_share(self) -> float:
        return self.shortcut / self.pairs if self.pairs else 0.0


class PairWords(NamedTuple):
    """A pair's words in one language, as the overlap table reads them (a million of them at COMPS size: a tuple)."""

    lang: str
    negative_type: str
    property: str
    acceptable: str
    unacceptable: str


def overlap_table(pairs: Iterable[PairWords], scripts: dict[str, tuple[bool, str]]) -> list[OverlapRow]:
    """Rows by language, then negative type in their usual order; `scripts`: lang -> (spaced, script)."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    seen: dict[tuple[str, str, str], bool] = {}
    split: dict[tuple[str, str], frozenset[str]] = {}  # a word is in many pairs: its pieces are taken once

    def of(lang: str, text: str) -> frozenset[str]:
        if (lang, text) not in split:
            spaced, script = scripts.get(lang, (True, "Latn"))
            split[lang, text] = pieces(text, spaced=spaced, script=script)
        return split[lang, text]

    def shares(lang: str, concept: str, prop: str) -> bool:
        key = (lang, concept, prop)
        if key not in seen:
            seen[key] = bool(_common(of(lang, concept), of(lang, prop), scripts.get(lang, (True, "Latn"))[0]))
        return seen[key]

    for p in pairs:
        pos, neg = shares(p.lang, p.acceptable, p.property), shares(p.lang, p.unacceptable, p.property)
        row = counts[(p.lang, p.negative_type)]
        row[0] += 1
        row[1] += pos
        row[2] += neg
        row[3] += pos and not neg
    order = {n: i for i, n in enumerate(NEGATIVE_TYPES)}
    return [OverlapRow(lang=lang, negative_type=neg, pairs=n, positive=pos, negative=un, shortcut=cut)
            for (lang, neg), (n, pos, un, cut) in sorted(counts.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 9)))]
