"""Scoring with four tokenizer families on one tiny model: continuations tokenized as the model reads them, and
conditional scores that never include a concept token (Chinese, Japanese, a German compound, Arabic)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from evaluate.direct import VARIANTS, pair_scores
from evaluate.meta import ORDERS, prompts
from evaluate.methods import accuracy_scores, item_frame
from evaluate.models import load_model
from evaluate.scoring import Scorer

FAMILIES = ("byte-level BPE", "Metaspace BPE (prepend always)", "Unigram with byte fallback", "one character per token")
LANGS = ("en", "de", "zh", "ja", "ar")
SPECIAL = ["<s>", "</s>", "<pad>", "<unk>"]
# Concepts that end alike, so a continuation found as the longest common token suffix starts inside them.
SHARED_ENDINGS = pd.DataFrame({
    "pair_id": ["shared-ending"] * 4, "lang": ["zh", "ja", "de", "ar"], "property_id": ["shared-ending"] * 4,
    "negative_type": ["taxonomic"] * 4,
    "acceptable_sentence": ["熊猫吃竹子。", "白鳥は湖で泳ぐ。", "Ein Wasserkocher kocht Wasser.", "المكتبة فيها كتب كثيرة."],
    "unacceptable_sentence": ["小猫吃竹子。", "小鳥は湖で泳ぐ。", "Ein Eierkocher kocht Wasser.", "العتبة فيها كتب كثيرة."],
    "acceptable_concept_span": [[0, 2], [0, 2], [0, 16], [0, 7]],
    "unacceptable_concept_span": [[0, 2], [0, 2], [0, 14], [0, 6]],
})


def build_tokenizer(family: str, texts: list[str]) -> PreTrainedTokenizerFast:
    if family == FAMILIES[0]:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL, show_progress=False,
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    elif family == FAMILIES[1]:  # Llama-2-style: a word-initial "▁", also before the text's first word
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL, show_progress=False))
    elif family == FAMILIES[2]:  # trained without Arabic: every Arabic character falls back to its UTF-8 bytes
        trained = Tokenizer(models.Unigram())
        trained.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        trained.train_from_iterator([t for t in texts if not any("\u0600" <= ch <= "\u06ff" for ch in t)],
                                    trainers.UnigramTrainer(vocab_size=400, special_tokens=SPECIAL, unk_token="<unk>",
                                                            show_progress=False))
        vocab = [tuple(p) for p in json.loads(trained.to_str())["model"]["vocab"]]
        vocab += [(f"<0x{b:02X}>", -20.0) for b in range(256)]
        tok = Tokenizer(models.Unigram(vocab, unk_id=SPECIAL.index("<unk>"), byte_fallback=True))
        tok.pre_tokenizer = trained.pre_tokenizer
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="▁", prepend_scheme="always")])
    else:  # every character its own token, as character-level CJK tokenizers have it
        chars = sorted(set("".join(texts)))
        tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(SPECIAL + chars)}, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
        tok.normalizer = normalizers.Sequence([])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")


@pytest.fixture(scope="module")
def corpus(release_pairs) -> tuple[pd.DataFrame, dict[str, str]]:
    pairs, info = release_pairs
    pairs = pairs[pairs["lang"].isin(LANGS)].groupby("lang").head(12).reset_index(drop=True)
    templates = {lang.code: lang.meta_prompt for lang in info.languages if lang.code in LANGS}
    return pairs, templates


@pytest.fixture(scope="module")
def family_models(corpus, tmp_path_factory):
    """The same tiny random model under each tokenizer (ids past a tokenizer's vocabulary go unused)."""
    pairs, templates = corpus
    by_order = prompts(pairs, templates)
    texts = [*pairs["acceptable_sentence"], *pairs["unacceptable_sentence"], *by_order[ORDERS[0]],
             *SHARED_ENDINGS["acceptable_sentence"], *SHARED_ENDINGS["unacceptable_sentence"]]
    toks = {f: build_tokenizer(f, texts) for f in FAMILIES}
    config = LlamaConfig(vocab_size=max(map(len, toks.values())), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, bos_token_id=0, eos_token_id=1, pad_token_id=2,
                         tie_word_embeddings=True, max_position_embeddings=512)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    out = {}
    for i, (family, tok) in enumerate(toks.items()):
        folder = tmp_path_factory.mktemp(f"family{i}")
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        out[family] = load_model(folder)
    return out


def whole_text_logprobs(loaded, ids: list[int]) -> np.ndarray:
    """Each token's log-probability after BOS and the tokens before it: one forward over the whole text."""
    seq = torch.tensor([[loaded.tokenizer.bos_token_id, *ids]])
    with torch.no_grad():
        lp = loaded.model(input_ids=seq).logits[0, :-1].float().log_softmax(-1)
    return lp.gather(-1, seq[0, 1:, None])[:, 0].numpy()


def test_families_tokenize_as_intended(family_models):
    tokens = {f: m.tokenizer.tokenize("Ein Wasserkocher 熊猫 المكتبة") for f, m in family_models.items()}
    assert tokens[FAMILIES[1]][0].startswith("▁")  # the prepended word-initial marker
    assert any(t.startswith("<0x") for t in tokens[FAMILIES[2]])  # Arabic through byte fallback
    assert len(tokens[FAMILIES[3]]) == len("Ein Wasserkocher 熊猫 المكتبة")
    assert len(set(map(tuple, tokens.values()))) == len(FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_meta_continuations_are_the_tokens_of_the_prompt_tokenized_whole(family, family_models, corpus):
    loaded = family_models[family]
    tok = loaded.tokenizer
    pairs, templates = corpus
    by_order = prompts(pairs, templates)
    requests = list(dict.fromkeys((p, w) for order in ORDERS for p, a, u in zip(by_order[order], pairs["acceptable_concept"],
                                                                                 pairs["unacceptable_concept"]) for w in (a, u)))
    scorer = Scorer(loaded)
    assert scorer.setup.continuation.startswith("tokenized with its context")
    scored = scorer.score(requests)
    apart = 0
    for (prompt, word), tokenized in zip(requests, scorer.tokenize(requests)):
        whole = tok(prompt + word, add_special_tokens=False)["input_ids"]
        assert tokenized.ids == whole
        apart += tok(prompt, add_special_tokens=False)["input_ids"] + tok(word, add_special_tokens=False)["input_ids"] != whole
        ts = scored[(prompt, word)]
        n = len(whole) - tokenized.n_context
        assert 0 < n == len(ts.logprobs) and ts.ends[-1] == len(word)
        assert tok.decode(whole[-n:]).endswith(word[-1])
        np.testing.assert_allclose(ts.logprobs, whole_text_logprobs(loaded, whole)[-n:], atol=1e-4)
    if family == FAMILIES[1]:
        assert apart > len(requests) / 2  # tokenized apart, the word would gain a "▁" the prompt never had


def old_shared_continuation(a: str, starts_a, b: str, starts_b) -> int:
    """The longest common suffix beginning at a token start in both texts: what conditional scoring used to score."""
    common = {len(a) - s for s in starts_a} & {len(b) - s for s in starts_b}
    return next((d for d in sorted(common, reverse=True) if d > 0 and a[len(a) - d :] == b[len(b) - d :]), 0)


@pytest.mark.parametrize("family", FAMILIES)
def test_conditional_scores_never_include_a_concept_token(family, family_models, corpus):
    loaded = family_models[family]
    pairs, _ = corpus
    rows = pd.concat([pairs[pairs["lang"].isin(["zh", "ja", "de", "ar"])], SHARED_ENDINGS], ignore_index=True)
    texts = list(dict.fromkeys([*rows["acceptable_sentence"], *rows["unacceptable_sentence"]]))
    scored = Scorer(loaded).score([("", t) for t in texts])
    variants = pair_scores(rows, scored)
    undefined, old_inside = {}, 0
    for i, r in enumerate(rows.itertuples()):
        sides = [(r.acceptable_sentence, int(r.acceptable_concept_span[1])), (r.unacceptable_sentence, int(r.unacceptable_concept_span[1]))]
        after = []
        for text, end in sides:
            ts = scored[("", text)]
            kept = ts.starts >= end
            after.append((text[ts.starts[kept].min():] if kept.any() else None, (ts.starts[kept] - ts.starts[kept].min()).tolist()
                          if kept.any() else None, float(ts.logprobs[kept].sum())))
        same = after[0][0] is not None and after[0][:2] == after[1][:2]
        for side in (0, 1):
            got = variants["conditional"][side][i]
            if same:
                assert got == pytest.approx(after[side][2], abs=1e-3)  # exactly the tokens after the concept
            else:
                assert np.isnan(got)
        undefined[r.lang] = undefined.get(r.lang, 0) + (not same)
        a, b = r.acceptable_sentence, r.unacceptable_sentence
        n = old_shared_continuation(a, scored[("", a)].starts.tolist(), b, scored[("", b)].starts.tolist())
        old_inside += n > 0 and (len(a) - n < sides[0][1] or len(b) - n < sides[1][1])
    assert old_inside >= 1  # these pairs do catch the old rule scoring part of a concept
    items = item_frame(rows, "direct", {v: variants[v] for v in VARIANTS})
    counted = {s.lang: s.extra["undefined"] for s in accuracy_scores(items) if s.variant == "conditional" and s.negative_type == "all"}
    assert counted == {lang: n for lang, n in undefined.items() if lang in counted}  # NaN pairs are counted
    assert sum(undefined.values()) < len(rows)  # most pairs are scored
