"""Declaring a language that is not shipped (Hindi, in Devanagari), as a person does with `builder language add`:
codes checked against ISO 639, errors one sentence per field, a declared code changed only with --update,
words and sentences outside the declared script flagged, English sentences generated with the language."""

import json
import re

import pytest
from typer.testing import CliRunner

from builder import languages
from builder.cli import app
from builder.records import concept_id
from builder.review_stages.sentences import sentence_tasks
from builder.scripts import foreign, outside_script
from builder.selection import Scope
from builder.workspace import schema as t

runner = CliRunner()
META = 'कौन सी अवधारणा में यह गुण होने की अधिक संभावना है: "{property}", "{word1}" या "{word2}"? उत्तर: "'
HINDI = ["hi", "--name", "Hindi", "--native-name", "हिन्दी", "--typology", "inflectional", "--family",
         "Indo-European (Indo-Aryan)", "--script", "Deva", "--meta-prompt", META]
PROPS = "can fly,has feathers"
# The words of PROPS's pairs in Hindi, as the stand-in proposes them: "bus" stays in Latin letters, as a weak model wrote it.
WORDS = {("property", "can fly"): "उड़ सकता है", ("property", "has feathers"): "के पंख होते हैं",
         **{("concept", en): hi for en, hi in {
             "eagle": "बाज़", "penguin": "पेंगुइन", "emu": "एमू", "lion": "शेर", "sock": "मोज़ा", "airplane": "हवाई जहाज़",
             "train": "रेलगाड़ी", "boat": "नाव", "bus": "bus", "carrot": "गाजर", "parrot": "तोता", "butterfly": "तितली",
             "cat": "बिल्ली", "hammer": "हथौड़ा"}.items()}}
BUS = "'bus' (Latin) is not in Devanagari (Deva), the script declared for Hindi"


def hindi_lexicon(lexicon) -> None:
    for (kind, english), word in WORDS.items():
        lexicon.translations[("hi", kind, english)] = {"translation": word, "alternatives": []}


def cli(ws_dir, *args, env=None, ok=True):
    res = runner.invoke(app, [*args, "-w", str(ws_dir)], env=env, catch_exceptions=False)
    assert (res.exit_code == 0) == ok, res.output
    return res.output


def declared(ws_dir) -> dict[str, dict]:
    return {lang["code"]: lang for lang in json.loads(cli(ws_dir, "language", "list", "--json"))}


# -- the script check ---------------------------------------------------------------------------------------------


def test_letters_outside_the_declared_script_are_found_by_unicode_script_and_named():
    hindi = languages.Language(code="hi", name="Hindi", typology="inflectional", family="Indo-European", script="Deva")
    assert outside_script("bus", hindi) == BUS
    assert outside_script("bus उड़ सकता है।", hindi) == BUS
    # Digits (Devanagari or not), the danda, punctuation and the nukta's combining forms are not letters of another script.
    for fine in ("बस", "हवाई जहाज़ १२ 12 उड़ सकता है।", "“बाज़”, (क्या?) — हाँ!", "कृ"):
        assert outside_script(fine, hindi) is None, fine
    assert foreign("автобус и bus", "Deva") == [("автобус", "Cyrl"), ("и", "Cyrl"), ("bus", "Latn")]
    # A code standing for several scripts: Japanese is Han, Hiragana and Katakana (with the shared prolonged-sound mark).
    assert foreign("飛行機はコーヒーを飲まない。", "Jpan") == [] and foreign("Tシャツ", "Jpan") == [("T", "Latn")]
    assert foreign("我喜欢DVD机", "Hans") == [("DVD", "Latn")] and foreign("버스", "Kore") == []
    assert foreign("الكرة، ١٢", "Arab") == [] and foreign("Ong bắp cày", "Latn") == []
    assert foreign("anything", "Zsym") == []  # symbols: a script Unicode does not encode has nothing to check


# -- codes and errors ---------------------------------------------------------------------------------------------


