"""Conformance of the template engine: every construct and every clean-semantics rule, exact outputs."""

from collections import Counter

import pytest

from builder.m2c import Lexeme, Template, TemplateError, load_language, register_function
from builder.m2c.functions import FUNCTIONS
from builder.m2c.language import LanguageDataError, parse_language

GENDER = {"GENDER": ["MASC", "FEM"]}
NAMES = [{"MASC": "John"}, {"FEM": "Mary"}]


# -- plain placeholders, duplicates, options ------------------------------------------------------


def test_plain_placeholders_render_every_fill_in_index_order():
    t = Template("{a} {b}", a=["x", "y"], b=["1", "2", "3"])
    assert len(t) == 6
    assert t.render() == ["x 1", "x 2", "x 3", "y 1", "y 2", "y 3"]


def test_numbered_copies_are_distinct_and_ordered_by_default():
    assert Template("{n1}-{n2}", n=["a", "b", "c"]).render() == ["a-b", "a-c", "b-a", "b-c", "c-a", "c-b"]


@pytest.mark.parametrize("options, expected", [
    ({"unordered": True}, ["a-b", "a-c", "b-c"]),
    ({"distinct": False}, ["a-a", "a-b", "a-c", "b-a", "b-b", "b-c", "c-a", "c-b", "c-c"]),
    ({"unordered": True, "distinct": False}, ["a-a", "a-b", "a-c", "b-b", "b-c", "c-c"]),
    # the reference's spelling: order=True means "order does not matter", repeat=True allows repeats
    ({"order": True, "repeat": False}, ["a-b", "a-c", "b-c"]),
    ({"order": False, "repeat": True}, ["a-a", "a-b", "a-c", "b-a", "b-b", "b-c", "c-a", "c-b", "c-c"]),
])
def test_duplicate_options_and_their_reference_aliases(options, expected):
    assert Template("{n1}-{n2}", n=["a", "b", "c"], options={"n": options}).render() == expected


def test_three_distinct_copies_count_and_never_repeat():
    out = Template("{n1} {n2} {n3}", n=list("abcd")).render()
    assert len(out) == 24 == len(set(out))
    assert all(len(set(s.split())) == 3 for s in out)


def test_unordered_copies_with_different_features_keep_one_orientation_per_pair():
    t = Template("{n1} & {n2}", dimensions=GENDER, n=[{"MASC": "Max"}, {"FEM": "Eva"}, {"MASC": "Tom"}, {"FEM": "Ann"}],
                 options={"n": {"unordered": True}})
    out = t.render()
    assert len(out) == 6 and {frozenset(s.split(" & ")) for s in out} == {
        frozenset(p) for p in [("Max", "Eva"), ("Max", "Tom"), ("Max", "Ann"), ("Eva", "Tom"), ("Eva", "Ann"), ("Tom", "Ann")]}


def test_repeat_false_never_gives_the_same_lexeme_even_when_a_rule_depends_on_it():
    t = Template("{ART.INDF.SG} {x1} and {ART.INDF.SG} {x2}", "en", x=["apple", "pear", "owl"])
    out = t.render()
    assert len(out) == 6
    assert "an apple and a pear" in [s.lower() for s in out]
    assert not any(s.split(" and ")[0].split()[-1] == s.split(" and ")[1].split()[-1] for s in out)


# -- features, agreement, conditions, inline rules ---------------------------------------------------


def test_fixed_features_and_the_same_lexeme_across_keys():
    t = Template("{obj.SG} and two {obj.PL}", dimensions={"NUMBER": ["SG", "PL"]},
                 obj=[{"SG": "book", "PL": "books"}, {"SG": "pen", "PL": "pens"}])
    assert t.render() == ["book and two books", "pen and two pens"]


