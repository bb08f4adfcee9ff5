"""Free-text model replies mapped to one allowed answer, or None when a reply names none or several.

Chat models answer "Ja, weil …", "**B**", "答案是：否。" or "The toaster, since …" rather than a bare label;
consistency compares decisions across languages, so every language must be read the same way. The answer is
what a reply opens with, after lead-ins such as "The answer is"; an explanation after it is ignored, and a
reply whose opening names several answers ("yes and no", "A or B") is refused rather than guessed.
Per-language words live in data/answers.yaml; a language missing there is read with English plus the choices.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Sequence
from functools import cache, lru_cache
from pathlib import Path

import regex
import yaml
from pydantic import ValidationError, field_validator, model_validator

from builder.errors import BuilderError
from builder.paths import data_dir
from builder.records import Record

_FLAGS = regex.IGNORECASE | regex.FULLCASE
# Scripts written without spaces: a phrase ending in them needs no word boundary ("答案是A").
_UNSPACED = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}]")
_DROP = regex.compile(
    r"[\u200e\u200f\u202a-\u202e\u2066-\u2069\u061c\u0640"  # bidi controls, tatweel
    r"\u064b-\u065f\u0670\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7"  # Arabic and Hebrew vowel marks
    r"*_`~]"  # markdown emphasis and code
)
_FOLD_LETTERS = str.maketrans({"ي": "ی", "ى": "ی", "ك": "ک", "’": "'"})  # yeh, kaf; curly apostrophe
_OPENERS = "\"'“”„‘’‚«»‹›「」『』【】〔〕《》〈〉([{<"
# Whatever may precede an answer: whitespace, markdown headings/quotes/bullets, separators, opening quotes.
_LEAD = regex.compile(r"^[\s#>\-•·:=—–,،，" + regex.escape(_OPENERS) + r"]*")
# Where the answer sentence ends. Not at commas: "І тостер, і чайник" names both.
_CLAUSE_END = regex.compile(r"[.!?;:\n。；…؛؟]|\s[-—–]\s")
_AFTER_ANSWER = regex.compile(r"^[\s\"'“”„‘’‚«»‹›」』】〕》〉)\]}>]*")
_OPENING = regex.compile(r"^[\s" + regex.escape(_OPENERS) + r"]*")
# An option letter ends where a Latin word would not go on; "答えはAです", "정답은 B입니다" name A and B.
_LETTER_END = r"(?:(?!\w)|(?=[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]))"
_BETWEEN = regex.compile(r"^[\s/|&+]*")  # not a comma: "Yes, no doubt" is one answer


class AnswerLanguage(Record):
    """How answers are phrased in one language (one entry of data/answers.yaml)."""

    yes_words: tuple[str, ...]
    no_words: tuple[str, ...]
    answer_is: tuple[str, ...]
    option: tuple[str, ...] = ()
    unsure: tuple[str, ...] = ()
    connectors: tuple[str, ...] = ()
    clitics: tuple[str, ...] = ()
    suffixes: tuple[str, ...] = ()

    @field_validator("yes_words", "no_words", "answer_is")
    @classmethod
    def _nonempty(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v or any(not w.strip() for w in v):
            raise ValueError("must list at least one word and no empty ones")
        return v

    @model_validator(mode="after")
    def _yes_no_disjoint(self) -> AnswerLanguage:
        both = {_fold(w) for w in self.yes_words} & {_fold(w) for w in self.no_words}
        if both:
            raise ValueError(f"listed as both yes and no: {', '.join(sorted(both))}")
        return self


class AnswerDataError(BuilderError, ValueError):
    pass


def _clean(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    return _DROP.sub("", text).translate(_FOLD_LETTERS)


def _fold(text: str) -> str:
    return _clean(text).casefold().strip()


def load_answer_data(path: Path) -> dict[str, AnswerLanguage]:
    """Read and validate an answers file; errors name the file, line and language."""
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise AnswerDataError(f"{path}: {exc}") from exc
    if not isinstance(root, yaml.MappingNode):
        raise AnswerDataError(f"{path}: expected a mapping of language codes")
    out = {}
    for key, value in root.value:
        where = f"{path}:{key.start_mark.line + 1}: language {key.value!r}"
        try:
            out[key.value] = AnswerLanguage.model_validate(yaml.safe_load(yaml.serialize(value)))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']} (got {e['input']!r})" for e in exc.errors()
            )
            raise AnswerDataError(f"{where}: {problems}") from exc
    if "en" not in out:
        raise AnswerDataError(f"{path}: English ('en') is required as the fallback")
    return out


@lru_cache(maxsize=1)
def answer_data() -> dict[str, AnswerLanguage]:
    return load_answer_data(data_dir() / "answers.yaml")


def _alternation(words: Sequence[str], *, left: bool, whole: bool = False) -> str:
    """Longest first, so 不是 wins over 是; word boundaries except around unspaced scripts, unless `whole`.

    Lead-ins may run into the answer ("答案是A"); an answer word may not ("对于" is not 对, "否则" not 否).
    """
    parts = []
    for w in sorted({_clean(w).strip() for w in words}, key=len, reverse=True):
        p = regex.escape(w).replace(r"\ ", r"\s+")
        if left and not _UNSPACED.match(w[0]):
            p = r"(?<!\w)" + p
        if whole or not _UNSPACED.match(w[-1]):
            p += r"(?!\w)"
        parts.append(p)
    return "(?:" + "|".join(parts) + ")" if parts else "(?!)"


class _Language:
    """The patterns of one language (its own words, then English), compiled once."""

    def __init__(self, lang: str) -> None:
        data = answer_data()
        langs = [data[lang], data["en"]] if lang in data and lang != "en" else [data["en"]]

        def words(field: str) -> list[str]:
            return [w for d in langs for w in getattr(d, field)]

        self.phrase_at = regex.compile(_alternation(words("answer_is"), left=False), _FLAGS)
        self.phrase_in = regex.compile(_alternation(words("answer_is"), left=True), _FLAGS)
        self.unsure = regex.compile(_alternation(words("unsure"), left=False, whole=True), _FLAGS)
        self.connector = regex.compile(r"^(?:" + _alternation(words("connectors"), left=False) + r"\s*)?", _FLAGS)
        self.clitics = tuple(_fold(c) for c in words("clitics"))
        self.suffixes = tuple(_fold(c) for c in words("suffixes"))
        self.yes = regex.compile(_alternation(["yes", *words("yes_words")], left=False, whole=True), _FLAGS)
        self.no = regex.compile(_alternation(["no", *words("no_words")], left=False, whole=True), _FLAGS)
        self.yes_no = regex.compile(
            _alternation(["yes", "no", *words("yes_words"), *words("no_words")], left=False, whole=True), _FLAGS
        )
        option = _alternation(words("option"), left=True)
        self.letter_at = regex.compile(
            rf"^(?:(?P<opt>(?i:{option}))\s*)?[(\[]?\s*(?P<L>\p{{L}}){_LETTER_END}(?P<close>[)\]])?"
        )
        self.letter_in = regex.compile(
            rf"(?:(?i:{option})\s*[(\[]?\s*(?P<L>\p{{L}}){_LETTER_END})|(?:(?<!\w)[(\[](?P<L>\p{{L}})[)\]])"
        )

    def candidates(self, text: str) -> list[tuple[str, bool]]:
        """The reply's opening, then what follows each "the answer is" inside it; flag: after a lead-in."""
        out = [self._strip(text)]
        for m in self.phrase_in.finditer(text):
            if m.start() > 0:
                out.append(self._strip(text[m.end():], after=True))
        return [(c, after) for c, after in out if not self.unsure.match(c)]

    def _strip(self, s: str, after: bool = False) -> tuple[str, bool]:
        while True:
            s = _LEAD.sub("", s, count=1)
            m = self.phrase_at.match(s)
            if not m:
                return s, after
            s, after = s[m.end():], True

    def skip_joiners(self, s: str, comma: bool = False) -> str:
        """What follows an answer once closing quotes and "or"/"and" are passed: another answer means several."""
        s = _AFTER_ANSWER.sub("", s, count=1)
        s = _BETWEEN.sub("", s.lstrip(",") if comma else s, count=1)
        s = self.connector.sub("", s, count=1)
        return _OPENING.sub("", s, count=1)

    def inflects(self, token: str, word: str) -> bool | None:
        """True: the word itself; False: an inflected form; None: another word."""
        if token == word or any(token == c + word for c in self.clitics):
            return True
        if any(token == word + s for s in self.suffixes):
            return False
        common = len(os.path.commonprefix([token, word]))
        changed_last = common == len(word) - 1 and len(word) >= 5  # собака → собаку, köpek → köpeği
        if len(word) >= 4 and (common == len(word) or changed_last) and len(token) - common <= 3:
            return False
        return None