def test_codes_are_checked_against_iso_639_and_scripts_against_iso_15924(tmp_path):
    ws_dir = tmp_path / "w"
    runner.invoke(app, ["init", str(ws_dir)])
    rest = HINDI[1:]
    unknown = cli(ws_dir, "language", "add", "xq", *rest, ok=False)
    assert unknown.strip() == ("error: CODE: 'xq' is not an ISO 639 language code; Hindi's is 'hi' (a language ISO 639 "
                               "does not list may take one of the codes it keeps for local use, qaa to qtz).")
    longer = cli(ws_dir, "language", "add", "hin", *rest, ok=False)
    assert "CODE: 'hin' is a longer code for Hindi; declare it as 'hi', its shortest ISO 639 code" in longer
    script = cli(ws_dir, "language", "add", "hi", *rest[:-4], "--script", "Dvng", ok=False)
    assert script.strip() == "error: --script: 'Dvng' is not an ISO 15924 script code."
    assert "hi" not in declared(ws_dir)  # nothing was written
    # A language ISO 639 does not list takes a code it keeps for local use.
    cli(ws_dir, "language", "add", "qaa", "--name", "Kuvi-Desia", "--typology", "agglutinative", "--family", "Dravidian",
        "--script", "Orya")
    assert declared(ws_dir)["qaa"]["name"] == "Kuvi-Desia"


def test_every_validation_error_is_one_sentence_naming_its_field(tmp_path):
    ws_dir = tmp_path / "w"
    runner.invoke(app, ["init", str(ws_dir)])
    bad = cli(ws_dir, "language", "add", "hi", "--name", "Hindi", "--typology", "fusional", "--family", "", "--script", "deva",
              "--meta-prompt", "{property}: {word1}?", ok=False)
    assert bad.strip().splitlines() == [
        "error: --typology: 'fusional' is not one of 'analytic', 'inflectional' or 'agglutinative'.",
        "--family: must not be empty.",
        "--script: 'deva' is not an ISO 15924 code (four letters, the first a capital, as in Latn or Deva).",
        "--meta-prompt: lacks placeholder(s) {word2}."]
    missing = cli(ws_dir, "language", "add", "hi", "--name", "Hindi", ok=False)
    assert missing.strip().splitlines() == ["error: --typology: required.", "--family: required.", "--script: required."]


def test_every_shipped_language_has_its_iso_639_code_and_iso_15924_script():
    for lang in languages.builtin_languages():
        assert languages.parse(lang.model_dump(exclude={"builtin"}), builtin=True) == lang


def test_an_error_in_the_shipped_languages_file_names_its_file_line_and_field(tmp_path, monkeypatch):
    shipped = (languages.data_dir() / "languages.yaml").read_text(encoding="utf-8")
    broken = shipped.replace("    typology: agglutinative\n", "    typology: fusional\n", 1)
    line = broken.splitlines().index("    typology: fusional") + 1
    code = next(ln.split(": ")[1] for ln in reversed(broken.splitlines()[:line]) if ln.startswith("  - code: "))
    (tmp_path / "languages.yaml").write_text(broken, encoding="utf-8")
    monkeypatch.setattr(languages, "data_dir", lambda: tmp_path)
    languages.builtin_languages.cache_clear()
    try:
        with pytest.raises(languages.LanguageError) as err:
            languages.builtin_languages()
    finally:
        monkeypatch.undo()
        languages.builtin_languages.cache_clear()
    assert str(err.value) == (f"{tmp_path / 'languages.yaml'}:{line}: language {code}, field 'typology': 'fusional' is not "
                              "one of 'analytic', 'inflectional' or 'agglutinative'.")


# -- declaring again ----------------------------------------------------------------------------------------------