def test_agreement_copies_the_feature_and_lexemes_without_it_are_not_used():
    t = Template("{name} is {adj.<name.GENDER>}.", dimensions=GENDER, name=NAMES,
                 adj=[{"MASC": "tall", "FEM": "tall-f"}, {"MASC": "happy", "FEM": "happy-f"}])
    assert t.render() == ["John is tall.", "John is happy.", "Mary is tall-f.", "Mary is happy-f."]


def test_agreement_on_several_dimensions_at_once():
    dims = {"NUMBER": ["SG", "PL"], "GENDER": ["MASC", "FEM"]}
    t = Template("{noun} {adj.<noun.NUMBER.GENDER>}", dimensions=dims,
                 noun=[{"SG.FEM": "casa", "PL.FEM": "case"}, {"SG.MASC": "libro", "PL.MASC": "libri"}],
                 adj=[{"SG.MASC": "rosso", "SG.FEM": "rossa", "PL.MASC": "rossi", "PL.FEM": "rosse"}])
    assert t.render() == ["libro rosso", "casa rossa", "libri rossi", "case rosse"]


def test_conditional_feature_with_default():
    dims = {"CASE": ["NOM", "ACC", "GEN"], "COUNT": ["C1", "C2"]}
    t = Template("{n} {fruit.<ACC:n.C1|GEN>}", dimensions=dims,
                 n=[{"C1": "one"}, {"C2": "two"}], fruit=[{"ACC": "apple-acc", "GEN": "apple-gen", "NOM": "apple"}])
    assert t.render() == ["one apple-acc", "two apple-gen"]


def test_inline_rule_chooses_by_the_placeholder_features_and_allows_empty_values():
    dims = {"NUMBER": ["SG", "PL"], "GENDER": ["MASC", "FEM"]}
    t = Template("{ein:n.SG.MASC|eine:n.SG.FEM|:n.PL} {n}", dimensions=dims,
                 n=[{"SG.MASC": "Hund", "PL.MASC": "Hunde"}, {"SG.FEM": "Katze", "PL.FEM": "Katzen"}])
    assert t.render() == ["ein Hund", "eine Katze", "Hunde", "Katzen"]


def test_inline_rule_with_modifier():
    t = Template("{is:x.SG|are:x.PL.TO_UPPER} {x}", dimensions={"NUMBER": ["SG", "PL"]}, x=[{"SG": "cat", "PL": "cats"}])
    assert t.render() == ["IS cat", "ARE cats"]


def test_custom_dimensions_without_a_language():
    t = Template("{a.<b.d1>}/{b}", dimensions={"d1": ["A", "B"]}, a=[{"A": "a-A", "B": "a-B"}], b=[{"A": "bA"}, {"B": "bB"}])
    assert t.render() == ["a-A/bA", "a-B/bB"]


# -- functions -----------------------------------------------------------------------------------


def test_builtin_functions_with_number_words_and_features():
    t = Template("{x} + {y} = {$sum(x, y)}; {x} - {y} = {$words($diff(x, y)).TO_CAPITALIZE}", "en", x=["seven"], y=["2", "five"])
    assert t.render() == ["Seven + 2 = 9; seven - 2 = Five", "Seven + five = 12; seven - five = Two"]


def test_words_agrees_in_gender_and_case_from_a_placeholder_dimension():
    t = Template("{$words(n, fruit.GENDER, 'NOM')} {fruit.NOM.SG}", "ru", n=["1"],
                 fruit=[Lexeme({"NOM.SG": "груша"}, features="FEM"), Lexeme({"NOM.SG": "банан"}, features="MASC")])
    assert t.render() == ["Один банан", "Одна груша"]


def test_russian_accusative_of_one_to_four_is_the_genitive_for_animate_nouns():
    t = Template("Я вижу {$words(n, x.GENDER, x.ANIMACY, 'ACC')} {x}.", "ru", n=["1", "2", "3", "4"],
                 x=[Lexeme({"": "кота"}, features="MASC.ANIM"), Lexeme({"": "стол"}, features="MASC.INAN"),
                    Lexeme({"": "кошек"}, features="FEM.ANIM"), Lexeme({"": "лампы"}, features="FEM.INAN")])
    assert [s.split()[2] for s in t.render()] == ["одного", "двух", "трёх", "четырёх", "один", "два", "три", "четыре",
                                                  "одну", "двух", "трёх", "четырёх", "одну", "две", "три", "четыре"]
    with pytest.raises(TemplateError, match="vary by ANIMACY"):
        Template("{$words(n, 'MASC', 'ACC')}", "ru", n=["2"]).render()


