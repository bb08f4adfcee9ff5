"""Letters written in a script other than a language's declared one (ISO 15924), by Unicode's Script property.

A declared script stands for the Unicode scripts its texts are written in: most codes are one of them
(Deva), a few stand for several (Jpan: Han, Hiragana and Katakana) or for a variant of one (Hans: Han).
A letter is foreign when its Script_Extensions name none of them; digits, punctuation, symbols and the
characters every script shares (Unicode's Common and Inherited: "।", "ー", combining accents) never are.
A script Unicode does not encode (Zsym, Blis) has nothing to check. Names come from ISO 15924
(pycountry), so a curator reads "Latin", not "Latn".
"""

from __future__ import annotations

from functools import lru_cache

import pycountry
import regex

from builder.records import Language

# ISO 15924 codes that are not themselves Unicode scripts: the scripts their texts are written in.
_COMPOSITE = {"Jpan": ("Hani", "Hira", "Kana"), "Hrkt": ("Hira", "Kana"), "Kore": ("Hang", "Hani"),
              "Hans": ("Hani",), "Hant": ("Hani",), "Hanb": ("Hani", "Bopo"), "Jamo": ("Hang",),
              "Latf": ("Latn",), "Latg": ("Latn",), "Aran": ("Arab",), "Cyrs": ("Cyrl",), "Geok": ("Geor",),
              "Syre": ("Syrc",), "Syrj": ("Syrc",), "Syrn": ("Syrc",)}
_SHARED = r"\p{sc=Zyyy}\p{sc=Zinh}"  # Common and Inherited


def script_name(code: str) -> str:
    """ISO 15924's English name of a script, without its parenthesised variants ("Devanagari", not "Devanagari (Nagari)")."""
    found = pycountry.scripts.get(alpha_4=code)
    return found.name.split(" (")[0] if found else code


@lru_cache(maxsize=64)
def _foreign_run(script: str) -> regex.Pattern | None:
    """A run of letters (with their marks) outside `script`; None where Unicode encodes none of its scripts."""
    allowed = "".join(rf"\p{{scx={s}}}" for s in _COMPOSITE.get(script, (script,)))
    try:
        return regex.compile(rf"[[\p{{L}}\p{{M}}]--[{allowed}{_SHARED}]]+", regex.V1)
    except regex.error:  # an ISO 15924 code with no Unicode script (symbols, notations, unencoded scripts)
        return None


@lru_cache(maxsize=1)
def _unicode_scripts() -> tuple[tuple[str, regex.Pattern], ...]:
    """Every ISO 15924 script Unicode encodes, with a pattern for its letters."""
    out = []
    for s in pycountry.scripts:
        try:
            out.append((s.alpha_4, regex.compile(rf"\p{{sc={s.alpha_4}}}")))
        except regex.error:
            continue
    return tuple(out)


def _script_of(char: str) -> str:
    return next((code for code, pattern in _unicode_scripts() if pattern.match(char)), "Zzzz")


def foreign(text: str, script: str) -> list[tuple[str, str]]:
    """Each distinct run of letters in `text` outside `script`, with the ISO 15924 code of the script it is in."""
    pattern = _foreign_run(script)
    if pattern is None:
        return []
    runs = dict.fromkeys(m.group() for m in pattern.finditer(text))
    return [(run, _script_of(run[0])) for run in runs]


def outside_script(text: str, lang: Language) -> str | None:
    """Why `text` is not all in `lang`'s declared script (its foreign runs and their scripts), or None when it is."""
    runs = foreign(text, lang.script)
    if not runs:
        return None
    named = ", ".join(f"'{run}' ({script_name(code)})" for run, code in runs)
    return (f"{named} {'is' if len(runs) == 1 else 'are'} not in {script_name(lang.script)} ({lang.script}), "
            f"the script declared for {lang.name}")


def pair_outside_script(acceptable: str, unacceptable: str, lang: Language) -> str | None:
    """Why a sentence pair is not all in `lang`'s declared script, or None: the script audit's rule on a pair,
    which the release check applies to the pair as released."""
    why = {"acceptable": outside_script(acceptable, lang), "unacceptable": outside_script(unacceptable, lang)}
    if why["acceptable"] and why["acceptable"] == why["unacceptable"]:
        return f"both sentences: {why['acceptable']}"
    return "; ".join(f"the {role} sentence: {w}" for role, w in why.items() if w) or None
