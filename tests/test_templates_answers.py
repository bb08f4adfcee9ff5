"""Answer validation: normalisation, numerals, regex, alternatives and morphological errors."""

import unicodedata

import pytest

from builder.m2c.answers import match_key, validate
from builder.m2c.template_files import M2CTest


def _test(answer, alternatives=(), forms=(), lang="de"):
    return M2CTest(test_id="m_x", lang=lang, capability="c", template_id=f"{lang}/c#0", context="", question="",
                   answer=answer, alternatives=list(alternatives), answer_forms=list(forms), fills={}, verified=True)


@pytest.mark.parametrize("reply, how", [
    ("Unter dem Tisch.", "exact"),
    ("unter  dem tisch", "normalised"),
    ("  UNTER DEM TISCH!!  ", "normalised"),
    ("»Unter dem Tisch«", "normalised"),
])
def test_normalised_matches(reply, how):
    v = validate(reply, _test("Unter dem Tisch."), "de")
    assert (v.correct, v.morphological_error, v.how) == (True, False, how)


def test_arabic_vowel_marks_are_optional_and_tatweel_is_ignored():
    t = _test("مهندسًا.", forms=["مهندس."], lang="ar")
    assert validate("مهندسا", t, "ar").how == "normalised" and validate("مهنـدسًا", t, "ar").correct
    assert validate("مهندس", t, "ar").morphological_error


def test_unicode_nfc_makes_composed_and_decomposed_equal():
    decomposed = unicodedata.normalize("NFD", "Ärztin")
    assert decomposed != "Ärztin" and validate(decomposed, _test("Ärztin."), "de").correct


def test_morphological_error_is_not_a_plain_miss():
    t = _test("Isoäidilläni.", forms=["Isoäidilleni.", "Isoäitini."], lang="fi")
    v = validate("isoäidilleni", t, "fi")
    assert (v.correct, v.morphological_error, v.matched) == (False, True, "Isoäidilleni.")
    v = validate("Siskollani", t, "fi")
    assert (v.correct, v.morphological_error, v.how) == (False, False, "miss")


@pytest.mark.parametrize("lang, answer, reply", [
    ("en", "Three.", "3"),
    ("en", "3", "three"),
    ("de", "Drei.", "3."),
    ("ru", "Две.", "2"),
    ("zh", "三只。", "3只"),
    ("ar", "٣", "3"),
    ("ar", "ثلاثة", "٣"),
    ("fr", "Une.", "1"),
])
def test_numerals_in_words_or_digits(lang, answer, reply):
    v = validate(reply, _test(answer, lang=lang), lang)
    assert v.correct and v.how in ("numeral", "normalised"), v


def test_wrong_gender_of_a_number_word_is_a_morphological_error_not_a_numeral_match():
    v = validate("Два", _test("Две.", alternatives=["2"], forms=["Два."], lang="ru"), "ru")
    assert v.morphological_error and not v.correct


def test_alternatives_and_regex():
    t = _test("Unter dem Tisch.", alternatives=["Das Buch liegt unter dem Tisch.", r"re:(es liegt )?unter dem tisch\.?"])
    assert validate("Das Buch liegt unter dem Tisch", t, "de").how == "alternative"
    assert validate("Es liegt unter dem Tisch.", t, "de").how == "regex"
    assert validate("Auf dem Tisch", t, "de").how == "miss"


def test_a_release_row_as_a_mapping_works_too():
    row = {"answer": "Kokki.", "alternatives": ["Kokkina"], "answer_forms": ["Kokkeja."]}
    assert validate("kokkina", row, "fi").how == "alternative"
    assert validate("kokkeja", row, "fi").morphological_error


def test_match_key():
    assert match_key("  L'Arbre,  est-il   là ? ") == "l arbre est il là"
    assert match_key("zwanzig Äpfel", None, numbers=True) == "zwanzig äpfel"