def test_arabic_numbers_take_the_opposite_gender_from_three_to_ten():
    t = Template("{$words(n, x.GENDER, 'NOM')} {x}", "ar", n=["1", "2", "3", "8", "10", "13"],
                 x=[Lexeme({"": "أقلام"}, features="MASC"), Lexeme({"": "تفاحات"}, features="FEM")])
    assert [s.rsplit(" ", 1)[0] for s in t.render()] == [
        "واحد", "اثنان", "ثلاثة", "ثمانية", "عشرة", "ثلاثة عشر",    # قلم is masculine: 3-10 look feminine
        "واحدة", "اثنتان", "ثلاث", "ثماني", "عشر", "ثلاث عشرة"]     # تفاحة is feminine: 3-10 look masculine


def test_a_rule_value_list_generates_its_first_and_accepts_the_others():
    t = Template({"q": "{n}", "answer": "三{CLASSIFIER.<n.CLASSIFIER_TYPE>}"}, "zh", n=[{"DOG": "狗"}, {"ANIMAL": "猫"}])
    cat, dog = t.fills(variants=("answer",), accepted=("answer",))  # in the order of the types
    assert (dog.texts["answer"], dog.accepted_forms["answer"]) == ("三只", ["三条"])
    assert (cat.texts["answer"], cat.accepted_forms["answer"]) == ("三只", [])
    assert "三个" in dog.other_forms["answer"] and "三个" in cat.other_forms["answer"]


def test_clock_gives_the_time_of_day_of_an_hour_from_the_language_file():
    t = Template("{$clock(h)} + 3 = {$clock($sum(h, 3))}", "sw", h=["22", "5"])
    assert t.render() == ["Saa nne usiku + 3 = saa saba usiku", "Saa kumi na moja alfajiri + 3 = saa mbili asubuhi"]
    (fill,) = Template({"answer": "{$clock(h)}"}, "sw", h=["19"]).fills(accepted=("answer",))
    assert (fill.texts["answer"], fill.accepted_forms["answer"]) == ("Saa moja usiku", ["Saa moja jioni"])
    with pytest.raises(TemplateError, match="German has no clock"):
        Template("{$clock(h)}", "de", h=["1"]).render()


def test_a_clock_needs_every_hour():
    raw = {"code": "xx", "name": "Test", "dimensions": {"NUMBER": ["SG"]}, "clock": {h: f"h{h}" for h in range(23)}}
    with pytest.raises(LanguageDataError, match="missing: 23"):
        parse_language(raw)


def test_a_language_file_with_a_control_character_bad_yaml_or_bad_utf8_is_refused_with_its_line(tmp_path, monkeypatch):
    import builder.m2c.language as language

    shipped = (language.languages_dir() / "fr.yaml").read_text(encoding="utf-8")
    line = shipped.splitlines().index("    DEF.SG.FEM: la") + 1
    monkeypatch.setattr(language, "languages_dir", lambda: tmp_path)
    path = tmp_path / "fr.yaml"
    cases = {
        shipped.replace("DEF.SG.FEM: la", "DEF.SG.FEM: \"l\\x07a\""): rf"^{path}:{line}:17: holds U\+0007 \(a control character\)",
        shipped.replace("DEF.SG.FEM: la", "DEF.SG.FEM: [la"): rf"^{path}:{line + 1}:\d+: not valid YAML: ",
        shipped.replace("DEF.SG.FEM: la", "DEF.SG.FEM: " + "a" * 2001): rf"^{path}:{line}:17: is 2,001 characters long",
    }
    try:
        for text, error in cases.items():
            load_language.cache_clear()
            path.write_text(text, encoding="utf-8")
            with pytest.raises(LanguageDataError, match=error):
                load_language("fr")
        load_language.cache_clear()
        path.write_bytes(shipped.encode().replace(b"DEF.SG.FEM: la", b"DEF.SG.FEM: l\xe0"))
        with pytest.raises(LanguageDataError, match=rf"^{path}:{line}: not valid UTF-8 \(invalid continuation byte\)"):
            load_language("fr")
        load_language.cache_clear()
        path.write_text(shipped, encoding="utf-8")
        assert load_language("fr").rules["ART"].lookup({"DEFINITENESS": "DEF", "NUMBER": "SG", "GENDER": "FEM"}) == "la"
    finally:
        load_language.cache_clear()


