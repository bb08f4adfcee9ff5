"""Template files: the shipped tests in the paper's twelve languages, and errors that name file, line and column."""

import re
from pathlib import Path

import pytest

from builder.m2c import TemplateError
from builder.m2c.answers import validate
from builder.m2c.language import available
from builder.m2c.template_files import load_file, load_language_templates, template_files

CAPABILITIES = {"negation", "numerals", "spatial", "temporal", "comparatives"}
# the M2C paper's twelve languages, in its order
SHIPPED = ["en", "es", "it", "fr", "de", "sv", "fi", "sk", "ru", "zh", "sw", "ar"]


def test_shipped_capabilities_languages_and_language_specific_features():
    assert sorted(SHIPPED) == available()
    caps = {lang: {p.stem for p in template_files(lang)} for lang in SHIPPED}
    assert all(CAPABILITIES <= c for c in caps.values()), caps
    extra = {(lang, c) for lang, cs in caps.items() for c in cs - CAPABILITIES}
    assert {("zh", "measure_words"), ("ru", "motion_verbs"), ("fi", "possessives"), ("sw", "time")} <= extra


def test_every_language_renders_tests_of_every_capability_from_its_shipped_templates():
    for lang in SHIPPED:
        rendered = {}
        for tt in load_language_templates(lang):
            rendered[tt.capability] = rendered.get(tt.capability, 0) + len(list(tt.tests(n=20, seed=1)))
        assert set(rendered) >= CAPABILITIES and all(n >= 20 for n in rendered.values()), (lang, rendered)


@pytest.mark.parametrize("lang", SHIPPED)
def test_every_shipped_template_renders_clean_distinct_verified_tests(lang):
    for tt in load_language_templates(lang):
        tests = list(tt.tests(n=300, seed=11))
        assert len(tests) == min(300, len(tt.template)) > 0, tt.template_id
        assert len({(t.context, t.question, t.answer) for t in tests}) == len(tests), tt.template_id
        for t in tests:
            text = t.context + t.question + t.answer + "".join(t.alternatives)
            assert "{" not in text and "}" not in text and "  " not in text, (tt.template_id, t)
            assert t.verified and t.answer.strip() and t.template_id == tt.template_id
            assert validate(t.answer, t, lang).correct
            assert all(not validate(f, t, lang).correct and validate(f, t, lang).morphological_error for f in t.answer_forms)
        assert [t.test_id for t in tt.tests(n=50, seed=5)] == [t.test_id for t in tt.tests(n=50, seed=5)]


def _tests(lang, capability, n=2000):
    (path,) = [p for p in template_files(lang) if p.stem == capability]
    return [t for tt in load_file(path) for t in tt.tests(n=n, seed=0)]


def test_russian_numeral_answer_agrees_in_gender_and_the_other_gender_is_a_morphological_error():
    words = {1: {"MASC": "Один", "FEM": "Одна", "NEUT": "Одно"}, 2: {"MASC": "Два", "FEM": "Две", "NEUT": "Два"}}
    values = {"пять": 5, "шесть": 6, "семь": 7, "восемь": 8, "девять": 9, "один": 1, "одна": 1, "одно": 1, "одну": 1,
              "два": 2, "две": 2, "три": 3, "четыре": 4}
    seen = set()
    for t in _tests("ru", "numerals"):
        if not t.template_id.endswith("#subtraction"):
            continue
        n = values[t.fills["big1"]["form"]] - values[t.fills["small"]["form"]]
        gender = t.fills["fruit1"]["features"]["GENDER"]
        assert t.alternatives == [str(n)]
        if n in words:
            assert t.answer == words[n][gender] + "."
            seen.add((n, gender))
            wrong = "Два" if t.answer == "Две." else None
            if wrong:
                assert validate(wrong, t, "ru").morphological_error
        # the eaten fruit: 1 -> accusative singular, 2-4 -> genitive singular
        eaten = t.context.split(".")[1]
        assert t.fills["fruit1"]["lemma"] in {"груша", "слива", "апельсин", "банан", "яблоко", "мандарин"}
        assert eaten.strip().split()[-1] in {"грушу", "сливу", "апельсин", "банан", "яблоко", "мандарин", "груши", "сливы",
                                            "апельсина", "банана", "яблока", "мандарина"}
    assert {(1, "FEM"), (1, "MASC"), (2, "FEM"), (2, "MASC")} <= seen


def test_german_location_takes_the_dative_article_of_the_places_gender():
    for t in _tests("de", "spatial", 500):
        article = t.answer.split()[1]
        place = t.answer.split()[2].rstrip(".")
        assert article == ("der" if place == "Kommode" else "dem"), t.answer
        assert not validate(t.answer.replace(f" {article} ", " den "), t, "de").correct


def test_french_elision_and_contraction_in_shipped_tests():
    texts = [t.context + " " + t.question + " " + t.answer for t in _tests("fr", "spatial", 1000)]
    assert any("à côté du " in s for s in texts) and any("l'étagère" in s for s in texts)
    assert not any(re.search(r"\b(de le|de les|le [aeéiou]|la [aeéiou])", s) for s in texts)


