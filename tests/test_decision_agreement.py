"""Consistency figures on hand-built decision tables, with exact expected values."""

import pytest

from evaluate.decision_agreement import agreement, breakdown, consistency, label_distribution

GOLD = {"x1": "A", "x2": "A", "x3": "B", "x4": "B", "x5": "A"}
EN = {"x1": "A", "x2": "B", "x3": "B", "x4": None, "x5": "A"}  # x2 wrong, x4 unreadable
DE = {"x1": "A", "x2": "B", "x3": "A", "x4": None, "x5": None}
ZH = {"x1": "B", "x2": "A", "x3": "B", "x5": "A"}  # x4 missing in this language


def test_invalid_is_a_label_of_its_own():
    # x1 same, x2 same, x3 differ, x4 both invalid (agree), x5 valid vs invalid (differ)
    assert agreement(EN, DE) == (pytest.approx(3 / 5), 5)
    assert agreement(DE, ZH) == (pytest.approx(0 / 4), 4)  # x1, x2, x3 differ; x5 invalid vs A
    assert agreement({}, ZH) == (None, 0)


def test_breakdown_by_source_correctness():
    b = breakdown(EN, DE, GOLD)
    # correct in EN: x1, x3, x5 -> same on x1 only; incorrect: x2 -> same; x4 invalid in EN: in neither split
    assert (b.n, b.overall) == (5, pytest.approx(3 / 5))
    assert (b.n_correct, b.on_correct) == (3, pytest.approx(1 / 3))
    assert (b.n_incorrect, b.on_incorrect) == (1, 1.0)
    assert (b.invalid_source, b.invalid_target) == (1, 2)


def test_matrix_is_symmetric_over_common_items_and_compares_with_the_source():
    r = consistency({"en": EN, "de": DE, "zh": ZH}, GOLD)
    assert r.langs == ["de", "en", "zh"]
    assert r.matrix["en"]["de"] == r.matrix["de"]["en"] == pytest.approx(3 / 5)
    assert r.matrix["en"]["zh"] == pytest.approx(2 / 4) and r.items["en"]["zh"] == 4  # x1 and x2 differ
    assert r.matrix["zh"]["zh"] == 1.0 and r.items["zh"]["zh"] == 4
    assert set(r.against_source) == {"de", "zh"}
    zh = r.against_source["zh"]
    assert (zh.n_correct, zh.on_correct, zh.n_incorrect, zh.on_incorrect) == (3, pytest.approx(2 / 3), 1, 0.0)


def test_same_language_baseline_from_two_runs_and_label_distribution():
    run1 = {"x1": "A", "x2": "A", "x3": "B", "x4": None}
    run2 = {"x1": "A", "x2": "B", "x3": "B", "x4": None}
    assert breakdown(run1, run2, GOLD).overall == pytest.approx(3 / 4)
    assert label_distribution(run1) == {"A": 0.5, "B": 0.25, "invalid": 0.25}
    assert label_distribution({}) == {}
