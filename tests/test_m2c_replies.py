"""Answer validation on a corpus of replies per language (tests/data/m2c_replies/<lang>.yaml) to shipped
M2C tests: every right reply (elliptical, whole-sentence, accepted variants) is accepted, every other form
of the gold lexeme is a morphological error, every wrong answer a plain miss."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from m2c_shipped import one, render
from pydantic import BaseModel, ConfigDict

from builder.m2c.answers import validate
from builder.m2c.language import available
from builder.m2c.template_files import load_language_templates, template_type

CORPUS = Path(__file__).parent / "data" / "m2c_replies"


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid")
    test: str  # capability#test type
    fill: dict[str, str | list[str]]
    context: str
    question: str | None = None  # where two tests share the context
    right: list[str]
    form: list[str] = []
    wrong: list[str]


def _cases(lang: str) -> list[Case]:
    raw = yaml.safe_load((CORPUS / f"{lang}.yaml").read_text(encoding="utf-8"))
    assert raw["lang"] == lang
    return [Case(**c) for c in raw["cases"]]


def test_corpus_covers_every_language_and_test_type():
    assert sorted(p.stem for p in CORPUS.glob("*.yaml")) == available()
    for lang in available():
        cases = _cases(lang)
        shipped = {f"{tt.capability}#{template_type(tt.template_id)}" for tt in load_language_templates(lang)}
        assert {c.test for c in cases} == shipped, lang
        assert all(c.right and c.wrong for c in cases), lang
        assert sum(len(c.form) for c in cases) >= 8, lang  # other forms of the gold lexeme, across test types


@pytest.mark.parametrize("lang", available())
def test_corpus(tmp_path, lang):
    wrong = []
    for case in _cases(lang):
        capability, test_type = case.test.split("#")
        t = one(render(tmp_path / case.test, lang, capability, test_type, **case.fill), case.context, case.question)
        for kind, replies in (("right", case.right), ("form", case.form), ("wrong", case.wrong)):
            for reply in replies:
                v = validate(reply, t, lang)
                got = "right" if v.correct else "form" if v.morphological_error else "wrong"
                if got != kind:
                    wrong.append(f"{case.test} {t.question!r} (gold {t.answer!r}): {reply!r} expected {kind}, got {got} ({v.how})")
    assert not wrong, f"{len(wrong)} verdicts wrong in {lang}:\n" + "\n".join(wrong)
