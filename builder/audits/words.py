"""Words in a sentence, as the audits compare them: Unicode letters with their marks, case-folded.

Arabic and Hebrew write some particles (the article, "and", "to", "with") as prefixes of the next word
(الكرة "the ball", للبيانو "to the piano"); a word is compared with and without such a prefix, so the
verified كرة is found in الكرة.
"""

from __future__ import annotations

import unicodedata

import regex

_WORD = regex.compile(r"[\p{L}\p{M}\p{N}]+")
BETWEEN = regex.compile(r"[^\p{L}\p{M}\p{N}]+")  # what lies between two words
_PROCLITICS = {  # longest first
    "Arab": ("وال", "فال", "بال", "كال", "لل", "ال", "و", "ف", "ب", "ك", "ل"),
    "Hebr": ("ו", "ה", "ב", "ל", "מ", "ש", "כ"),
}


def fold(text: str) -> str:
    return unicodedata.normalize("NFC", text).casefold()


def words(text: str) -> list[tuple[str, int, int]]:
    """(folded word, start, end) of each word of `text`; the offsets index `text` itself."""
    return [(fold(m.group()), m.start(), m.end()) for m in _WORD.finditer(text)]


def bare(word: str, script: str) -> set[str]:
    """The word and what is left of it without a prefixed particle of its script."""
    out = {word}
    for p in _PROCLITICS.get(script, ()):
        if word.startswith(p) and len(word) - len(p) >= 2:
            out.add(word[len(p):])
    return out
