import pytest

from builder.agreement import agreement, krippendorff_alpha_nominal


def test_alpha_is_one_for_perfect_agreement_and_low_for_chance():
    assert krippendorff_alpha_nominal([["a", "a"], ["b", "b"], ["a", "a"]]) == pytest.approx(1.0)
    assert krippendorff_alpha_nominal([["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]) < 0


def test_alpha_matches_a_hand_computed_value():
    # Two curators, four items: coincidences o_aa=2, o_ab=o_ba=2... computed by hand: alpha = 1 - (4/8)/(4*4*2/(8*7)).
    units = [["a", "a"], ["a", "b"], ["b", "a"], ["b", "b"]]
    assert krippendorff_alpha_nominal(units) == pytest.approx(1 - (4 / 8) / (32 / 56))
    # Items seen by one curator do not count.
    assert krippendorff_alpha_nominal([["a"], ["b"]]) is None


def test_text_agreement_exact_match_and_chrf():
    a = agreement({"x": ["corrected", "corrected"], "y": ["accept", "reject"]},
                  {"x": ["Kaffeemaschine", "Kaffeemaschine"], "z": ["Toaster", "Toast"]})
    assert a.items == 2 and a.observed == 0.5
    assert a.text_pairs == 2 and a.exact_match == 0.5
    assert 90 < a.chrf < 100
