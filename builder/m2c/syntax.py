"""Parsing template text into literals and keys.

`{`/`}` delimit keys and `{{`/`}}` are literal braces. Inside a key, dot-separated segments are
features, `<other.DIM...>` agreement, `<V1:other.F1|V2:other.F2|V3>` conditional features and
modifier names; `{a:ph.F1|b:ph.F2}` is an inline rule and `{$fn(arg, ...)}` a function call. Every
node keeps the offset of the text it came from, so errors can name line and column.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from builder.m2c.errors import TemplateError, Where

_NAME = re.compile(r"[^\W\d]\w*")  # fullmatch: a trailing newline is no part of a name
_INT = re.compile(r"-?[0-9]+")

Locate = Callable[[int], Where]  # offset in the text -> position in its file


@dataclass(frozen=True)
class Feature:
    label: str
    at: int


@dataclass(frozen=True)
class Agree:
    """`<var.D1.D2>`: take var's features for these dimensions."""

    var: str
    dims: tuple[str, ...]
    at: int


@dataclass(frozen=True)
class Cond:
    """`<V1:var.F1|V2:var.F2|V3>`: the first Vi whose condition holds, else the default."""

    cases: tuple[tuple[str, str, tuple[str, ...]], ...]  # (feature to use, var, condition features)
    default: str | None
    at: int


Segment = Feature | Agree | Cond


@dataclass(frozen=True)
class Ref:
    """A placeholder or language rule with its segments, e.g. `ART.DEF.<obj.NUMBER>.TO_CAPITALIZE`."""

    name: str
    segments: tuple[Segment, ...]
    mods: tuple[str, ...]
    at: int
    raw: str


@dataclass(frozen=True)
class Inline:
    """`{is:x.SG|are:x.PL}`: a value per condition on one placeholder."""

    var: str
    alts: tuple[tuple[str, tuple[str, ...]], ...]  # (value, condition features)
    mods: tuple[str, ...]
    at: int
    raw: str


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple[Arg, ...]
    mods: tuple[str, ...]
    at: int
    raw: str


Arg = Call | Ref | int | str
Key = Ref | Inline | Call
Piece = str | Key


def _split(text: str, sep: str, base: int) -> list[tuple[int, str]]:
    """Split on `sep` outside <...>, (...) and quotes; each part with its absolute offset."""
    parts, depth_a, depth_p, quote, start = [], 0, 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"" and depth_p:
            quote = ch
        elif ch == "<":
            depth_a += 1
        elif ch == ">":
            depth_a -= 1
        elif ch == "(":
            depth_p += 1
        elif ch == ")":
            depth_p -= 1
        elif ch == sep and depth_a == 0 and depth_p == 0:
            parts.append((base + start, text[start:i]))
            start = i + 1
    parts.append((base + start, text[start:]))
    return parts


