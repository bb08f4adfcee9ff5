"""User-supplied text checked where it enters, on SQLite and PostgreSQL: control characters, length and invisible
characters refused with file, line and field; look-alike names reported; patterns that match whole strings only;
and a fuzz of seeds, templates, versions and language declarations: a clear error or a clean import, never a
traceback, never a partial write."""

from __future__ import annotations

import csv
import json
import unicodedata
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from typer.testing import CliRunner

from builder.cli import app
from builder.inputs import InputError
from builder.languages import LanguageError, declare, registry
from builder.m2c.errors import TemplateError
from builder.m2c.render import render_tests
from builder.records import concept_id, english_key
from builder.releases import hub, versions
from builder.releases.reading import ReleaseNotFound, open_source
from builder.seeds import SeedImportError, import_seeds
from builder.selection import Scope
from builder.workspace import schema as t

pytestmark = pytest.mark.both_databases

FUZZ = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# What random text rarely hits by chance: a NUL, other controls, invisible characters, a lone surrogate, a trailing
# newline, braces the template language reads, and lengths past the limits.
SPECIAL = st.sampled_from(["\x00", "\x1b[31m", "\u200b", "\u200d", "\ufeff", "\u2028", "\udc80", "\n", "\t", "{", "}",
                           "$", "é", "x" * 250, "y" * 2_100])
TEXT = st.lists(st.one_of(st.text(max_size=12), SPECIAL), max_size=4).map("".join)
FILE_TEXT = TEXT.map(lambda s: s.encode("utf-8", "replace").decode("utf-8"))  # what a text file can hold (no surrogates)
WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)
WORDS = st.lists(WORD, min_size=1, max_size=3).map(" ".join)


def one_fuzzed(fields: dict[str, st.SearchStrategy], noise: st.SearchStrategy = TEXT) -> st.SearchStrategy[dict]:
    """Good values for every field but one (or none), which gets `noise`: each field's checks are reached."""
    return st.tuples(st.fixed_dictionaries(fields), st.sampled_from([None, *fields]), noise).map(
        lambda d: d[0] if d[1] is None else {**d[0], d[1]: d[2]})


# Versions near valid ones: a trailing newline or space, a digit of another script, a leading zero or 'v'.
VERSION = st.one_of(TEXT, st.builds(lambda a, b, c: f"{a}.{b}.{c}", *[st.integers(0, 30)] * 3), st.builds(lambda a, b, c, pre, post: f"{pre}{a}.{b}.{c}{post}", st.integers(0, 12),
                                    st.sampled_from(["0", "1", "10", "01", "\u0661", "\uff11"]), st.integers(0, 3),
                                    st.sampled_from(["", "v", " "]), st.sampled_from(["", "\n", "\r\n", " ", "-rc1"])))


def stored_controls(ws) -> list[str]:
    """Stored text holding a control character (tab and line breaks aside) or a lone surrogate: none may."""
    return [v for tb in t.metadata.sorted_tables for r in ws.rows(select(tb)) for v in map(str, r.values())
            if any(unicodedata.category(c) in ("Cc", "Cs") and c not in "\t\n\r" for c in v)]


def snapshot(ws) -> str:
    """Every row of every workspace table, as one comparable text."""
    return json.dumps({tb.name: sorted(json.dumps(r, default=str, sort_keys=True) for r in ws.rows(select(tb)))
                       for tb in t.metadata.sorted_tables}, sort_keys=True)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_a_nul_byte_in_a_seed_csv_is_refused_naming_file_line_and_field(ws, tmp_path):
    seeds = write(tmp_path / "concepts.csv", "concept,category\nkettle,kitchen appliance\ntoa\x00ster,kitchen appliance\n")
    before = snapshot(ws)
    with pytest.raises(SeedImportError) as info:
        import_seeds(ws, seeds)
    assert info.value.problems == [f"{seeds}:3: field 'concept': holds U+0000 (a control character) at character 4: remove it"]
    assert snapshot(ws) == before


