"""evaluate.quality: sacreBLEU scores of self-translations with hand-checked values, and their link to consistency."""

from __future__ import annotations

import math

import pytest

from builder.languages import declare, registry
from evaluate.quality import (
    ItemQuality,
    ItemTranslation,
    Segment,
    Tokenizer,
    TranslationQuality,
    consistency_above,
    correlate,
    score_translations,
)


def _item(item_id: str, *pairs: tuple[str, str]) -> ItemTranslation:
    return ItemTranslation(item_id=item_id, segments=tuple(Segment(hypothesis=h, reference=r) for h, r in pairs))


def _quality(chrf: dict[str, float]) -> TranslationQuality:
    """Per-item scores as a scorer would report them, for checking the statistics on exact inputs."""
    items = tuple(ItemQuality(item_id=i, bleu=v, chrf=v, n_segments=1) for i, v in chrf.items())
    return TranslationQuality(lang="de", tokenizer=Tokenizer(name="13a", signature="13a", reason="test"), bleu=0.0,
                              chrf=0.0, bleu_signature="", chrf_signature="", n_items=len(items),
                              n_segments=len(items), items=items)


# BLEU of 5 tokens with one substituted at the end: precisions 4/5, 3/4, 2/3, 1/2, geometric mean 5^(-1/4).
FIVE_TOKENS = 100 * 5 ** -0.25  # 66.874…
# 6 tokens, one substituted at the end: precisions 5/6, 4/5, 3/4, 2/3, geometric mean 3^(-1/4).
SIX_TOKENS = 100 * 3 ** -0.25  # 75.984…
# chrF of "card" vs "care": char n-gram precision = recall = 3/4, 2/3, 1/2, 0/1 over orders 1-4 (no 5-, 6-grams);
# averaged 23/48, and F-beta of equal P and R is that value.
CARD_CARE = 100 * 23 / 48


def test_identical_translations_score_100_with_13a_for_space_delimited_languages():
    q = score_translations([_item("x1", ("Ein Hund hat vier Beine.", "Ein Hund hat vier Beine."))], "de")
    assert q.chrf == pytest.approx(100) and q.bleu == pytest.approx(100)
    assert q.items[0].chrf == pytest.approx(100) and q.items[0].bleu == pytest.approx(100)
    assert q.tokenizer.name == "13a" and "tok:13a" in q.bleu_signature and "nc:6" in q.chrf_signature


def test_known_small_case_matches_hand_computation():
    q = score_translations([_item("x1", ("the cat sat on mats", "the cat sat on rugs"))], "en")
    assert q.bleu == pytest.approx(FIVE_TOKENS) and q.items[0].bleu == pytest.approx(FIVE_TOKENS)
    q = score_translations([_item("x1", ("card", "care"))], "en")
    assert q.chrf == pytest.approx(CARD_CARE) and q.items[0].chrf == pytest.approx(CARD_CARE)
    assert q.bleu == 0.0  # one token, and it differs


def test_item_scores_average_its_segments_and_corpus_scores_pool_them():
    q = score_translations([_item("pair", ("card", "care"), ("a dog", "a dog")), _item("other", ("x y z", "x y z"))],
                           "en")
    pair = q.items[0]
    assert (pair.item_id, pair.n_segments) == ("pair", 2)
    assert pair.chrf == pytest.approx((CARD_CARE + 100) / 2)
    assert pair.bleu == pytest.approx((0 + 100) / 2)
    assert (q.n_items, q.n_segments) == (2, 3)
    # Corpus BLEU pools n-gram counts instead of averaging items (which would give 75): no segment has four
    # tokens, so the corpus has no 4-grams and standard corpus BLEU is 0. Short texts are what chrF is for.
    assert [i.bleu for i in q.items] == [pytest.approx(50), pytest.approx(100)] and q.bleu == 0.0


def test_chinese_is_scored_per_character_with_the_zh_tokenizer():
    items = [_item("x1", ("我喜欢猫和狗", "我喜欢猫和鸟"))]
    q = score_translations(items, "zh")
    assert q.tokenizer.name == "zh" and "tok:zh" in q.bleu_signature
    assert q.bleu == pytest.approx(SIX_TOKENS) and q.items[0].bleu == pytest.approx(SIX_TOKENS)
    # The same pair with the default tokenizer is one token each side and scores 0.
    q13a = score_translations(items, "zh", tokenizer="13a")
    assert q13a.tokenizer.name == "13a" and q13a.tokenizer.reason == "given by the caller" and q13a.bleu == 0.0
    assert q13a.chrf == q.chrf  # chrF works on characters whatever the tokenizer


def test_japanese_and_korean_use_mecab():
    ja = score_translations([_item("x1", ("猫が好きです。", "犬が好きです。"))], "ja")
    assert ja.tokenizer.name == "ja-mecab" and ja.tokenizer.signature.startswith("ja-mecab-")
    assert ja.bleu == pytest.approx(FIVE_TOKENS)  # 猫 が 好き です 。
    ko = score_translations([_item("x1", ("고양이를 좋아합니다.", "강아지를 좋아합니다."))], "ko")
    assert ko.tokenizer.name == "ko-mecab" and ko.tokenizer.signature.startswith("ko-mecab-")
    assert ko.bleu == pytest.approx(SIX_TOKENS)  # 고양이 를 좋 아 합니다 .
    assert score_translations([_item("x1", ("猫が好きです。", "犬が好きです。"))], "ja", tokenizer="13a").bleu == 0.0


