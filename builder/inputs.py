"""Checks of user-supplied text where it enters: seed files, property lists, templates, language declarations.

What a user gives is stored in the workspace (SQLite keeps a NUL byte silently, PostgreSQL refuses it
with a traceback), shown to curators and released. So each field is checked at import for characters
no text should hold (control characters but tab and line breaks, lone surrogates, a byte-order mark
inside the text) and for a sane length, and the caller's error names file, line and field. A name
that becomes an id (an English concept or property, a code) may hold no invisible character either
(zero-width space or joiner, bidirectional marks, soft hyphen: Unicode's format characters): two
names that look the same would otherwise be two ids. `records.english_key` drops them too (`visible`),
so that no other way in can tell such names apart.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from functools import cache

import yaml

from builder.errors import InputError

NAME_CHARS = 200  # a concept, a property, a category, a code, a translator: a few words
TEXT_CHARS = 2_000  # a sentence, a phrase, a prompt, a note, a template's field
LAYOUT = "\t\n\r"


@cache
def _format_characters() -> str:
    """Unicode's format characters (category Cf) as a regex character class body: they live in the first two planes
    and among the tags of plane 14, which is all that is searched (a fifteenth of the code points)."""
    chars = (chr(c) for c in (*range(0x20000), *range(0xE0000, 0xE1000)) if unicodedata.category(chr(c)) == "Cf")
    return "".join(re.escape(c) for c in chars)


@cache
def _refused(name: bool) -> re.Pattern:
    controls = "".join(re.escape(chr(c)) for c in (*range(0x20), *range(0x7F, 0xA0)) if chr(c) not in LAYOUT)
    invisible = _format_characters() + "\u2028\u2029" if name else "\ufeff"  # a name is one line of visible text
    return re.compile(f"[{controls}\ud800-\udfff{invisible}]")


def _shown(ch: str) -> str:
    label = unicodedata.name(ch, "")
    kind = unicodedata.category(ch)
    label = label or {"Cc": "a control character", "Cs": "a lone surrogate, not valid Unicode"}.get(kind, "unnamed")
    return f"U+{ord(ch):04X} ({label})"


def text_problem(value: str, *, name: bool = False, limit: int | None = None) -> str | None:
    """What is wrong with one field's text, or None: its length, then its first refused character.

    A name (`name=True`) is also refused invisible characters and Unicode's line and paragraph separators, and
    is held to `NAME_CHARS`; tabs and line breaks are the caller's to fold into spaces."""
    limit = limit or (NAME_CHARS if name else TEXT_CHARS)
    if len(value) > limit:
        return f"is {len(value):,} characters long, more than the {limit:,} a {'name' if name else 'text'} may have"
    found = _refused(name).search(value)
    if found is None:
        return None
    ch, at = found.group(), found.start() + 1
    if unicodedata.category(ch) in ("Cc", "Cs"):
        return f"holds {_shown(ch)} at character {at}: remove it"
    why = " (names that look the same must be the same name)" if name else ""
    return f"holds the invisible character {_shown(ch)} at character {at}: remove it{why}"


def without_refused(value: str) -> tuple[str, list[str]]:
    """`value` less the characters `text_problem` refuses in a text, and each one removed as shown to a user: for text
    a person typed into another tool (a curator's comment or correction in Label Studio), which is taken, not refused."""
    found = sorted(set(_refused(False).findall(value)))
    return (_refused(False).sub("", value), [_shown(ch) for ch in found]) if found else (value, [])


def checked(value: str, where: str, *, name: bool = False, limit: int | None = None) -> str:
    """`value`, or an `InputError` saying where it is and what is wrong with it."""
    problem = text_problem(value, name=name, limit=limit)
    if problem:
        raise InputError(f"{where}: {problem}")
    return value


@cache
def _invisible() -> re.Pattern:
    return re.compile(f"[{_format_characters()}]")


def visible(text: str) -> str:
    """`text` without format characters (zero-width space and joiners, byte-order mark, bidirectional marks)."""
    return _invisible().sub("", text)


def look(text: str) -> str:
    """What a name looks like: compatibility forms folded (ﬁ → fi, full-width → ASCII), invisible characters gone,
    spaces collapsed, case folded. Two names with the same look and different ids are reported, not merged."""
    return " ".join(unicodedata.normalize("NFKC", visible(text)).split()).casefold()


def _scalars(node: yaml.Node | None) -> Iterator[yaml.ScalarNode]:
    if isinstance(node, yaml.ScalarNode):
        yield node
    elif isinstance(node, yaml.SequenceNode):
        for child in node.value:
            yield from _scalars(child)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield from _scalars(key)
            yield from _scalars(value)


def yaml_text_problem(root: yaml.Node | None) -> tuple[yaml.ScalarNode, str] | None:
    """The first scalar of a composed YAML document (keys too) that `text_problem` refuses, and why; a file's
    whole text is checked before it is read, so its error can name the line and column."""
    for node in _scalars(root):
        if problem := text_problem(node.value):
            return node, problem
    return None