def test_a_declared_code_is_refused_unless_update_which_shows_each_change_and_keeps_the_rest(tmp_path):
    ws_dir = tmp_path / "w"
    runner.invoke(app, ["init", str(ws_dir)])
    assert cli(ws_dir, "language", "add", *HINDI).strip() == "declared hi (Hindi, inflectional, Indo-European (Indo-Aryan), Deva)"
    again = cli(ws_dir, "language", "add", "hi", "--name", "Hindi", "--typology", "inflectional", "--family", "Indo-Aryan",
                "--script", "Deva", ok=False)
    assert "language hi (Hindi) is already declared in this workspace: give --update" in again
    assert declared(ws_dir)["hi"]["meta_prompt"] == META and declared(ws_dir)["hi"]["family"] == "Indo-European (Indo-Aryan)"
    notes = "Sentences end with the danda (।)."
    changed = cli(ws_dir, "language", "add", "hi", "--update", "--family", "Indo-Aryan", "--notes", notes)
    assert changed.strip().splitlines() == ["updated hi (Hindi): 2 field(s) changed",
                                            "  --family: 'Indo-European (Indo-Aryan)' -> 'Indo-Aryan'",
                                            f"  --notes: '' -> {notes!r}"]
    now = declared(ws_dir)["hi"]
    assert now["meta_prompt"] == META and now["native_name"] == "हिन्दी" and now["generation_notes"] == notes
    assert cli(ws_dir, "language", "add", "hi", "--update", "--family", "Indo-Aryan").strip() == "updated hi (Hindi): nothing changed"
    # An update that does not hold changes nothing; a built-in language and an undeclared code are refused.
    wrong = cli(ws_dir, "language", "add", "hi", "--update", "--meta-prompt", "{word1} or {word2}?", ok=False)
    assert wrong.strip() == "error: --meta-prompt: lacks placeholder(s) {property}." and declared(ws_dir)["hi"]["meta_prompt"] == META
    assert "language de (German) is built in: to change it for everyone, edit" in cli(ws_dir, "language", "add", "de", "--update",
                                                                                       "--name", "Deutsch", ok=False)
    assert "language mr is not declared in this workspace: declare it without --update" in cli(
        ws_dir, "language", "add", "mr", "--update", "--name", "Marathi", ok=False)


# -- the stages, for a language in another script ------------------------------------------------------------------------


def test_words_and_sentences_outside_the_declared_script_are_flagged_with_the_reason(sample_ws, server):
    ws, ws_dir = sample_ws, sample_ws.directory
    cli(ws_dir, "language", "add", *HINDI)
    hindi_lexicon(server.lexicon)
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k", "BUILDER_LLM_MODEL": "standin-translator"}
    bus = concept_id("bus")

    def script_flags():
        return {f["item_id"]: f["reason"] for f in json.loads(cli(ws_dir, "status", "--flags", "--stage", "script", "--json"))}

    translated = cli(ws_dir, "translate", "--lang", "hi", "--properties", PROPS, env=env)
    assert ("words not in the declared script, flagged for curators: hi Hindi 1 "
            "(`builder status --flags --stage script`)") in translated
    assert script_flags() == {bus: f"the proposal {BUS}"}
    # A curator accepts every proposal, "bus" too: the verified word is flagged, and so is its sentence once written.
    cli(ws_dir, "accept", "--lang", "hi", "--reviewer", "curator-hi")
    generated = cli(ws_dir, "generate", "--lang", "hi", "--properties", PROPS, env=env)
    assert "hi script 2" in generated
    pairs = Scope.parse(ws, PROPS).pairs(ws)
    with_bus = next(p["id"] for p in pairs if p["unacceptable_id"] == bus)
    assert script_flags() == {bus: f"the verified word {BUS}", with_bus: f"the unacceptable sentence: {BUS}"}
    assert cli(ws_dir, "status", "--flags", "--stage", "script").startswith("2 flagged item(s)")
    # The status table names the language beside its code (on one line, or wrapped in its cell in 80 columns).
    assert re.search(r"│ hi Hindi|│ hi +│.*\n│ Hindi +│", cli(ws_dir, "status"))


def test_the_english_sentences_a_language_needs_are_generated_with_it(sample_ws, server):
    from test_generate import stage

    from builder.generate import generate
    from builder.reviews import accept
    from builder.translate import translate

    ws = sample_ws
    languages.declare(ws, code="hi", name="Hindi", typology="inflectional", family="Indo-European (Indo-Aryan)", script="Deva")
    hindi_lexicon(server.lexicon)
    stage(ws, server, translate, ["hi"], PROPS)
    accept(ws, "hi", reviewer="curator-hi")
    assert not ws.rows(t.sentence_pairs.select().where(t.sentence_pairs.c.lang == "en"))
    summary = stage(ws, server, generate, ["hi"], PROPS)  # Hindi alone, as `builder generate --lang hi` asks
    n_pairs = len(Scope.parse(ws, PROPS).pairs(ws))
    assert summary.generated == {"en": n_pairs, "hi": n_pairs}
    # The curator's sentence task shows each Hindi pair beside its English pair.
    tasks = sentence_tasks(ws, "hi")
    assert len(tasks) == n_pairs and all(tk.data["english"] != "—" for tk in tasks)
    assert {tk.data["english"] for tk in tasks} >= {"A parrot has feathers. / A cat has feathers."}