def test_unspaced_language_declared_in_a_workspace_is_scored_by_characters(ws):
    declare(ws, code="th", name="Thai", typology="analytic", family="Kra-Dai", script="Thai", spaced=False)
    th = registry(ws)["th"]
    items = [_item("x1", ("แมวกินปลา", "แมวกินข้าว"))]
    q = score_translations(items, th.code, spaced=th.spaced)
    assert q.tokenizer.name == "char" and "without spaces" in q.tokenizer.reason
    assert q.bleu > 0 and score_translations(items, th.code, tokenizer="13a").bleu == 0.0


def test_an_empty_translation_scores_zero_rather_than_failing():
    q = score_translations([_item("x1", ("", "Ein Hund hat vier Beine.")), _item("x2", ("Ja.", "Ja."))], "de")
    assert [(i.bleu, i.chrf) for i in q.items] == [(0.0, 0.0), (pytest.approx(100), pytest.approx(100))]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="no translations"):
        score_translations([], "de")
    with pytest.raises(ValueError, match="x1 appears twice"):
        score_translations([_item("x1", ("a", "a")), _item("x1", ("b", "b"))], "de")


def test_correlation_matches_hand_computation():
    q = _quality({"a": 10, "b": 20, "c": 30, "d": 40})
    c = correlate(q, {"a": 0, "b": 0, "c": 1, "d": 1})
    # deviations (-15,-5,5,15) and (-.5,-.5,.5,.5): r = 20 / sqrt(500 * 1); ranks give the same value
    assert c.n == 4 and c.pearson == pytest.approx(20 / math.sqrt(500))
    assert c.spearman == pytest.approx(20 / math.sqrt(500))
    assert 0 < c.pearson_p < 1 and c.note == ""
    c = correlate(_quality({"a": 1, "b": 2, "c": 3, "d": 100}), {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4})
    assert c.spearman == pytest.approx(1.0) and c.pearson == pytest.approx(14.9 / math.sqrt(7205 * 0.05))


def test_correlation_is_undefined_for_constant_or_tiny_input():
    c = correlate(_quality({"a": 10, "b": 20, "c": 30}), {"a": 1, "b": 1, "c": 1})
    assert (c.pearson, c.spearman, c.note) == (None, None, "undefined: consistency constant")
    c = correlate(_quality({"a": 10, "b": 20}), {"a": 1, "b": 0})
    assert c.pearson is None and c.note == "undefined: 2 item(s)"


def test_consistency_must_refer_to_scored_items_and_be_a_rate():
    q = _quality({"a": 10, "b": 20, "c": 30})
    with pytest.raises(ValueError, match="no translation score: zz"):
        correlate(q, {"a": 1, "zz": 0})
    with pytest.raises(ValueError, match="item b: consistency 2.0 is outside"):
        consistency_above(q, {"a": 1, "b": 2}, 50)


def test_consistency_restricted_to_well_translated_items():
    q = _quality({"a": 80, "b": 50, "c": 49.9, "d": 10})
    f = consistency_above(q, {"a": 1, "b": 1, "c": 0, "d": 0}, 50)
    assert (f.n_items, f.n_included, f.share_included) == (4, 2, 0.5)
    assert (f.consistency_all, f.consistency_included) == (0.5, 1.0)
    f = consistency_above(q, {"a": 1, "c": 0}, 50)  # consistency of a subset (e.g. items correct in English)
    assert (f.n_items, f.n_included, f.consistency_included) == (2, 1, 1.0)
    assert consistency_above(q, {"a": 1, "d": 0}, 90).consistency_included is None


def test_end_to_end_worse_translations_go_with_inconsistency():
    refs = ["Ein Toaster erhitzt Brot.", "Ein Hund hat vier Beine.", "Eine Katze fängt Mäuse.",
            "Ein Vogel kann fliegen."]
    hyps = ["Ein Toaster erhitzt Brot.", "Ein Hund hat vier Pfoten.", "Katzen jagen gern.", "Tisch."]
    q = score_translations([_item(f"x{i}", (h, r)) for i, (h, r) in enumerate(zip(hyps, refs))], "de")
    chrf = [i.chrf for i in q.items]
    assert chrf == sorted(chrf, reverse=True) and chrf[0] == pytest.approx(100)
    c = correlate(q, {"x0": 1, "x1": 1, "x2": 0, "x3": 0})
    assert c.n == 4 and c.pearson > 0.8 and c.spearman > 0.8
    bleu = correlate(q, {"x0": 1, "x1": 1, "x2": 0, "x3": 0}, metric="bleu")
    assert bleu.metric == "bleu" and bleu.pearson != c.pearson
