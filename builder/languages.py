"""Language registry: the packaged declarations plus any a workspace has added.

Adding a language is data, not code: once declared, every stage accepts its code. A declaration is
checked before it is kept: its fields by the `Language` record, its code against ISO 639 and its
script against ISO 15924 (pycountry's tables); each problem is one sentence naming the field, and the
file and line where the declaration comes from a file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pycountry
import yaml
from pydantic import ValidationError

from builder.errors import BuilderError, InputError
from builder.paths import data_dir
from builder.records import Language

SEED_LANGUAGES = ("de", "zh")
SOURCE_LANGUAGE = "en"
LOCAL_USE = ("qaa", "qtz")  # ISO 639-2 keeps this range of codes for languages it does not list


class UnknownLanguageError(BuilderError, ValueError):
    pass


@dataclass(frozen=True)
class FieldProblem:
    """What is wrong with one field of a declaration, as a clause: "'bantu' is not one of …"."""

    field: str
    message: str


class LanguageError(BuilderError, ValueError):
    """A declaration that does not hold: one sentence per problem, each naming its field as `where` says."""

    def __init__(self, problems: list[FieldProblem], where: Callable[[str], str] | None = None) -> None:
        self.problems = problems
        name = where or (lambda f: f"field '{f}'")
        super().__init__("\n".join(f"{name(p.field)}: {p.message}." for p in problems))


def _clause(error: Mapping[str, Any]) -> str:
    """One pydantic error as a clause a person reads (the field is named by the caller)."""
    kind, got, field = error["type"], error.get("input"), str(error["loc"][0]) if error["loc"] else ""
    if kind == "missing":
        return "required"
    if kind == "literal_error":
        return f"{got!r} is not one of {error['ctx']['expected']}"
    if kind == "string_pattern_mismatch" and field == "code":
        return f"{got!r} is not an ISO 639 code (two or three lowercase letters)"
    if kind == "string_pattern_mismatch" and field == "script":
        return f"{got!r} is not an ISO 15924 code (four letters, the first a capital, as in Latn or Deva)"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "value_error":
        return error["msg"].removeprefix("Value error, ").removeprefix(f"{field} ")
    if kind == "extra_forbidden":
        return f"not a field of a language (its fields: {', '.join(f for f in Language.model_fields if f != 'builtin')})"
    return f"{error['msg'][:1].lower()}{error['msg'][1:]} (got {got!r})"


def _iso639(code: str, name: str | None) -> str | None:
    """Why `code` is not the ISO 639 code to declare (None when it is): unknown, or longer than the language's shortest."""
    if len(code) == 3 and LOCAL_USE[0] <= code <= LOCAL_USE[1]:
        return None
    found = (pycountry.languages.get(alpha_2=code) if len(code) == 2
             else pycountry.languages.get(alpha_3=code) or pycountry.languages.get(bibliographic=code))
    if found is None:
        try:
            named = pycountry.languages.lookup(name) if name else None
        except LookupError:
            named = None
        hint = f"; {named.name}'s is {getattr(named, 'alpha_2', named.alpha_3)!r}" if named else ""
        return (f"{code!r} is not an ISO 639 language code{hint} (a language ISO 639 does not list may take one of "
                f"the codes it keeps for local use, {LOCAL_USE[0]} to {LOCAL_USE[1]})")
    shortest = getattr(found, "alpha_2", None) or found.alpha_3
    if shortest != code:
        return f"{code!r} is a longer code for {found.name}; declare it as {shortest!r}, its shortest ISO 639 code (the tag a release's card carries)"
    return None


def parse(fields: Mapping[str, Any], *, builtin: bool, where: Callable[[str], str] | None = None) -> Language:
    """The declaration as a record, its code checked against ISO 639 and its script against ISO 15924;
    else a LanguageError naming each field that is wrong (`where` words a field's name)."""
    lang, problems = None, []
    try:
        lang = Language(**fields, builtin=builtin)
    except ValidationError as exc:
        problems += [FieldProblem(str(e["loc"][0]) if e["loc"] else "(declaration)", _clause(e)) for e in exc.errors()]
    bad = {p.field for p in problems}
    code, script = fields.get("code"), fields.get("script")
    if isinstance(code, str) and "code" not in bad and (why := _iso639(code, fields.get("name"))):
        problems.append(FieldProblem("code", why))
    if isinstance(script, str) and "script" not in bad and pycountry.scripts.get(alpha_4=script) is None:
        problems.append(FieldProblem("script", f"{script!r} is not an ISO 15924 script code"))
    if problems:
        raise LanguageError(problems, where)
    return lang


