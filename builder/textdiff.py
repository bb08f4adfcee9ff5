"""Edit distance between an LLM draft and a curator's final text (characters, Unicode NFC)."""

from __future__ import annotations

import unicodedata
from os.path import commonprefix


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance; the common prefix and suffix cost nothing, so a draft kept as it was (the usual
    case) is compared in one pass instead of a table of len(a) x len(b) cells."""
    a, b = unicodedata.normalize("NFC", a), unicodedata.normalize("NFC", b)
    start = len(commonprefix([a, b]))
    a, b = a[start:], b[start:]
    end = len(commonprefix([a[::-1], b[::-1]]))
    a, b = a[:len(a) - end], b[:len(b) - end]
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        cur = [i]
        for j, cb in enumerate(b, start=1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]
