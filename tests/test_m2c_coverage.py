"""M2C coverage as the paper tests it: its ten test types (Table 4) in its twelve languages, each template
named by its test type, the README's table generated from the templates, a current sample, and results
per test type and language."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from m2c_generated import ROOT, SAMPLE, readme_table, sample_text

from builder.m2c.language import available
from builder.m2c.template_files import PAPER_TEST_TYPES, coverage_table, load_language_templates, template_files, template_type
from evaluate.m2c import section, summarise

REGENERATE = "python tests/m2c_generated.py"


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[tuple[str, str], int]]:
    """lang -> (capability, test type) -> how many tests its templates render."""
    out: dict[str, dict[tuple[str, str], int]] = {}
    for lang in available():
        for tt in load_language_templates(lang):
            key = (tt.capability, template_type(tt.template_id))
            out.setdefault(lang, {})[key] = out.get(lang, {}).get(key, 0) + len(tt.template)
    return out


def test_all_120_cells_of_the_papers_table_render_tests(rendered):
    assert len(available()) == 12
    cells = [(lang, cap, tt) for lang in available() for cap, pair in PAPER_TEST_TYPES.items() for tt in pair]
    assert len(cells) == 120
    empty = [c for c in cells if not rendered[c[0]].get(c[1:])]
    assert not empty, f"{len(empty)} empty cells: {empty}"


def test_every_template_names_its_test_type_with_the_papers_names():
    """Templates of the paper's capabilities use its test types as ids; language-specific ones keep theirs."""
    for lang in available():
        for path in template_files(lang):
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
            ids = [t.get("id") for t in raw["templates"]]
            assert all(ids), f"{path}: a template without an id"
            if path.stem in PAPER_TEST_TYPES:
                assert set(ids) <= set(PAPER_TEST_TYPES[path.stem]), (path, ids)
    language_specific = {(lang, p.stem) for lang in available() for p in template_files(lang)} - {
        (lang, cap) for lang in available() for cap in PAPER_TEST_TYPES}
    assert language_specific == {("zh", "measure_words"), ("ru", "motion_verbs"), ("fi", "possessives"), ("sw", "time")}


def test_readme_table_is_generated_from_the_templates():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = coverage_table()
    assert readme_table(readme) == table, f"the README's M2C coverage table is stale: run {REGENERATE}"
    rows = table.splitlines()[2:]
    assert len(rows) == 12 and all(row.count("| ✓ ") == 10 for row in rows)


def test_coverage_table_shows_an_empty_cell(tmp_path):
    (tmp_path / "de").mkdir()
    (tmp_path / "de" / "negation.yaml").write_text(
        "templates:\n  - {id: in-question, context: 'Max ist Koch.', question: 'Wer ist kein Koch?', answer: 'Niemand.'}\n",
        encoding="utf-8")
    (row,) = coverage_table(tmp_path, ["de"]).splitlines()[2:]
    assert row.startswith("| de |  | ✓ |  |") and row.count("✓") == 1


@pytest.mark.parametrize("lang", available())
def test_sample_is_current(lang):
    path = SAMPLE / f"{lang}.txt"
    assert path.read_text(encoding="utf-8") == sample_text(lang), f"{path} is stale: run {REGENERATE}"


def test_sample_has_fifteen_tests_per_language_and_test_type():
    for lang in available():
        text = (SAMPLE / f"{lang}.txt").read_text(encoding="utf-8")
        blocks = text.split("\n## ")[1:]
        assert len(blocks) >= 10 and all(block.count("\n    A: ") == 15 for block in blocks), lang


def test_results_report_accuracy_per_test_type_and_language():
    rows = pd.DataFrame([
        {"test_id": t, "lang": lang, "capability": cap, "template_id": f"{lang}/{cap}#{tt}", "variant": "zero_shot",
         "correct": ok, "morphological_error": False}
        for t, lang, cap, tt, ok in [("a", "de", "spatial", "position", True), ("b", "de", "spatial", "position", False),
                                     ("c", "en", "spatial", "position", True), ("d", "en", "negation", "in-question", True)]])
    _, templates = summarise(rows)
    assert set(templates["test_type"]) == {"position", "in-question"}
    md = "\n".join(section(templates))
    assert "### Per test type and language (zero-shot, as the paper's Table 4)" in md
    assert "| capability | test\\_type | de | en | avg |" in md
    assert "| spatial | position | 0.500 | 1.000 | 0.750 |" in md
    assert "| negation | in-question | – | 1.000 | 1.000 |" in md  # – : no test of the type in the language