class Parser:
    """Parses one text; `modifiers` are the names that count as modifiers rather than features."""

    def __init__(self, text: str, locate: Locate, modifiers: set[str], template: str | None = None) -> None:
        self.text = text
        self.locate = locate
        self.modifiers = modifiers
        self.template = template

    def error(self, message: str, offset: int) -> TemplateError:
        return TemplateError(message, self.locate(offset), self.template)

    def pieces(self) -> list[Piece]:
        text, out, buf, i = self.text, [], [], 0
        while i < len(text):
            ch = text[i]
            if ch == "{" and text.startswith("{{", i):
                buf.append("{")
                i += 2
            elif ch == "}" and text.startswith("}}", i):
                buf.append("}")
                i += 2
            elif ch == "}":
                raise self.error("single '}' (write '}}' for a literal brace)", i)
            elif ch == "{":
                end = text.find("}", i + 1)
                nxt = text.find("{", i + 1)
                if end < 0 or (0 <= nxt < end):
                    raise self.error("unclosed '{' (write '{{' for a literal brace)", i)
                if buf:
                    out.append("".join(buf))
                    buf = []
                out.append(self.key(text[i + 1 : end], i + 1))
                i = end + 1
            else:
                buf.append(ch)
                i += 1
        if buf:
            out.append("".join(buf))
        return out

    def key(self, body: str, at: int) -> Key:
        if not body.strip():
            raise self.error("empty key '{}'", at - 1)
        if body != body.strip():
            raise self.error(f"spaces around the key {{{body}}}", at - 1)
        if body.startswith("$"):
            call, end = self.call(body, at)
            mods = self.trailing_mods(body[end:], at + end)
            return Call(call.fn, call.args, mods, at - 1, body)
        alts = _split(body, "|", at)
        if len(alts) > 1:
            return self.inline(alts, at, body)
        return self.ref(body, at)

    def trailing_mods(self, rest: str, at: int) -> tuple[str, ...]:
        if not rest:
            return ()
        if not rest.startswith("."):
            raise self.error(f"unexpected {rest!r} after a function call", at)
        mods = []
        for off, seg in _split(rest[1:], ".", at + 1):
            if seg not in self.modifiers:
                raise self.error(f"{seg!r} is not a modifier (known: {', '.join(sorted(self.modifiers))})", off)
            mods.append(seg)
        return tuple(mods)

    def call(self, body: str, at: int) -> tuple[Call, int]:
        m = re.match(r"\$(\w+)\(", body)
        if not m:
            raise self.error("a function call is written {$name(arg, ...)}", at)
        depth, quote, end = 0, None, None
        for i in range(m.end() - 1, len(body)):
            ch = body[i]
            if quote:
                quote = None if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    end = i
                    break
        if end is None:
            raise self.error(f"unclosed '(' in the call of ${m.group(1)}", at)
        inner = body[m.end() : end]
        args = [] if not inner.strip() else [self.arg(a, off) for off, a in _split(inner, ",", at + m.end())]
        return Call(m.group(1), tuple(args), (), at - 1, body[: end + 1]), end + 1

    def arg(self, text: str, at: int) -> Arg:
        stripped = text.strip()
        at += len(text) - len(text.lstrip())
        if not stripped:
            raise self.error("empty function argument", at)
        if stripped.startswith("$"):
            call, end = self.call(stripped, at)
            if end != len(stripped):
                raise self.error(f"unexpected {stripped[end:]!r} after a nested call", at + end)
            return call
        if _INT.fullmatch(stripped):
            return int(stripped)
        if stripped[0] in "'\"":
            if len(stripped) < 2 or stripped[-1] != stripped[0]:
                raise self.error("unterminated string argument", at)
            return stripped[1:-1]
        return self.ref(stripped, at)

    def ref(self, body: str, at: int) -> Ref:
        parts = _split(body, ".", at)
        name_at, name = parts[0]
        if not _NAME.fullmatch(name):
            raise self.error(f"{name!r} is not a placeholder or rule name", name_at)
        segments: list[Segment] = []
        mods: list[str] = []
        for off, seg in parts[1:]:
            if not seg:
                raise self.error("empty segment (two dots in a row?)", off)
            if seg.startswith("<"):
                if not seg.endswith(">"):
                    raise self.error(f"unclosed '<' in {seg!r}", off)
                segments.append(self.angle(seg[1:-1], off + 1))
            elif seg in self.modifiers:
                mods.append(seg)
            elif _NAME.fullmatch(seg) or seg.isdigit():
                segments.append(Feature(seg, off))
            else:
                raise self.error(f"{seg!r} is not a feature, an <agreement> or a modifier", off)
        return Ref(name, tuple(segments), tuple(mods), at - 1, body)

    def angle(self, inner: str, at: int) -> Segment:
        alts = _split(inner, "|", at)
        if len(alts) == 1 and ":" not in inner:
            parts = _split(inner, ".", at)
            if len(parts) < 2 or not all(p for _, p in parts):
                raise self.error(f"agreement is written <placeholder.DIMENSION>, not <{inner}>", at)
            return Agree(parts[0][1], tuple(p for _, p in parts[1:]), at)
        cases, default = [], None
        for i, (off, alt) in enumerate(alts):
            value, colon, cond = alt.partition(":")
            if not colon:
                if i != len(alts) - 1:
                    raise self.error(f"only the last alternative may be a bare default, not {alt!r}", off)
                default = value
                continue
            var, *features = cond.split(".")
            if not features:
                raise self.error(f"condition {cond!r} names no feature", off)
            cases.append((value, var, tuple(features)))
        return Cond(tuple(cases), default, at)

    def inline(self, alts: list[tuple[int, str]], at: int, body: str) -> Inline:
        parsed, var, mods = [], None, []
        for off, alt in alts:
            value, colon, cond = alt.rpartition(":")
            if not colon:
                raise self.error(f"inline rule alternative {alt!r} has no ':' (write value:placeholder.FEATURE)", off)
            name, *features = cond.split(".")
            feats = []
            for f in features:
                (mods if f in self.modifiers else feats).append(f)
            if var is None:
                var = name
            elif name != var:
                raise self.error(f"inline rule names two placeholders ({var}, {name}); one rule agrees with one placeholder",
                                 off + len(value) + 1)
            parsed.append((value, tuple(feats)))
        return Inline(var, tuple(parsed), tuple(dict.fromkeys(mods)), at - 1, body)