def test_registered_and_template_local_functions():
    @register_function("shout")
    def shout(x, *, lang):
        return x.upper() + "!"

    try:
        t = Template("{$shout(w)} {$twice(w, 'x')}", w=["hi"], twice=lambda a, b, lang: a + a + b)
        assert t.render() == ["HI! hihix"]
    finally:
        FUNCTIONS.pop("shout")


def test_reference_style_lambda_without_the_lang_keyword():
    assert Template("{$diff(a, b)} {$d(a, b)}", a=["7"], b=["2"], d=lambda x, y: str(int(x) - int(y))).render() == ["5 5"]


def test_function_argument_that_only_appears_in_the_call_is_still_sampled():
    assert Template("{$sum(a, 1)}", a=["1", "2"]).render() == ["2", "3"]


# -- modifiers, braces, post-processing ----------------------------------------------------------


def test_modifiers_capitalize_only_the_first_letter_and_exist_without_a_language():
    t = Template("{x.TO_CAPITALIZE}|{x.TO_UPPER}|{x.TO_LOWER}|{x.TO_TITLE}", x=["new York"])
    assert t.render() == ["New York|NEW YORK|new york|New York"]


def test_language_declared_modifier():
    assert Template("{x.TO_DEF}", "ar", x=["كتاب"]).render() == ["الكتاب"]


def test_escaped_braces_are_literal():
    assert Template("{{{x}}} and }} {{", x=["a"]).render() == ["{a} and } {"]


def test_postprocessing_never_glues_across_a_word_final_apostrophe_in_english():
    assert Template("the {x}' books .  done", "en", x=["students"]).render() == ["The students' books. Done"]


# -- language rules ------------------------------------------------------------------------------

GERMAN_NOUNS = [
    Lexeme({"SG": "Tisch", "GEN.SG": "Tisches", "PL": "Tische", "DAT.PL": "Tischen"}, features="MASC"),
    Lexeme({"SG": "Lampe", "PL": "Lampen"}, features="FEM"),
    Lexeme({"SG": "Bett", "GEN.SG": "Bettes", "PL": "Betten"}, features="NEUT"),
]


@pytest.mark.parametrize("case, expected", [
    ("NOM", ["der Tisch", "die Lampe", "das Bett", "die Tische", "die Lampen", "die Betten"]),
    ("ACC", ["den Tisch", "die Lampe", "das Bett", "die Tische", "die Lampen", "die Betten"]),
    ("DAT", ["dem Tisch", "der Lampe", "dem Bett", "den Tischen", "den Lampen", "den Betten"]),
    ("GEN", ["des Tisches", "der Lampe", "des Bettes", "der Tische", "der Lampen", "der Betten"]),
])
def test_german_definite_article_case_gender_number(case, expected):
    t = Template(f"{{ART.DEF.{case}.<n.NUMBER.GENDER>}} {{n.{case}}}", "de", n=GERMAN_NOUNS)
    assert [s[0].lower() + s[1:] for s in t.render()] == expected


