"""The methods on the toy model against an untrained control, and meta on a model that prefers the first option."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pandas as pd
import pytest
import torch
from eval_fixtures import first_mention_model

from builder.languages import registry
from builder.llm.config import LLMSettings
from evaluate.backends import EndpointGenerator, TransformersGenerator
from evaluate.direct import Direct
from evaluate.endpoint_scoring import EndpointScorer
from evaluate.meta import Meta, prompts
from evaluate.methods import ALL, Context, EvalOptions
from evaluate.methods import registry as methods
from evaluate.models import random_control
from evaluate.neuro import extract_hidden, probe_sets
from evaluate.protocols import LOCAL, HiddenStates, ReplyFormat, TextGenerator, TextScorer, offered
from evaluate.results import read_results
from evaluate.scoring import Scorer


def context(loaded, tmp_path, **options) -> Context:
    scorer = Scorer(loaded)
    return Context(registry(), EvalOptions(**options), tmp_path / "work", scorer=scorer, hidden=scorer)


def overall(scores, method, variant):
    return {s.lang: s.value for s in scores if s.method == method and s.variant == variant and s.negative_type == ALL}


def test_direct_prefers_acceptable_sentences_after_training_and_not_before(toy, release_pairs, tmp_path):
    pairs, _ = release_pairs
    trained = overall(Direct().run(context(toy, tmp_path), pairs).scores, "direct", "full")
    control = overall(Direct().run(context(random_control(toy, seed=1), tmp_path), pairs).scores, "direct", "full")
    assert set(trained) == {"ar", "de", "en", "ja", "ru", "vi", "zh"}
    assert min(trained.values()) >= 0.9
    assert 0.35 <= np.mean(list(control.values())) <= 0.65


def test_probe_beats_the_random_control_by_a_clear_margin(evaluated):
    out, res = evaluated
    assert res.exit_code == 0, res.output
    r = read_results(out)
    probe, control = overall(r.scores, "neuro", "probe"), overall(r.scores, "neuro", "control")
    for lang in probe:
        assert probe[lang] >= 0.85 and probe[lang] - control[lang] >= 0.25, (lang, probe[lang], control[lang])
    curves = r.tables["probes"]
    assert set(curves["layer"]) == {0, 1, 2} and set(curves["model"]) == {"probe", "control"}
    assert (curves["folds"] == 5).all()
    peaks = [s.extra["peak_layer"] for s in r.scores if s.method == "neuro" and s.variant == "probe" and s.negative_type != ALL]
    assert peaks and all(p >= 1 for p in peaks)  # layer 0 (embeddings of the final ".") cannot tell them apart


def test_meta_order_swap_on_a_model_that_prefers_the_first_option(toy, release_pairs, tmp_path):
    pairs, _ = release_pairs
    sub = pairs[pairs["lang"].isin(["en", "de", "zh"])].groupby("lang").head(12).reset_index(drop=True)
    out = Meta().run(context(first_mention_model(toy.tokenizer), tmp_path), sub)
    for lang in ("en", "de", "zh"):
        assert overall(out.scores, "meta", "acceptable_first")[lang] == 1.0
        assert overall(out.scores, "meta", "acceptable_second")[lang] == 0.0
        assert overall(out.scores, "meta", "order_averaged")[lang] == 0.5
        assert overall(out.scores, "meta", "order_bias")[lang] == 1.0
    assert len(out.items) == 2 * len(sub)


def test_meta_prompts_follow_each_language_template_in_both_orders(release_pairs):
    pairs, _ = release_pairs
    row = pairs[pairs["lang"] == "de"].iloc[[0]]
    p = prompts(row, {"de": registry()["de"].meta_prompt})
    acc, unacc, prop = row["acceptable_concept"].iloc[0], row["unacceptable_concept"].iloc[0], row["property"].iloc[0]
    assert p["acceptable_first"][0] == (f'Welches Konzept hat am wahrscheinlichsten die folgende Eigenschaft: "{prop}", '
                                        f'"{acc}" oder "{unacc}"? Antwort: "')
    assert p["acceptable_second"][0].index(unacc) < p["acceptable_second"][0].index(f'"{acc}"')


class RecordingScorer:
    """The real scorer, keeping the prompts it was asked to score."""

    def __init__(self, scorer):
        self.scorer, self.prompts = scorer, set()

    def score(self, requests, progress):
        self.prompts |= {prompt for prompt, _ in requests}
        return self.scorer.score(requests, progress)


@pytest.mark.parametrize("variant", ["paper", "corrected"])
def test_meta_asks_the_chosen_prompt_variant(toy, release_pairs, tmp_path, variant):
    pairs, _ = release_pairs
    sub = pairs[pairs["lang"].isin(["ja", "de"])].groupby("lang").head(2).reset_index(drop=True)
    ctx = context(toy, tmp_path, prompt_variant=variant)
    ctx.scorer = RecordingScorer(ctx.scorer)
    Meta().run(ctx, sub)
    langs = registry()
    ja = langs["ja"].corrected_meta_prompt if variant == "corrected" else langs["ja"].meta_prompt
    assert ctx.scorer.prompts == set(sum(prompts(sub, {"ja": ja, "de": langs["de"].meta_prompt}).values(), []))
    assert any(p.startswith("次の特性を持つ可能性が高いのは") for p in ctx.scorer.prompts) == (variant == "corrected")


def test_options_written_before_prompt_variants_read_as_the_papers_prompts():
    assert EvalOptions.model_validate({"bos_policy": "auto", "seed": 0}).prompt_variant == "paper"


def test_meta_without_a_prompt_template_is_a_clear_error(toy, release_pairs, tmp_path):
    pairs, _ = release_pairs
    odd = pairs.head(3).assign(lang="xx")
    with pytest.raises(ValueError, match="no prompt template for xx"):
        Meta().run(context(toy, tmp_path), odd)


def test_probe_folds_keep_pairs_shared_sentences_and_optionally_properties_together(release_pairs):
    pairs, _ = release_pairs
    en = pairs[pairs["lang"] == "en"].reset_index(drop=True)
    texts = list(dict.fromkeys([*en["acceptable_sentence"], *en["unacceptable_sentence"]]))
    row_of = {t: i for i, t in enumerate(texts)}
    for ps in probe_sets(en, row_of, "pair"):
        acc, unacc = ps.pair_samples[:, 0], ps.pair_samples[:, 1]
        assert (ps.groups[acc] == ps.groups[unacc]).all()
        assert ps.weights.sum() == 2 * len(ps.pair_index) and set(ps.labels[acc]) == {1} and set(ps.labels[unacc]) == {0}
        sub = en.loc[ps.pair_index]
        for _, grp in sub.groupby("acceptable_sentence"):  # one sample, one group, however many negatives
            assert len({ps.groups[s] for s in ps.pair_samples[sub.index.get_indexer(grp.index), 0]}) == 1
    shared = en.groupby(["acceptable_sentence"]).size()
    assert (shared > 1).any()
    by_prop = probe_sets(en, row_of, "property")
    for ps in by_prop:
        sub = en.loc[ps.pair_index]
        for _, idx in sub.groupby("property_id").indices.items():
            assert len(set(ps.groups[ps.pair_samples[idx].ravel()])) == 1
        assert len(set(ps.groups)) == sub["property_id"].nunique()


def test_hidden_states_stream_to_one_float16_file_per_layer(toy, release_pairs, tmp_path):
    pairs, _ = release_pairs
    texts = list(dict.fromkeys(pairs[pairs["lang"] == "ru"]["unacceptable_sentence"]))[:50]
    scorer = Scorer(toy)
    store = extract_hidden({"probe": toy}, scorer, texts, tmp_path / "h")["probe"]
    assert sorted(p.name for p in (tmp_path / "h" / "probe").glob("layer_*.f16")) == ["layer_000.f16", "layer_001.f16", "layer_002.f16"]
    assert all(store.path(layer).stat().st_size == len(texts) * 64 * 2 for layer in range(3))
    rows = np.array([store.row_of[t] for t in texts[:7]])
    ids = torch.tensor([[toy.tokenizer.bos_token_id, *toy.tokenizer(texts[3], add_special_tokens=False)["input_ids"]]])
    with torch.no_grad():
        states = toy.model(input_ids=ids, output_hidden_states=True).hidden_states
    for layer in range(3):
        np.testing.assert_allclose(store.read(layer, rows)[3], states[layer][0, -1].numpy(), rtol=2e-3, atol=2e-3)
    # The same inputs reuse the finished store; mean pooling is another store.
    assert json.loads((tmp_path / "h" / "probe" / "store.json").read_text())["texts"] == store.texts
    mean = extract_hidden({"probe": toy}, scorer, texts, tmp_path / "m", pooling="mean")["probe"]
    assert not np.allclose(mean.read(2, rows), store.read(2, rows))


def test_item_rows_cover_every_pair_variant_and_method(evaluated, release_pairs):
    out, _ = evaluated
    pairs, _ = release_pairs
    items = pd.read_parquet(out / "results.parquet")
    per_method = items.groupby("method")["variant"].unique().to_dict()
    assert sorted(per_method["direct"]) == sorted(["full", "full_per_token", "full_per_char", "full_per_byte", "conditional",
                                                   "conditional_per_token", "conditional_per_char", "conditional_per_byte"])
    assert sorted(per_method["meta"]) == ["acceptable_first", "acceptable_second"]
    assert sorted(per_method["neuro"]) == ["control", "probe"]
    assert len(items) == len(pairs) * (8 + 2 + 2)
    assert items.groupby(["method", "variant"])["pair_id"].nunique().min() == pairs["pair_id"].nunique()


def implements(obj, protocol) -> bool:
    """Whether `obj` has every member `protocol` declares, methods with the same parameters. Looked up statically,
    so that no property runs (an endpoint scorer's `setup` probes its server)."""
    for name in [n for n in vars(protocol) if not n.startswith("_")] + list(protocol.__annotations__):
        try:
            inspect.getattr_static(obj, name)
        except AttributeError:
            return False
        want = vars(protocol).get(name)
        if inspect.isfunction(want):
            got = inspect.getattr_static(type(obj), name)
            if list(inspect.signature(got).parameters) != list(inspect.signature(want).parameters):
                return False
    return True


def test_each_backend_implements_what_it_is_said_to_offer_and_only_a_local_model_offers_the_local_ones(toy, tmp_path):
    settings = LLMSettings(base_url="http://127.0.0.1:9/v1", api_key="k", model="m")
    local = (Scorer(toy), TransformersGenerator(toy))
    endpoint = (EndpointScorer(settings), EndpointGenerator(settings, tmp_path / "cache.sqlite"))
    protocols = (TextScorer, TextGenerator, HiddenStates, ReplyFormat)
    got = {p: [implements(b, p) for b in local + endpoint] for p in protocols}
    assert got == {TextScorer: [True, False, True, False], TextGenerator: [False, True, False, True],
                   HiddenStates: [True, False, False, False], ReplyFormat: [False, True, False, False]}
    assert set(offered(local=True)) == set(LOCAL) == set(protocols)
    assert set(offered(local=False)) == {TextGenerator} and set(offered(local=False, score_endpoint=True)) == {TextScorer, TextGenerator}
    needs = {name: m.needs for name, m in methods().items()}
    assert needs == {"direct": (TextScorer,), "meta": (TextGenerator,), "neuro": (HiddenStates,),
                     "consistency": (TextGenerator,), "selftranslate": (TextGenerator,), "m2c": (TextGenerator,)}