def test_a_10_mb_property_is_refused_in_jsonl_and_in_csv(ws, tmp_path):
    row = {"property": "p" * 10_485_760, "acceptable_concept": "kettle", "unacceptable_concept": "wren",
           "negative_sample_type": "random", "prefix_acceptable": "a kettle", "prefix_unacceptable": "a wren",
           "property_phrase": "boils water."}
    jsonl = write(tmp_path / "comps.jsonl", json.dumps(row) + "\n")
    table = write(tmp_path / "big" / "comps.csv", ",".join(row) + "\n" + ",".join(row.values()) + "\n")
    before = snapshot(ws)
    for path, problem in ((jsonl, f"{jsonl}:1: field 'property': is 10,485,760 characters long, more than the 200 a "
                                  "name may have"),
                          (table, f"{table}:2: unreadable CSV (field larger than field limit (131072))")):
        with pytest.raises(SeedImportError) as info:
            import_seeds(ws, path)
        assert info.value.problems == [problem]
    assert snapshot(ws) == before


def test_invisible_characters_cannot_make_two_concepts_that_look_the_same(ws, tmp_path):
    assert english_key("kettle\u200b") == english_key("\ufeffkettle") == english_key("kettle")
    assert concept_id("ket\u00adtle") == concept_id("kettle")
    first = write(tmp_path / "a" / "concepts.csv", "concept,category\nkettle,kitchen appliance\n")
    import_seeds(ws, first)
    hidden = write(tmp_path / "b" / "concepts.csv", "concept,category\nkettle\u200b,kitchen appliance\n")
    wide = write(tmp_path / "c" / "concepts.csv", "concept,category\nｋｅｔｔｌｅ,kitchen appliance\n")
    before = snapshot(ws)
    with pytest.raises(SeedImportError) as info:
        import_seeds(ws, hidden, wide)
    assert info.value.problems == [
        f"{hidden}:2: field 'concept': holds the invisible character U+200B (ZERO WIDTH SPACE) at character 7: remove it "
        "(names that look the same must be the same name)",
        f"{wide}:2: field 'concept': 'ｋｅｔｔｌｅ' looks the same as 'kettle' (in the workspace) but would be another concept: "
        "write them alike if they are one concept, or tell them apart"]
    assert snapshot(ws) == before
    # A translation is text, not a name: a zero-width non-joiner is part of Persian spelling.
    seeds = write(tmp_path / "d" / "fa.csv", "kind,english,language,text,translator\nconcept,kettle,fa,کتری\u200cها,expert-fa\n")
    assert import_seeds(ws, seeds).seed_translations == 1


def test_a_properties_list_is_checked_line_by_line(sample_ws, tmp_path):
    listed = write(tmp_path / "props.txt", "can fly\nhas\x07 feathers\n")
    with pytest.raises(InputError, match=rf"^{listed}:2: holds U\+0007 \(a control character\) at character 4: remove it$"):
        Scope.parse(sample_ws, str(listed))
    res = CliRunner().invoke(app, ["translate", "--lang", "fr", "--properties", f"can fly,{'z' * 300}", "-w",
                                   str(sample_ws.directory)])
    assert res.exit_code == 1
    assert res.output.strip().splitlines()[-1] == ("error: --properties: is 300 characters long, more than the 200 a "
                                                   "name may have")


def test_a_template_string_with_a_control_character_is_refused_where_it_stands(ws, tmp_path):
    path = write(tmp_path / "de" / "bad.yaml",
                 'templates:\n  - id: one\n    context: "Das ist gut."\n    question: "Was\\0 ist gut?"\n    answer: "Das"\n')
    with pytest.raises(TemplateError) as info:
        render_tests(ws, "de", root=tmp_path)
    assert str(info.value) == f"{path}:4:15: holds U+0000 (a control character) at character 4: remove it"
    assert ws.count(t.m2c_tests) == 0


def test_a_language_declaration_is_refused_a_sentence_per_field(ws):
    res = CliRunner().invoke(app, ["language", "add", "qaa", "--name", "Ex\x00ample", "--typology", "analytic", "--family",
                                   "Iso\u200blate", "--notes", "n" * 2_001, "-w", str(ws.directory), "--script", "Latn"])
    assert res.exit_code == 1
    assert res.output == ("error: --name: holds U+0000 (a control character) at character 3: remove it.\n"
                          "--notes: is 2,001 characters long, more than the 2,000 a text may have.\n")
    assert "qaa" not in registry(ws)


def test_patterns_accept_whole_values_only(ws):
    for bad in ("1.0.0\n", "1.0.0\r", "\u0661.0.0", "1.0.0 "):  # a trailing newline; an Arabic-Indic digit one
        with pytest.raises(versions.VersionError):
            versions.parse(bad)
    assert versions.from_tag("v1.0.0\n") is None and versions.parse("1.10.0") == (1, 10, 0)
    with pytest.raises(hub.HubError, match="bad Hub dataset id"):
        hub.require_token("org/name\n")
    with pytest.raises(ReleaseNotFound):
        open_source("org/name\n")
    with pytest.raises(LanguageError, match=r"^field 'code': 'xx\\n' is not an ISO 639 code"):
        declare(ws, code="xx\n", name="X", typology="analytic", family="Isolate", script="Latn")