def _lines(path: Path) -> list[dict[str, int]]:
    """The line of each field of each declaration in a languages file (and of the declaration itself, under "")."""
    root = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    seq = next(v for k, v in root.value if k.value == "languages")
    return [{"": node.start_mark.line + 1, **{k.value: v.start_mark.line + 1 for k, v in node.value}} for node in seq.value]


@lru_cache(maxsize=1)
def builtin_languages() -> tuple[Language, ...]:
    """The shipped declarations (their codes and scripts are checked against ISO by the tests, not at every start)."""
    path = data_dir() / "languages.yaml"
    out = []
    for i, entry in enumerate(yaml.safe_load(path.read_text(encoding="utf-8"))["languages"]):
        try:
            out.append(Language(**entry, builtin=True))
        except ValidationError:
            lines, code = _lines(path)[i], entry.get("code", "?")
            # The same error again, each problem worded with its file, line and field.
            parse(entry, builtin=True, where=lambda f, lines=lines, code=code: f"{path}:{lines.get(f, lines[''])}: "
                                                                               f"language {code}, field '{f}'")
    return tuple(out)


def registry(workspace=None) -> dict[str, Language]:
    langs = {lang.code: lang for lang in builtin_languages()}
    if workspace is not None:
        for data in workspace.added_languages():
            langs[data["code"]] = Language(**data)
    return langs


def label(code: str, langs: Mapping[str, Language]) -> str:
    """A language as a person reads it in a table: its code and name ("hi Hindi"), or the code where it is not declared."""
    return f"{code} {langs[code].name}" if code in langs else code


def resolve(spec: str, langs: dict[str, Language], *, exclude: tuple[str, ...] = ()) -> list[str]:
    """Turn `hu,tr` or `all` into codes; unknown codes fail with the list of known ones."""
    if spec.strip() == "all":
        return [c for c in langs if c not in exclude]
    codes = [c.strip() for c in spec.split(",") if c.strip()]
    unknown = [c for c in codes if c not in langs]
    if unknown:
        raise UnknownLanguageError(
            f"unknown language code(s): {', '.join(unknown)}; known: {', '.join(sorted(langs))}"
            " (declare a new one with `builder language add`)"
        )
    return list(dict.fromkeys(codes))


@dataclass(frozen=True)
class Change:
    field: str
    old: Any
    new: Any


@dataclass(frozen=True)
class Declared:
    language: Language
    changes: list[Change]  # field by field, for an update; empty for a new language or an update that changes nothing
    new: bool


def declare(workspace, *, update: bool = False, where: Callable[[str], str] | None = None, **fields) -> Declared:
    """Validate and record a language in the workspace: a new code, or with `update` the fields given for a
    declared one, the others kept. Fields given as None are not given. Nothing is written when it fails."""
    given = {k: v for k, v in fields.items() if v is not None}
    code = given["code"]
    builtin = {b.code: b for b in builtin_languages()}
    if code in builtin:
        raise InputError(f"language {code} ({builtin[code].name}) is built in: to change it for everyone, edit "
                         f"{data_dir() / 'languages.yaml'}")
    old = next((d for d in workspace.added_languages() if d["code"] == code), None)
    if old is not None and not update:
        raise InputError(f"language {code} ({old['name']}) is already declared in this workspace: give --update to change "
                         "the fields you name and keep the others (`builder language list` shows them)")
    if old is None and update:
        raise InputError(f"language {code} is not declared in this workspace: declare it without --update")
    lang = parse({**{k: v for k, v in (old or {}).items() if k != "builtin"}, **given}, builtin=False, where=where)
    new = lang.model_dump()
    changes = [Change(f, old.get(f), new[f]) for f in new if f != "builtin" and old.get(f) != new[f]] if old else []
    if old is None or changes:
        workspace.add_language(new)
    return Declared(language=lang, changes=changes, new=old is None)