@pytest.mark.parametrize("rule, case, expected", [
    ("ART.INDF", "NOM", ["ein", "eine", "ein"]),
    ("ART.INDF", "ACC", ["einen", "eine", "ein"]),
    ("ART.INDF", "DAT", ["einem", "einer", "einem"]),
    ("ART.INDF", "GEN", ["eines", "einer", "eines"]),
    ("NEG", "NOM", ["kein", "keine", "kein"]),
    ("NEG", "ACC", ["keinen", "keine", "kein"]),
    ("NEG", "DAT", ["keinem", "keiner", "keinem"]),
])
def test_german_indefinite_and_negative_articles(rule, case, expected):
    t = Template(f"x {{{rule}.{case}.SG.<n.GENDER>}} {{n.{case}.SG}}", "de", n=GERMAN_NOUNS)
    assert [s.split()[1] for s in t.render()] == expected


def test_german_contractions_after_a_preposition():
    t = Template("{p} {ART.DEF.DAT.SG.<n.GENDER>} {n.DAT.SG}", "de", p=["in", "an", "unter"], n=GERMAN_NOUNS[:2])
    # index order: feature combinations first (the noun's gender), then lexemes, the first placeholder slowest
    assert t.render() == ["Im Tisch", "Am Tisch", "Unter dem Tisch", "In der Lampe", "An der Lampe", "Unter der Lampe"]
    t = Template("{p} {ART.DEF.ACC.SG.<n.GENDER>} {n.ACC.SG}", "de", p=["in", "an", "auf"], n=GERMAN_NOUNS[1:])
    assert t.render() == ["In die Lampe", "An die Lampe", "Auf die Lampe", "Ins Bett", "Ans Bett", "Auf das Bett"]


@pytest.mark.parametrize("word, gender, sg, pl", [
    ("libro/libri", "MASC", "il libro", "i libri"),
    ("studente/studenti", "MASC", "lo studente", "gli studenti"),
    ("zaino/zaini", "MASC", "lo zaino", "gli zaini"),
    ("gnomo/gnomi", "MASC", "lo gnomo", "gli gnomi"),
    ("psicologo/psicologi", "MASC", "lo psicologo", "gli psicologi"),
    ("amico/amici", "MASC", "l'amico", "gli amici"),
    ("hotel/hotel", "MASC", "l'hotel", "gli hotel"),
    ("casa/case", "FEM", "la casa", "le case"),
    ("amica/amiche", "FEM", "l'amica", "le amiche"),
])
def test_italian_definite_article_by_the_next_words_first_letters(word, gender, sg, pl):
    s, p = word.split("/")
    t = Template("x {ART.DEF.<n.NUMBER.GENDER>} {n}", "it", n=[Lexeme({"SG": s, "PL": p}, features=gender)])
    assert [r[2:] for r in t.render()] == [sg, pl]


def test_italian_article_follows_the_actual_next_word_and_indefinites():
    t = Template("x {ART.DEF.SG.<n.GENDER>} {adj} {n.SG}", "it", adj=["bravo", "stesso"], n=[Lexeme({"SG": "amico"}, features="MASC")])
    assert t.render() == ["X il bravo amico", "X lo stesso amico"]
    t = Template("{ART.INDF.SG.<n.GENDER>} {n}", "it", n=[{"SG.MASC": "libro"}, {"SG.MASC": "zaino"}, {"SG.FEM": "amica"}, {"SG.FEM": "casa"}])
    assert t.render() == ["Un libro", "Uno zaino", "Un'amica", "Una casa"]


def test_italian_preposition_and_article_contract():
    t = Template("vado {p} {ART.DEF.SG.<n.GENDER>} {n}", "it", p=["in", "a", "su"], n=[{"SG.MASC": "ufficio"}, {"SG.MASC": "stadio"}, {"SG.FEM": "scuola"}])
    assert t.render() == ["Vado nell'ufficio", "Vado nello stadio", "Vado all'ufficio", "Vado allo stadio",
                          "Vado sull'ufficio", "Vado sullo stadio", "Vado nella scuola", "Vado alla scuola", "Vado sulla scuola"]