# -- fuzz: random text where users give text ---------------------------------------------------------------------------

SEED_FIELDS = {"property": WORDS, "acceptable_concept": WORDS, "unacceptable_concept": WORDS.map("not {}".format),
               "prefix_acceptable": WORDS,
               "prefix_unacceptable": WORDS, "property_phrase": WORDS, "negative_sample_type": st.sampled_from(["random", "overlap"]),
               "concept": WORDS, "category": WORDS, "text": WORDS, "translator": WORD}


@FUZZ
@given(one_fuzzed(SEED_FIELDS, st.one_of(TEXT, st.integers(), st.none())))
def test_fuzzed_seeds_import_cleanly_or_fail_clearly_and_write_nothing(ws, tmp_path_factory, f):
    folder = tmp_path_factory.mktemp("seeds")
    comps = {k: f[k] for k in ("property", "acceptable_concept", "unacceptable_concept", "prefix_acceptable",
                               "prefix_unacceptable", "property_phrase", "negative_sample_type")}
    write(folder / "comps.jsonl", json.dumps(comps) + "\n")
    with (folder / "concepts.csv").open("w", encoding="utf-8", newline="") as out:
        csv.writer(out).writerows([["concept", "category"], [str(f[k]).encode("utf-8", "replace").decode() for k in
                                                             ("concept", "category")]])
    write(folder / "seed.jsonl", json.dumps({"kind": "concept", "english": f["concept"], "language": "de",
                                             "text": f["text"], "translator": f["translator"]}) + "\n")
    before = snapshot(ws)
    try:
        import_seeds(ws, folder)
    except SeedImportError as exc:
        assert exc.problems and all(p.startswith(str(folder)) and "\n" not in p for p in exc.problems), exc.problems
        assert snapshot(ws) == before
    else:
        assert stored_controls(ws) == []


@FUZZ
@given(FILE_TEXT, FILE_TEXT, FILE_TEXT, FILE_TEXT)
def test_fuzzed_templates_render_cleanly_or_fail_clearly_and_write_nothing(ws, tmp_path_factory, context, question,
                                                                           answer, alternative):
    root = tmp_path_factory.mktemp("templates")
    entry = {"id": "fuzz", "context": context, "question": question, "answer": answer, "alternatives": [alternative], "n": 3}
    write(root / "de" / "fuzz.yaml", yaml.safe_dump({"templates": [entry]}, allow_unicode=True))
    before = snapshot(ws)
    try:
        render_tests(ws, "de", root=root)
    except TemplateError as exc:
        assert str(exc).startswith(str(root / "de" / "fuzz.yaml")) and "\n" not in str(exc), str(exc)
        assert snapshot(ws) == before
    else:
        assert stored_controls(ws) == []


@FUZZ
@given(VERSION)
def test_fuzzed_versions_are_canonical_or_refused(ws, version):
    try:
        parsed = versions.parse(version)
    except versions.VersionError as exc:
        assert str(exc).startswith("bad version")
    else:
        assert version == ".".join(map(str, parsed))


LANGUAGE_FIELDS = {"code": st.from_regex(r"q[a-t][a-z]", fullmatch=True), "name": WORDS,  # ISO 639's codes for local use "native_name": st.none() | WORDS,
                   "family": WORDS, "typology": st.just("analytic"), "script": st.just("Latn"),
                   "meta_prompt": st.none() | WORDS.map(lambda w: w + ' "{property}", "{word1}", "{word2}"? "'),
                   "generation_notes": WORDS}


@FUZZ
@given(one_fuzzed(LANGUAGE_FIELDS))
def test_fuzzed_language_declarations_are_recorded_or_refused_field_by_field(ws, fields):
    before = snapshot(ws)
    try:
        lang = declare(ws, **fields).language
    except LanguageError as exc:  # a sentence for each field that is wrong
        assert all(line.startswith("field '") and line.endswith(".") for line in str(exc).split("\n")), str(exc)
        assert snapshot(ws) == before
    except ValueError as exc:  # a code declared by an earlier example
        assert "is already declared in this workspace" in str(exc) and snapshot(ws) == before
    else:
        assert registry(ws)[lang.code] == lang and stored_controls(ws) == []

