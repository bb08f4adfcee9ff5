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


class _Split(NamedTuple):
    """A text's pieces, and for a spaced script each word beside its stem (None: shorter than `STEM`)."""

    pieces: frozenset[str]
    stems: tuple[tuple[str, str | None], ...]


def _split(text: str, spaced: bool, script: str) -> _Split:
    got = pieces(text, spaced=spaced, script=script)
    return _Split(got, tuple((w, w[:STEM] if len(w) >= STEM else None) for w in got) if spaced else ())


def _common(concept: _Split, prop: _Split) -> set[str]:
    out = set(concept.pieces & prop.pieces)
    for a, a_stem in concept.stems:  # a stem (the first STEM letters) of a word in one occurring in a word of the other
        for b, b_stem in prop.stems:
            if a_stem and a_stem in b:
                out.add(a_stem)
            if b_stem and b_stem in a:
                out.add(b_stem)
    return out


def shared(concept: str, prop: str, *, spaced: bool, script: str = "Latn") -> set[str]:
    """The pieces the concept's name shares with the property's wording (empty: no overlap)."""
    return _common(_split(concept, spaced, script), _split(prop, spaced, script))


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

    negative_type: str
    property: str
    acceptable: str
    unacceptable: str


def overlap_table(lang: str, pairs: Iterable[PairWords], *, spaced: bool, script: str = "Latn") -> list[OverlapRow]:
    """One language's rows, by negative type in their usual order.

    A word's pieces are taken once, and the pairs are taken property by property with what is known of that
    property's concepts dropped before the next: what is looked up stays a property's handful of concepts, so a
    COMPS-size language's pairs cost each what a tenth's do (a memo of every concept and property seen grew out
    of the processor's caches, and each pair cost more at full size than at a tenth).
    """
    split: dict[str, _Split] = {}
    by_property: dict[str, list[PairWords]] = defaultdict(list)
    for p in pairs:
        by_property[p.property].append(p)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])

    def of(text: str) -> _Split:
        if text not in split:
            split[text] = _split(text, spaced, script)
        return split[text]

    for prop, group in by_property.items():
        wording, known = of(prop), {}
        for p in group:
            for concept in (p.acceptable, p.unacceptable):
                if concept not in known:
                    known[concept] = bool(_common(of(concept), wording))
            pos, neg = known[p.acceptable], known[p.unacceptable]
            row = counts[p.negative_type]
            row[0] += 1
            row[1] += pos
            row[2] += neg
            row[3] += pos and not neg
    order = {n: i for i, n in enumerate(NEGATIVE_TYPES)}
    return [OverlapRow(lang=lang, negative_type=neg, pairs=n, positive=pos, negative=un, shortcut=cut)
            for neg, (n, pos, un, cut) in sorted(counts.items(), key=lambda kv: order.get(kv[0], 9))]