def test_french_elision_contraction_and_aspirated_h():
    t = Template("{ART.DEF.SG.<n.GENDER>} {n} ne est pas à côté de {ART.DEF.SG.<n.GENDER>} {n}", "fr",
                 n=[{"SG.MASC": "arbre"}, {"SG.MASC": "hibou"}, {"SG.MASC": "homme"}, {"SG.FEM": "école"}, {"SG.FEM": "table"}])
    assert t.render() == [
        "L'arbre n'est pas à côté de l'arbre",
        "Le hibou n'est pas à côté du hibou",
        "L'homme n'est pas à côté de l'homme",
        "L'école n'est pas à côté de l'école",
        "La table n'est pas à côté de la table",
    ]


@pytest.mark.parametrize("noun, gender, expected", [
    ("héroïne", "FEM", "L'héroïne"),        # h muet, although héros has an aspirated h
    ("héros", "MASC", "Le héros"),
    ("hêtre", "MASC", "Le hêtre"),          # h aspiré
    ("hall", "MASC", "Le hall"),
    ("hallucination", "FEM", "L'hallucination"),
    ("hiérarchie", "FEM", "La hiérarchie"),
    ("hôtel", "MASC", "L'hôtel"),
])
def test_french_mute_and_aspirated_h(noun, gender, expected):
    assert Template("{ART.DEF.SG.<n.GENDER>} {n}", "fr", n=[{f"SG.{gender}": noun}]).render() == [expected]


def test_english_article_by_sound_of_the_next_word():
    t = Template("{ART.INDF.SG} {x}", "en", x=["apple", "university", "hour", "dog", "umbrella", "European"])
    assert t.render() == ["An apple", "A university", "An hour", "A dog", "An umbrella", "A European"]
    t = Template("{ART.INDF.SG} {x}", "en", x=["ukulele", "X-ray", "U-turn", "F-16", "unanimous vote", "uninformed guess",
                                                 "urban area", "xylophone"])
    assert t.render() == ["A ukulele", "An X-ray", "A U-turn", "An F-16", "A unanimous vote", "An uninformed guess",
                          "An urban area", "A xylophone"]


def test_explicit_agreement_on_a_computed_dimension_uses_that_placeholders_word():
    t = Template("{ART.INDF.SG.<x.STARTSWITH>} big {x}", "en", x=["apple", "dog"])
    assert t.render() == ["An big apple", "A big dog"]


def test_chinese_classifier_rule_by_the_nouns_type():
    t = Template("三{CLASSIFIER.<n.CLASSIFIER_TYPE>}{n}", "zh", n=[{"ANIMAL": "猫"}, {"VOLUME": "书"}, {"PAIR": "鞋"}])
    assert t.render() == ["三只猫", "三本书", "三双鞋"]
    nouns = {"LIVESTOCK": "牛", "HORSE": "马", "PLANT": "树", "BLOSSOM": "花", "MACHINE": "电脑", "AIRCRAFT": "飞机",
             "SHIP": "船", "GRAIN": "星星"}
    t = Template("三{CLASSIFIER.<n.CLASSIFIER_TYPE>}{n}", "zh", n=[{k: v} for k, v in nouns.items()])
    assert t.render() == ["三头牛", "三匹马", "三棵树", "三朵花", "三台电脑", "三架飞机", "三艘船", "三颗星星"]


# -- sampling --------------------------------------------------------------------------------------


def test_sampling_is_reproducible_distinct_and_a_subset_of_all_fills():
    t = Template("{a} {b} {c}", a=list("abcdefgh"), b=list("12345678"), c=list("xyzw"))
    everything = t.render()
    s1, s2 = t.render(50, seed=7), t.render(50, seed=7)
    assert s1 == s2 and len(set(s1)) == 50 and set(s1) <= set(everything)
    assert t.render(50, seed=8) != s1
    assert t.render(10_000, seed=1) == everything  # more than there are: all of them