def test_finnish_possessive_answer_and_its_allative_as_morphological_error():
    for t in _tests("fi", "possessives", 100):
        allative = next(f for f in t.answer_forms if f.lower().rstrip(".").endswith(("lleni",)))
        v = validate(allative, t, "fi")
        assert v.morphological_error and not v.correct


def test_chinese_measure_word_generic_classifier_is_a_wrong_form():
    for t in _tests("zh", "measure_words", 100):
        if "只" in t.answer:
            assert validate(t.answer.replace("只", "个"), t, "zh").morphological_error
            assert validate(t.answer.rstrip("。"), t, "zh").correct


def test_chinese_spatial_asks_every_localizer():
    """A localizer short of a variant once dropped its fills: only 上面 and 下面 were ever asked."""
    answers = {t.answer[-3:-1] for t in _tests("zh", "spatial", 300)}
    assert answers == {"上面", "下面", "旁边", "后面", "前面"}


def test_swedish_nothing_stands_on_a_bed_or_a_sofa_and_ovanpa_says_pa():
    tests = _tests("sv", "spatial", 1000)
    assert not any(re.search(r"står på (sängen|soffan)", t.context) for t in tests)
    on = [t for t in tests if t.answer.startswith("På ")]
    assert on and all(validate("Ovanpå " + t.answer[3:], t, "sv").correct for t in on)


def test_swahili_time_activities_last_as_they_can_in_the_waking_day():
    longest = {"kupika": 3, "kufua nguo": 3, "kuandika barua": 3, "kusoma": 5, "kushona nguo": 5, "kusafisha nyumba": 5}
    for t in _tests("sw", "time", 500):
        hours, start = int(t.fills["hours"]["lemma"]), int(t.fills["hour"]["lemma"])
        assert hours <= longest.get(t.fills["act"]["lemma"], 9) and 7 <= start <= 22, t.context


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "de" / "spatial.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(body, encoding="utf-8")
    return path


def test_error_positions_point_into_the_file_including_block_scalars(tmp_path):
    path = _write(tmp_path, """capability: spatial
placeholders:
  obj: [{SG: Buch, PL: Bücher}]
templates:
  - context: >-
      Das {obj.SG} liegt
      neben dem {obj.SGG}.
    question: "Wo ist {obj.SG}?"
    answer: "{objx}"
""")
    with pytest.raises(TemplateError) as info:
        load_file(path)
    assert (info.value.where.file, info.value.where.line, info.value.where.col) == (str(path), 7, 22)
    assert str(info.value).startswith(f"{path}:7:22") and "SGG" in str(info.value)
    path = _write(tmp_path, """capability: spatial
placeholders:
  obj: [{SG: Buch, PL: Bücher}]
templates:
  - context: "Das {obj.SG} liegt hier."
    question: "Wo ist {obj.SG}?"
    answer: "{objx}"
""")
    with pytest.raises(TemplateError) as info:
        load_file(path)
    assert (info.value.where.line, info.value.where.col) == (7, 14)


def test_an_alternative_with_its_own_case_holds_where_its_forms_exist_and_a_form_no_value_has_is_refused(tmp_path):
    body = """capability: spatial
dimensions:
  VARIANT: {features: [V1, V2], sampleable: false}
placeholders:
  prep: [{V1: auf}, {V1: neben, V2: bei}]
  place: [{DAT.SG: Tisch, GEN.SG: Tisches}, {DAT.SG: Bett}]
templates:
  - context: "Das Buch liegt {prep.V1} dem {place.DAT.SG}."
    question: "Wo liegt das Buch?"
    answer: "{prep.V1} dem {place.DAT.SG}."
    alternatives: ["{prep.V2} dem {place.DAT.SG}",
                   "unweit des {place.GEN.SG}"]
"""
    (t,) = load_file(_write(tmp_path, body))
    assert [(x.answer, x.alternatives) for x in t.tests(n=-1)] == [
        ("Auf dem Tisch.", ["Unweit des Tisches"]), ("Auf dem Bett.", []),
        ("Neben dem Tisch.", ["Beim Tisch", "Unweit des Tisches"]), ("Neben dem Bett.", ["Beim Bett"])]
    for wrong, col, message in (("{place.GEN.PL}", 32, "no value of placeholder place has a PL.GEN form in any fill"),
                                ("{place.GEN.SGG}", 43, "unknown feature 'SGG'")):  # a form no value has; a typo
        path = _write(tmp_path, body.replace("{place.GEN.SG}", wrong))
        with pytest.raises(TemplateError) as info:
            load_file(path)
        assert (info.value.where.file, info.value.where.line, info.value.where.col) == (str(path), 12, col)
        assert message in str(info.value)


def test_file_level_errors_name_the_file(tmp_path):
    path = _write(tmp_path, "templates:\n  - context: 'x'\n    question: 'y'\n")
    with pytest.raises(TemplateError, match="missing answer"):
        load_file(path)
    path = _write(tmp_path, "placeholders:\n  p: [on, off]\ntemplates:\n  - {context: '{p}', question: q, answer: a}\n")
    with pytest.raises(TemplateError, match="boolean") as info:
        load_file(path)
    assert info.value.where.line == 2
    path = _write(tmp_path, "templates: [\n")
    with pytest.raises(TemplateError, match="not valid YAML") as info:
        load_file(path)
    assert info.value.where.file == str(path)