@cache
def _language(lang: str) -> _Language:
    return _Language(lang)


class _Reader:
    """Reads replies for one set of choices in one language.

    Each `_<kind>` reader returns a choice, "" for several answers (refuse), or None for none here (read on).
    """

    def __init__(self, choices: tuple[str, ...], lang: str) -> None:
        self.lang = _language(lang)
        folded = [_fold(c) for c in choices]
        if len(choices) < 2 or any(not f for f in folded) or len(set(folded)) != len(folded):
            raise ValueError(f"need at least two distinct, non-empty choices, got {list(choices)!r}")
        self.by_fold = dict(zip(folded, choices))
        if sorted(folded) == ["no", "yes"]:
            self.kind = "yesno"
        elif all(len(f) == 1 and f.isalpha() for f in folded):
            self.kind = "letter"
        else:
            self.kind = "concept"
            self.concepts = [(c, f, tuple(regex.findall(r"\w+", f)), bool(_UNSPACED.search(f)))
                             for c, f in zip(choices, folded)]

    def read(self, text: str) -> str | None:
        text = _clean(text)
        several = False
        for cand, after in self.lang.candidates(text):
            found = getattr(self, f"_{self.kind}")(cand, after)
            if found:
                return found
            several = several or found == ""
        return None if several else self._fallback(text)

    def _yesno(self, s: str, after: bool) -> str | None:
        first = self._yes_or_no(s)
        if first is None:
            return None
        rest = self.lang.skip_joiners(s[self.lang.yes_no.match(s).end():])
        # "نعم ولا", "כן ולא": the conjunction is written onto the second answer
        for r in [rest] + [rest[len(c):] for c in self.lang.clitics if rest.startswith(c)]:
            second = self._yes_or_no(r)
            if second is not None and second != first:
                return ""
        return first

    def _yes_or_no(self, s: str) -> str | None:
        m = self.lang.yes_no.match(s)
        if not m:
            return None
        return self.by_fold["yes" if self.lang.yes.fullmatch(m.group()) else "no"]

    def _letter(self, s: str, after: bool) -> str | None:
        first = self._letter_at(s, after)
        if first is None:
            return None
        letter, end = first
        nxt = self._letter_at(self.lang.skip_joiners(s[end:], comma=True), True, follow=True)
        if nxt is not None and nxt[0] != letter:
            return ""
        return letter

    def _letter_at(self, s: str, after: bool, follow: bool = False) -> tuple[str, int] | None:
        m = self.lang.letter_at.match(s)
        if not m or m.group("L").casefold() not in self.by_fold:
            return None
        letter = m.group("L")
        rest = s[m.end():]
        if not (m.group("opt") or m.group("close")):
            if letter.islower() and (follow or rest.strip(" \t\n.!?:;,。、\"'”’」』")):
                return None  # a lone lower-case letter only when it is the whole reply ("b.")
            if letter.isupper() and not (after or follow) and regex.match(r"[ \t]+\w", rest):
                return None  # "A toaster …": an article, not option A
        return self.by_fold[letter.casefold()], m.end()

    def _concept(self, s: str, after: bool) -> str | None:
        found = self._mentions(_CLAUSE_END.split(s, maxsplit=1)[0])
        if len(found) > 1:
            return ""
        return found.pop() if found else None

    def _fallback(self, text: str) -> str | None:
        if self.kind == "concept":
            found = self._mentions(text)
        elif self.kind == "letter":
            found = {self.by_fold[L.casefold()] for m in self.lang.letter_in.finditer(text)
                     for L in m.captures("L") if L.casefold() in self.by_fold}
        else:
            return None  # yes/no words occur in any explanation ("no other animal …"): only the opening counts
        return found.pop() if len(found) == 1 else None

    def _mentions(self, text: str) -> set[str]:
        """Choices named in text: exact or unambiguously inflected, longer names masking shorter ones."""
        text = text.casefold()
        tokens = [(m.group(), m.start(), m.end()) for m in regex.finditer(r"\w+", text)]
        spans: dict[tuple[int, int], list[tuple[str, bool]]] = {}
        for choice, folded, words, unspaced in self.concepts:
            if unspaced:
                for m in regex.finditer(regex.escape(folded), text, overlapped=True):
                    spans.setdefault((m.start(), m.end()), []).append((choice, True))
                continue
            n = len(words)
            for i in range(len(tokens) - n + 1):
                grades = [self.lang.inflects(tokens[i + k][0], words[k]) for k in range(n)]
                if all(g is not None for g in grades):
                    spans.setdefault((tokens[i][1], tokens[i + n - 1][2]), []).append((choice, all(grades)))
        kept: list[tuple[int, int, str]] = []
        for (start, end), hits in sorted(spans.items(), key=lambda kv: kv[0][0] - kv[0][1]):
            exact = {c for c, e in hits if e}
            names = exact or {c for c, _ in hits}
            if len(names) != 1:
                continue  # one word read as two different choices: ambiguous, so it names neither
            if all(end <= s or start >= e for s, e, _ in kept):
                kept.append((start, end, names.pop()))
        return {c for _, _, c in kept}


@lru_cache(maxsize=4096)
def _reader(choices: tuple[str, ...], lang: str) -> _Reader:
    return _Reader(choices, lang)


def read_answer(text: str, choices: Sequence[str], lang: str) -> str | None:
    """The one choice the reply gives as its answer, returned exactly as listed in `choices`, else None.

    `choices` are the canonical English "yes"/"no", option letters ("A", "B", …) or concept words in `lang`.
    """
    return _reader(tuple(choices), lang).read(text)