def test_sampling_is_uniform_over_fills():
    t = Template("{n} {adj.<n.GENDER>}", dimensions=GENDER,
                 n=[{"MASC": "a"}, {"FEM": "b"}, {"FEM": "c"}], adj=[{"MASC": "x", "FEM": "xf"}, {"MASC": "y", "FEM": "yf"}])
    assert len(t) == 6
    counts = Counter(s for seed in range(3000) for s in t.render(2, seed=seed))
    assert set(counts) == set(t.render())
    # each fill is drawn with probability 2/6; 3000 draws -> 1000 expected, sd ~26
    assert all(abs(c - 1000) < 120 for c in counts.values()), counts


def test_skip_missing_drops_fills_a_rule_cannot_serve_instead_of_failing():
    lang = parse_language({"code": "xx", "name": "Test", "dimensions": {"NUMBER": ["SG", "PL"]}, "rules": {"ART": {"SG": "a"}}})
    with pytest.raises(TemplateError, match="rule ART of Test has no form for PL"):
        Template("{ART.<n.NUMBER>} {n}", lang, n=[{"SG": "x", "PL": "xs"}])
    assert Template("{ART.<n.NUMBER>} {n}", lang, {"skip_missing": True}, n=[{"SG": "x", "PL": "xs"}]).render() == ["A x"]


PREPS = [Lexeme({"V1": "under"}, features="INS"), Lexeme({"V1": "by", "V2": "next to"}, features="GEN")]
PLACES = [{"GEN": "table's", "INS": "table"}, {"GEN": "bed's"}]
CASES = {"CASE": ["GEN", "INS", "LOC"], "VARIANT": ["V1", "V2"]}


def test_an_optional_field_with_its_own_case_is_left_out_where_a_lexeme_lacks_a_form_it_names():
    # "next to" takes its own case (INS) and only "by" has it; "bed" has no INS form
    t = Template({"answer": "{prep.V1} {place.<prep.CASE>}", "alt": "{prep.V2} {place.INS}"}, dimensions=CASES,
                 optional=("alt",), prep=PREPS, place=PLACES)
    assert len(t) == 3  # the alternative restricts nothing: by table's, by bed's, under table
    assert [f.texts for f in t.fills()] == [{"answer": "by table's", "alt": "next to table"}, {"answer": "by bed's"},
                                            {"answer": "under table"}]
    assert t.render() == [{"answer": "by table's", "alt": "next to table"}, {"answer": "by bed's"},
                          {"answer": "under table"}]
    assert [f.values["prep"]["lemma"] for f in t.fills()] == ["by", "by", "under"]
    # the same text, not optional, keeps only the fills that have every form (the rule for context and answer)
    strict = Template({"answer": "{prep.V1} {place.<prep.CASE>}", "alt": "{prep.V2} {place.INS}"}, dimensions=CASES,
                      prep=PREPS, place=PLACES)
    assert strict.render() == [{"answer": "by table's", "alt": "next to table"}]


def test_an_optional_field_naming_a_form_no_lexeme_has_is_refused_where_it_is_written():
    e = _error({"answer": "{prep.V1} {place.<prep.CASE>}", "alt": "{prep.V2}\n {place.LOC}"}, dimensions=CASES,
               optional=("alt",), prep=PREPS, place=PLACES)
    assert (e.where.line, e.where.col, e.where.field) == (2, 2, "alt")
    assert "no value of placeholder place has a LOC form in any fill" in str(e)
    e = _error({"answer": "{prep.V1} {place.<prep.CASE>}", "alt": "{prep.V3} {place.INS}"}, dimensions=CASES,
               optional=("alt",), prep=PREPS, place=PLACES)
    assert (e.where.line, e.where.col) == (1, 7) and "unknown feature 'V3'" in str(e)


