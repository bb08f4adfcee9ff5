"""evaluate.answers.read_answer on a corpus of replies written per language, plus its data file and fallbacks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, ConfigDict

from builder.languages import builtin_languages, declare, registry
from evaluate.answers import AnswerDataError, answer_data, load_answer_data, read_answer

CORPUS = Path(__file__).parent / "data" / "answer_replies"
LANGS = [lang.code for lang in builtin_languages()]


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    reply: str
    choices: list[str]
    expect: str | None


def _cases(lang: str) -> list[Case]:
    raw = yaml.safe_load((CORPUS / f"{lang}.yaml").read_text(encoding="utf-8"))
    assert raw["lang"] == lang
    return [Case(**c) for c in raw["cases"]]


def test_corpus_covers_every_registry_language_with_negatives():
    assert len(LANGS) == 18 and sorted(p.stem for p in CORPUS.glob("*.yaml")) == sorted(LANGS)
    for lang in LANGS:
        cases = _cases(lang)
        assert len(cases) >= 20, lang
        assert all(c.expect is None or c.expect in c.choices for c in cases), lang
        kinds = {("yn" if c.choices == ["yes", "no"] else "ab" if all(len(x) == 1 for x in c.choices) else "cw",
                  c.expect is None) for c in cases}
        # every kind of choice appears with an answer and with a refusal (none or several)
        assert kinds == {(k, refused) for k in ("yn", "ab", "cw") for refused in (False, True)}, lang


@pytest.mark.parametrize("lang", LANGS)
def test_corpus(lang):
    wrong = [f"{c.reply!r} with {c.choices}: expected {c.expect!r}, got {got!r}"
             for c in _cases(lang) if (got := read_answer(c.reply, c.choices, lang)) != c.expect]
    assert not wrong, f"{len(wrong)} wrong in {lang}:\n" + "\n".join(wrong)


def test_data_file_covers_every_registry_language():
    data = answer_data()
    assert set(LANGS) <= set(data)


def test_answer_returned_exactly_as_listed_in_choices():
    assert read_answer("JA!", ["Yes", "No"], "de") == "Yes"
    assert read_answer("the answer is TOASTER", ["Toaster", "Kettle"], "en") == "Toaster"


def test_language_words_do_not_leak_into_other_languages():
    # German "ja" is not an answer in Chinese; English is always understood (models often switch to it).
    assert read_answer("Ja.", ["yes", "no"], "zh") is None
    assert read_answer("Yes.", ["yes", "no"], "zh") == "yes"


def test_language_declared_only_in_a_workspace_falls_back_to_english_and_the_choices(ws):
    declare(ws, code="sw", name="Swahili", typology="agglutinative", family="Niger-Congo", script="Latn")
    assert "sw" in registry(ws) and "sw" not in answer_data()
    assert read_answer("The answer is: yes", ["yes", "no"], "sw") == "yes"
    assert read_answer("Ndiyo", ["yes", "no"], "sw") is None  # Swahili words are unknown until added to the data
    assert read_answer("Kibaniko, kwa sababu kinapasha mkate.", ["kibaniko", "birika"], "sw") == "kibaniko"
    assert read_answer("Answer: (B)", ["A", "B"], "sw") == "B"


def test_choices_must_be_distinct():
    with pytest.raises(ValueError, match="distinct"):
        read_answer("yes", ["yes", "Yes"], "en")
    with pytest.raises(ValueError, match="two"):
        read_answer("yes", ["yes"], "en")


def test_bad_data_file_names_file_line_and_field(tmp_path):
    path = tmp_path / "answers.yaml"
    path.write_text(
        'en:\n  yes_words: ["yes"]\n  no_words: ["no"]\n  answer_is: [answer]\n'
        "de:\n  yes_words: [ja]\n  no_words: [nein, Ja]\n  answer_is: [antwort]\n",
        encoding="utf-8",
    )
    with pytest.raises(AnswerDataError, match=rf"{path}:5: language 'de': entry: .*listed as both yes and no: ja"):
        load_answer_data(path)
    # unquoted yes/no are YAML booleans: reported, not silently read as "True"
    path.write_text("en:\n  yes_words: [yes]\n  no_words: [no]\n  answer_is: [answer]\n", encoding="utf-8")
    with pytest.raises(AnswerDataError, match=r":1: language 'en': yes_words.0: .*valid string \(got True\)"):
        load_answer_data(path)
    path.write_text('en:\n  yes_words: ["yes"]\n  no_words: ["no"]\n  answer_is: [answer]\n  maybe: [x]\n',
                    encoding="utf-8")
    with pytest.raises(AnswerDataError, match=r":1: language 'en': maybe: Extra inputs are not permitted"):
        load_answer_data(path)
    path.write_text("de:\n  yes_words: [ja]\n  no_words: [nein]\n  answer_is: [antwort]\n", encoding="utf-8")
    with pytest.raises(AnswerDataError, match="English"):
        load_answer_data(path)
