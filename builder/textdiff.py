"""Edit distance between an LLM draft and a curator's final text (characters, Unicode NFC)."""

from __future__ import annotations

import unicodedata


def edit_distance(a: str, b: str) -> int:
    a, b = unicodedata.normalize("NFC", a), unicodedata.normalize("NFC", b)
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        cur = [i]
        for j, cb in enumerate(b, start=1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]