def test_fills_report_lemmas_forms_features_and_verification():
    t = Template("{n.PL}", "de", n=[Lexeme({"SG": "Tisch", "PL": "Tische"}, lemma="Tisch", features="MASC", unverified=frozenset({"PL"}))])
    (fill,) = list(t.fills())
    assert fill.texts == {"text": "Tische"} and fill.verified is False
    assert fill.values == {"n": {"lemma": "Tisch", "form": "Tische", "features": {"NUMBER": "PL", "GENDER": "MASC"}}}
    assert list(Template("{n.SG}", "de", n=[Lexeme({"SG": "Tisch", "PL": "Tische"}, unverified=frozenset({"PL"}))]).fills())[0].verified


# -- bad input: each a clear error with its position -------------------------------------------------


def _error(text, **kw) -> TemplateError:
    with pytest.raises(TemplateError) as info:
        Template(text, **kw)
    return info.value


def test_unknown_placeholder_names_line_and_column():
    e = _error("Hello\n  {name} and {nmae}", name=["a"])
    assert (e.where.line, e.where.col) == (2, 14) and "unknown placeholder 'nmae'" in str(e)


def test_unclosed_brace_names_its_position():
    e = _error("ok {a} then {b and more", a=["x"], b=["y"])
    assert (e.where.line, e.where.col) == (1, 13) and "unclosed '{'" in str(e)
    e = _error("stray } here", a=["x"])
    assert (e.where.line, e.where.col) == (1, 7)


def test_agreement_on_a_dimension_the_placeholder_lacks():
    e = _error("{job} {PRO.<job.GENDER>}", language="en", job=[{"SG": "doctor", "PL": "doctors"}])
    assert (e.where.line, e.where.col) == (1, 13) and "placeholder job has no GENDER" in str(e)


def test_rule_with_no_form_for_a_needed_bundle():
    lang = parse_language({"code": "xx", "name": "Test", "dimensions": {"CASE": ["NOM", "GEN"], "GENDER": ["MASC", "FEM"]},
                           "rules": {"ART": {"NOM.MASC": "der", "NOM.FEM": "die", "GEN.MASC": "des"}}})
    e = _error("x\n{n} of {ART.GEN.<n.GENDER>}", language=lang, n=[{"MASC": "Mann"}, {"FEM": "Frau"}])
    assert (e.where.line, e.where.col) == (2, 8) and "no form for GEN.FEM" in str(e)


def test_unknown_function():
    e = _error("{a} {$nosuch(a)}", a=["1"])
    assert (e.where.line, e.where.col) == (1, 5) and "unknown function $nosuch" in str(e)


@pytest.mark.parametrize("text, kw, col, message", [
    ("{n.XX}", {"language": "de", "n": GERMAN_NOUNS}, 4, "unknown feature 'XX'"),
    ("{a:x.SG|b:y.PL}", {"language": "en", "x": [{"SG": "a"}], "y": [{"SG": "b"}]}, 11, "names two placeholders"),
    ("{a:x.SG|b}", {"language": "en", "x": [{"SG": "a"}]}, 9, "has no ':'"),
    ("{x.SG}", {"x": ["plain"]}, 1, "plain values"),
    ("{n}", {"language": "de", "n": [Lexeme({"NOM": "Mann", "DAT": "Mann"})]}, 1, "needs a CASE feature"),
    ("{n1}", {"n1": ["a"]}, None, "ending in a digit"),
])
def test_other_bad_input(text, kw, col, message):
    e = _error(text, **kw)
    assert message in str(e)
    if col is not None:
        assert e.where.col == col


def test_unknown_language_and_both_language_and_dimensions():
    with pytest.raises(TemplateError, match="no M2C language data for 'xx'"):
        Template("{a}", "xx", a=["1"])
    with pytest.raises(TemplateError, match="not both"):
        Template("{a}", "de", dimensions={"d": ["A"]}, a=["1"])


def test_numbers_table_of_every_shipped_language_loads():
    for code in ("en", "de", "fr", "it", "es", "sv", "sk", "ru", "fi", "zh", "sw", "ar"):
        lang = load_language(code)
        assert lang.number_words, code
