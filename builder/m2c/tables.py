"""An inflection table as curators read and edit it: one line per feature bundle, the bundle, a tab, the form.

The review screen shows a lemma's proposed forms in this shape (`draft`) and a curator's table is read
back with `parse_forms`; `version` names one draft, so that a decision counts only for the table it
was made on (a table proposed afresh after a rejection is reviewed afresh).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from builder.errors import InputError

_LINE = re.compile(r"^\s*(\S+)\s+(.+?)\s*$")

__all__ = ["draft", "parse_forms", "version"]


def draft(forms: Iterable[dict]) -> str:
    """Lexicon rows (`features`, `form`) as the table's text."""
    return "\n".join(f"{f['features']}\t{f['form']}" for f in forms)


def version(text: str) -> str:
    """A short hash of a table's text: the version of the table a task showed."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_forms(text: str) -> dict[str, str]:
    """`BUNDLE<whitespace>form` lines -> {bundle: form}; a line without a form is an error."""
    out = {}
    for no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        m = _LINE.match(line)
        if not m:
            raise InputError(f"line {no} {line!r}: write the bundle, a tab, then the form")
        out[m.group(1)] = m.group(2)
    return out
