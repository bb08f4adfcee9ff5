"""Templates ported from M2C's reference: docs/porting-m2c-templates.md, block by block, renders as it says;
what the engine cannot take as the reference writes it is refused with how to write it here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from builder.m2c import Template, TemplateError, load_language
from builder.m2c.language import available
from builder.m2c.template_files import load_file

DOC = Path(__file__).resolve().parents[1] / "docs" / "porting-m2c-templates.md"
BLOCK = re.compile(r"^```(m2c-[a-z]+)\n(.*?)^```$", re.M | re.S)


def _sections() -> list[tuple[str, dict[str, str]]]:
    """The page's examples: per `##` section, its m2c-* blocks by kind."""
    out = []
    for section in DOC.read_text(encoding="utf-8").split("\n## ")[1:]:
        title = section.splitlines()[0]
        out.append((title, {kind.removeprefix("m2c-"): body for kind, body in BLOCK.findall(section)}))
    return out


def _reference_call(code: str) -> tuple[str, str, dict]:
    """`lang.template("text", **values)` as the reference writes it: (language code, text, values)."""
    call = ast.parse(code).body[0].value
    assert isinstance(call, ast.Call) and call.func.attr == "template", code
    return call.func.value.id, ast.literal_eval(call.args[0]), {k.arg: ast.literal_eval(k.value) for k in call.keywords}


SECTIONS = _sections()


def test_the_page_shows_three_templates_two_of_them_refused_as_the_reference_writes_them():
    assert len(SECTIONS) == 3 and all({"reference", "here", "renders"} <= set(b) for _, b in SECTIONS)
    assert sum("refused" in b for _, b in SECTIONS) == 2


@pytest.mark.parametrize("title, blocks", SECTIONS, ids=[t.split(":")[0] for t, _ in SECTIONS])
def test_a_reference_template_renders_the_same_or_is_refused_with_how_to_write_it_here(title, blocks, tmp_path):
    lang, text, values = _reference_call(blocks["reference"])
    rendered = sorted(blocks["renders"].splitlines())
    if "refused" in blocks:
        with pytest.raises(TemplateError) as info:
            Template(text, lang, **values)
        assert blocks["refused"].strip() in str(info.value)
    else:
        assert sorted(Template(text, lang, **values).render()) == rendered
    path = tmp_path / lang / "ported.yaml"
    path.parent.mkdir()
    path.write_text(blocks["here"], encoding="utf-8")
    (template,) = load_file(path, lang=lang)
    assert sorted(t.context for t in template.tests(n=-1)) == rendered


@pytest.mark.parametrize("lang", available())
def test_a_language_files_reference_notes_name_what_it_lacks(lang):
    """A note stands for a name the file does not have (or, for a dimension computed from words, that only its
    rules may agree on): a note on a name the language has would mislead."""
    language = load_language(lang)
    for name in language.reference:
        dim = language.dims.by_name.get(name)
        assert name not in language.rules and name not in language.dims.of_feature and (dim is None or dim.patterns), name


@pytest.mark.parametrize("lang, text, values, said", [
    ("ru", "Пять {fruit.GEN.GTPL}", {"fruit": [{"FEM.GEN.PL": "груш"}]},
     "line 1, column 17 (text): unknown feature 'GTPL' in Russian (M2C's reference writes GTPL; here: the noun after a "
     "numeral takes its case and number from the numeral's COUNT"),
    ("fr", "Il {aime:n.SG|aiment:n.PL} {ART.DEF.<exp_0.NUMBER>} pain.", {"n": [{"SG": "x"}]},
     "unknown placeholder 'exp_0' (placeholders: n; rules of French: ART, PRO, PRO_COMPL) (exp_0 is M2C's reference's "
     "name for an inline rule"),
    ("en", "{name} said {PRO.<name.GENDER>} was tired.", {"name": [{"SG.FEM": "Sarah"}]},
     "rule PRO of English has no form for FEM (and NUMBER is not given: fix it in the key or agree on it, e.g. .SG or "
     "<x.NUMBER>)"),
    ("sw", "{PERSON_PREFIX.3.SG}", {}, "(M2C's reference writes PERSON_PREFIX; here: SUBJ (the subject prefix"),
])
def test_a_name_the_reference_uses_is_refused_with_what_to_write_here(lang, text, values, said):
    with pytest.raises(TemplateError) as info:
        Template(text, lang, **values)
    assert said in str(info.value)
