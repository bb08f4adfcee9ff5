"""Sentences a curator wrote or fixed: where they name their concepts and the property, and by which words.

A curator in Label Studio leaves two sentences, not spans. As the generator is told (data/prompts/generate.yaml),
a concept's span is its noun with whatever belongs to it (article, classifier, case ending); here it is where
the two sentences differ, widened to whole words in a spaced script, and to the whole of a concept's word
wherever that word reaches into the difference. A span that holds the concept's verified word (or the inflected
form the generator recorded) keeps that word; one that does not means the curator changed the word ("bus" →
"बस"), and the span's text is the word these sentences use. The property is found by its verified word, else
by the text its generated span held; sentences that differ there too are not a minimal pair. Pure functions over
strings, used by the release (`builder.releases.rows`) and by the audits, which audit what would be released.
"""

from __future__ import annotations

from os.path import commonprefix

import regex
from pydantic import BaseModel

from builder.audits.occurrence import occurrences
from builder.audits.words import fold

_WORD_CHAR = regex.compile(r"[\p{L}\p{M}\p{N}]")
_EDGES = regex.compile(r"^[^\p{L}\p{M}\p{N}]+|[^\p{L}\p{M}\p{N}]+$")


class Curated(BaseModel):
    acceptable_span: tuple[int, int] | None  # None: the sentences do not differ there (or the sentence is empty)
    unacceptable_span: tuple[int, int] | None
    property_span: tuple[int, int] | None  # None: the property's words are not in the acceptable sentence
    acceptable_word: str  # the concept's word as these sentences name it
    unacceptable_word: str
    problem: str = ""  # why the sentences are not a minimal pair, when they differ beyond the concepts


def _inside_word(text: str, at: int) -> bool:
    """Whether offset `at` falls between two letters of one word."""
    return 0 < at < len(text) and bool(_WORD_CHAR.match(text[at - 1])) and bool(_WORD_CHAR.match(text[at]))


def _difference(a: str, b: str, spaced: bool) -> tuple[int, int]:
    """(shared prefix, shared suffix) lengths of the two sentences, the difference widened to whole words when spaced."""
    p = len(commonprefix([a, b]))
    q = len(commonprefix([a[p:][::-1], b[p:][::-1]]))
    if spaced:
        while p > 0 and (_inside_word(a, p) or _inside_word(b, p)):
            p -= 1
        while q > 0 and (_inside_word(a, len(a) - q) or _inside_word(b, len(b) - q)):
            q -= 1
    return p, q


def _widen(a: str, b: str, p: int, q: int, names: tuple[tuple[str, ...], tuple[str, ...]], *, spaced: bool,
           script: str) -> tuple[int, int]:
    """Widen the difference to the whole of each concept word that reaches into it (烤面包机 / 咖啡机 share 机)."""
    left = right = 0
    for sentence, own in zip((a, b), names):
        end = len(sentence) - q
        for name in own:
            for s, e in occurrences(sentence, name, spaced=spaced, script=script):
                if s < end and e > p:
                    left, right = max(left, p - s), max(right, e - end)
    return max(0, p - left), max(0, q - right)


def named_word(sentence: str, span: tuple[int, int] | None, names: tuple[str, ...]) -> str:
    """The word a concept's span names: its verified word (`names[0]`) when the span holds it or another of its
    names (the recorded form), else the span's own word."""
    text = sentence[span[0]:span[1]] if span else ""
    if names and any(n.strip() and fold(n.strip()) in fold(text) for n in names):
        return names[0]
    return _EDGES.sub("", text) or (names[0] if names else "")


def curate(acceptable: str, unacceptable: str, *, acceptable_names: tuple[str, ...], unacceptable_names: tuple[str, ...],
           property_names: tuple[str, ...], spaced: bool, script: str) -> Curated:
    """Spans and words of a pair's sentences as a curator left them. `*_names`: the concept's verified word first,
    then its recorded form; `property_names`: the property's verified word, then what its generated span held."""
    p, q = _widen(acceptable, unacceptable, *_difference(acceptable, unacceptable, spaced),
                  (acceptable_names, unacceptable_names), spaced=spaced, script=script)
    spans = [(p, len(s) - q) if p < len(s) - q else None for s in (acceptable, unacceptable)]
    at = None
    found = [o for n in property_names if n.strip() for o in occurrences(acceptable, n, spaced=spaced, script=script)]
    problem = ""
    if found and spans[0] and spans[1]:
        outside = [(s, e) for s, e in found if e <= spans[0][0] or s >= spans[0][1]]
        at = outside[0] if outside else None
        if not outside:
            problem = (f"the sentences differ beyond the concepts: {acceptable[slice(*spans[0])]!r} / "
                       f"{unacceptable[slice(*spans[1])] if spans[1] else ''!r} take in the property")
    elif found:
        at = found[0]
    return Curated(acceptable_span=spans[0], unacceptable_span=spans[1], property_span=at,
                   acceptable_word=named_word(acceptable, spans[0], acceptable_names),
                   unacceptable_word=named_word(unacceptable, spans[1], unacceptable_names), problem=problem)


Span = tuple[int, int] | None


class Settled(BaseModel):
    """A pair's sentences as a curator's accept or fix leaves them, with their spans and the concepts' words."""

    acceptable: str
    unacceptable: str
    acceptable_span: Span
    unacceptable_span: Span
    property_span: Span
    acceptable_word: str
    unacceptable_word: str
    changed: bool  # the curator changed the sentences (or wrote what the LLM could not)
    located: bool  # the spans were found again in them (not the generated ones)
    problem: str = ""


def settled_pair(generated: tuple[str, str], spans: tuple[Span, Span, Span], forms: tuple[str, str], left: tuple[str, str],
            words: tuple[str | None, str | None, str | None], *, spaced: bool, script: str) -> Settled:
    """The pair a curator settled: `generated` sentences with their `spans` (acceptable concept, unacceptable concept,
    property) and recorded `forms`; `left`, the sentences the curator left; `words`, the verified words of the
    property and the two concepts. Sentences accepted as generated keep their spans; the others are located."""
    changed = tuple(left) != tuple(generated)
    names = [tuple(n for n in (word, form) if n) for word, form in zip(words[1:], forms)]
    if not changed and spans[0] and spans[1]:
        return Settled(acceptable=left[0], unacceptable=left[1], acceptable_span=spans[0], unacceptable_span=spans[1],
                       property_span=spans[2], acceptable_word=named_word(left[0], spans[0], names[0]),
                       unacceptable_word=named_word(left[1], spans[1], names[1]), changed=False, located=False)
    old_property = generated[0][spans[2][0]:spans[2][1]] if spans[2] else ""
    c = curate(left[0], left[1], acceptable_names=names[0], unacceptable_names=names[1],
               property_names=tuple(n for n in (words[0], old_property) if n), spaced=spaced, script=script)
    return Settled(acceptable=left[0], unacceptable=left[1], changed=changed, located=True,
                   **c.model_dump(include={"acceptable_span", "unacceptable_span", "property_span", "acceptable_word",
                                           "unacceptable_word", "problem"}))
