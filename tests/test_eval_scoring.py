"""Scoring: batched log-probabilities equal a plain reference, BOS is explicit, device/dtype/batch choice."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from tokenizers import processors

from builder.errors import InputError
from evaluate.direct import VARIANTS, ScoredTexts, after_concept, pair_scores
from evaluate.models import Capabilities, choose_batch_size, choose_device, choose_dtype, load_model, weights_sha256
from evaluate.scoring import PROBE_TOKENS, Scorer, TokenScores, pack, resolve_bos


def reference_logprob(loaded, text: str) -> float:
    """One forward pass over one sentence, no padding, BOS prepended: the textbook definition."""
    tok = loaded.tokenizer
    ids = torch.tensor([[tok.bos_token_id, *tok(text, add_special_tokens=False)["input_ids"]]])
    with torch.no_grad():
        lp = loaded.model(input_ids=ids).logits[0, :-1].log_softmax(-1)
    return float(lp.gather(-1, ids[0, 1:, None]).sum())


class RowCounter:
    """Counts rows (and keeps the inputs) of text the model's decoder is run on (not the scorer's probes)."""

    def __init__(self, model):
        self.rows, self.inputs = 0, []
        self.handle = model.base_model.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        ids = kwargs["input_ids"]
        if set(ids.flatten().tolist()) <= set(PROBE_TOKENS):
            return
        self.rows += ids.shape[0]
        self.inputs.append(ids.clone())

    def close(self):
        self.handle.remove()


def test_batched_scores_equal_one_forward_per_sentence_and_each_prefix_is_run_once(toy, release_pairs):
    pairs, _ = release_pairs
    en = pairs[pairs["lang"] == "en"][:40]
    texts = list(en["acceptable_sentence"]) + list(en["unacceptable_sentence"])
    unique = list(dict.fromkeys(texts))
    assert len(unique) < len(texts)  # acceptable sentences are shared by their negatives
    scorer = Scorer(toy)
    assert scorer.split is not None and scorer.packs  # probed before counting
    counter = RowCounter(toy.model)
    try:
        scored = scorer.score([("", t) for t in texts])
    finally:
        counter.close()
    inputs = [[toy.tokenizer.bos_token_id, *ids][:-1] for ids in scorer.encode(unique)]  # the last token predicts nothing
    prefixes = {tuple(seq[: k + 1]) for seq in inputs for k in range(len(seq))}
    fed = sum(int((ids != toy.tokenizer.pad_token_id).sum()) for ids in counter.inputs)
    assert len(prefixes) <= fed <= 1.1 * len(prefixes)  # each distinct beginning about once
    assert fed < 0.85 * sum(map(len, inputs))  # rather than once per sentence
    assert counter.rows < len(unique) / 4
    # what it records of its work: every position it fed (padding too), the output layer once per distinct prefix
    assert scorer.work.positions == sum(ids.numel() for ids in counter.inputs)
    assert scorer.work.output_rows == len(prefixes)
    for t in unique:
        assert scored[("", t)].logprobs.sum() == pytest.approx(reference_logprob(toy, t), abs=1e-3)
    one = Scorer(with_batch_size(toy, 1)).score([("", t) for t in unique])
    for t in unique:
        np.testing.assert_array_equal(one[("", t)].logprobs, scored[("", t)].logprobs)


def with_batch_size(loaded, n: int):
    return loaded.__class__(loaded.model, loaded.tokenizer, loaded.info.model_copy(update={"batch_size": n}))


def test_a_score_is_the_same_to_the_bit_whatever_it_is_packed_and_batched_with(smollm2, release_pairs):
    """What a score store relies on: a sentence's score from one release's run equals a fresh run's of the next,
    whose rows and batches hold other sentences. With float32 attention SmolLM2's moved by up to 1.1e-4 nats."""
    pairs, _ = release_pairs
    texts = list(dict.fromkeys([*pairs["acceptable_sentence"], *pairs["unacceptable_sentence"]]))[:300]
    scorer = Scorer(smollm2)
    assert scorer.packs and scorer.setup.precision == "float32; attention in float64"
    whole = scorer.score([("", t) for t in texts])
    tenth = Scorer(smollm2).score([("", t) for t in texts[::10]])
    others = Scorer(with_batch_size(smollm2, 3)).score([("", t) for t in texts[::-2]])
    for part in (tenth, others):
        for request, got in part.items():
            np.testing.assert_array_equal(got.logprobs, whole[request].logprobs)
    assert smollm2.model.config._attn_implementation == "sdpa"  # as it was: generation is left as it is


def test_a_model_with_soft_capped_logits_is_scored_from_its_full_logits(toy, tmp_path):
    """The output layer alone runs on scored positions only where that equals the model's own logits."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    tok = toy.tokenizer
    config = Gemma2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=2, head_dim=16, final_logit_softcapping=1.0,
                          bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = Gemma2ForCausalLM(config)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(200)  # logits well beyond the cap
    model.save_pretrained(tmp_path / "capped")
    tok.save_pretrained(tmp_path / "capped")
    capped = load_model(tmp_path / "capped")
    scorer = Scorer(capped)
    assert scorer.split is None and Scorer(toy).split is not None
    texts = ["A whale lives in water.", "A toaster is used for heating food."]
    scored = scorer.score([("", t) for t in texts])
    for t in texts:
        assert scored[("", t)].logprobs.sum() == pytest.approx(reference_logprob(capped, t), abs=1e-3)
    ids = torch.tensor([[tok.bos_token_id, *tok(texts[0], add_special_tokens=False)["input_ids"]]])
    with torch.no_grad():
        uncapped = capped.model.get_output_embeddings()(capped.model.base_model(input_ids=ids).last_hidden_state)
    wrong = float(uncapped[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None]).sum())
    assert abs(wrong - reference_logprob(capped, texts[0])) > 1.0  # skipping the cap would change the score


def test_packing_builds_one_prefix_tree_per_row():
    from evaluate.scoring import pack

    rng = np.random.default_rng(0)
    stems = [list(rng.integers(1, 6, size=n)) for n in (2, 3, 5)]
    seqs = [stem + list(rng.integers(1, 6, size=rng.integers(0, 6))) for stem in stems for _ in range(12)] + [[]]
    seqs.append(list(seqs[0]))  # identical inputs share a whole path
    packing = pack(seqs, capacity=24)
    placed = {}
    for row in packing.rows:
        assert len(row.tokens) <= 24 or len(row.paths) == 1
        ends = row.ends()  # what the attention mask lets position k see: j <= k < ends[j]
        prefixes = [tuple(row.tokens[j] for j in range(k + 1) if k < ends[j]) for k in range(len(row.tokens))]
        assert len(set(prefixes)) == len(prefixes)  # each distinct prefix once in a row
        for i, path in row.paths.items():
            assert [row.tokens[k] for k in path] == seqs[i] and [row.depths[k] for k in path] == list(range(len(seqs[i])))
            assert all(prefixes[k] == tuple(seqs[i][: d + 1]) for d, k in enumerate(path))  # it sees its ancestors only
            placed[i] = row
    assert sorted(placed) == list(range(len(seqs))) and placed[0] is placed[len(seqs) - 1]
    assert sum(len(r.tokens) for r in packing.rows) < sum(map(len, seqs)) * 0.8
    ids = {(i, k): packing.prefixes[i][k] for i, seq in enumerate(seqs) for k in range(len(seq))}
    for (i, k), x in ids.items():
        for (j, m), y in ids.items():
            assert (x == y) == (seqs[i][: k + 1] == seqs[j][: m + 1])
    assert packing.n_prefixes == len(set(ids.values()))
    assert all(len(set(map(tuple, (seqs[i] for i in r.paths)))) == 1 for r in pack(seqs, capacity=0).rows)


@pytest.mark.parametrize(("architecture", "packs"), [("gpt2", True), ("bloom", False)])
def test_models_that_cannot_pack_a_prefix_tree_are_scored_one_text_per_row(toy, tmp_path, architecture, packs):
    """GPT-2 takes positions and a 4D mask; BLOOM derives its ALiBi biases from a 2D mask and cannot pack."""
    from transformers import AutoModelForCausalLM, BloomConfig, GPT2Config

    tok = toy.tokenizer
    config = (GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=128) if architecture == "gpt2"
              else BloomConfig(vocab_size=len(tok), hidden_size=32, n_layer=1, n_head=2))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / architecture)
    tok.save_pretrained(tmp_path / architecture)
    loaded = load_model(tmp_path / architecture)
    scorer = Scorer(loaded)
    assert scorer.packs is packs
    texts = ["A whale lives in water.", "A whale lives in the sea.", "A whale is a mammal.", "A toaster heats food."]
    counter = RowCounter(loaded.model)
    try:
        scored = scorer.score([("", t) for t in texts])
    finally:
        counter.close()
    assert counter.rows == (1 if packs else len(texts))
    for t in texts:
        assert scored[("", t)].logprobs.sum() == pytest.approx(reference_logprob(loaded, t), abs=1e-3)


def test_bos_is_prepended_once_even_by_a_tokenizer_that_adds_its_own(toy_dir, tmp_path):
    folder = tmp_path / "bos-adding"
    shutil.copytree(toy_dir, folder)
    loaded = load_model(folder)
    tok = loaded.tokenizer
    tok._tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.bos_token_id)])
    assert tok("a dog")["input_ids"][0] == tok.bos_token_id  # the tokenizer itself adds BOS
    text = "A whale lives in water."
    n_tokens = len(tok(text, add_special_tokens=False)["input_ids"])
    for policy, first_id, scored_tokens in (("bos", tok.bos_token_id, n_tokens), ("eos", tok.eos_token_id, n_tokens),
                                            ("none", None, n_tokens - 1)):
        scorer = Scorer(loaded, policy)
        counter = RowCounter(loaded.model)
        try:
            ts = scorer.score([("", text)])[("", text)]
        finally:
            counter.close()
        ids = counter.inputs[0][0].tolist()
        assert scorer.setup.bos_policy == policy and scorer.setup.first_token_scored == (first_id is not None)
        if first_id is not None:
            assert ids[0] == first_id and ids[1] != first_id
        else:
            assert tok.bos_token_id not in ids
        assert len(ts.logprobs) == scored_tokens


def test_bos_can_be_named_and_auto_prefers_the_document_separator_to_a_chat_turn_marker(toy):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(toy.tokenizer.name_or_path)
    assert resolve_bos("auto", tok)[0].bos_token == "<s>"  # no chat template: the BOS token
    named, named_id = resolve_bos("</s>", tok)
    assert (named.bos_policy, named.bos_token, named_id) == ("token", "</s>", tok.eos_token_id)
    with pytest.raises(ValueError, match="not one token of the vocabulary.*<s>"):
        resolve_bos("<|nothing|>", tok)
    # SmolLM2's set-up: BOS is the chat-turn marker, EOS ends each turn, <|endoftext|> separates documents.
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]})
    tok.bos_token, tok.eos_token = "<|im_start|>", "<|im_end|>"
    tok.chat_template = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                         "'<|im_end|>' + '\\n'}}{% endfor %}")
    setup, chosen = resolve_bos("auto", tok)
    assert setup.bos_token == "<|endoftext|>" and chosen == tok.convert_tokens_to_ids("<|endoftext|>")
    assert "<|im_start|> opens every chat turn" in setup.bos_reason and setup.first_token_scored
    assert resolve_bos("bos", tok)[0].bos_token == "<|im_start|>"  # asked for by name, it is used


def test_device_dtype_and_batch_size_choices():
    cpu, gpu = Capabilities(), Capabilities(cuda=True, cuda_bf16=True, cuda_free_bytes=80 * 2**30)
    old_gpu = Capabilities(cuda=True, cuda_bf16=False, cuda_free_bytes=16 * 2**30)
    assert choose_device(None, cpu) == "cpu" and choose_device("auto", gpu) == "cuda"
    assert choose_device(None, Capabilities(mps=True)) == "mps"
    assert choose_device("cpu", gpu) == "cpu"
    with pytest.raises(ValueError, match="no CUDA"):
        choose_device("cuda", cpu)
    assert choose_dtype(None, "cuda", gpu) == "bfloat16"
    assert choose_dtype(None, "cuda", old_gpu) == "float16"
    assert choose_dtype(None, "cpu", gpu) == "float32"
    assert choose_dtype("bf16", "cpu", cpu) == "bfloat16"
    with pytest.raises(ValueError, match="int8"):
        choose_dtype("int8", "cpu", cpu)
    llama8b = dict(vocab_size=128256, hidden_size=4096, n_layers=32, model_bytes=16 * 2**30)
    big = choose_batch_size(None, "cuda", gpu, **llama8b)
    small = choose_batch_size(None, "cuda", Capabilities(cuda=True, cuda_free_bytes=24 * 2**30), **llama8b)
    assert 1 <= small < big <= 512
    assert choose_batch_size(None, "cuda", Capabilities(cuda=True, cuda_free_bytes=10 * 2**30), **llama8b) == 1
    assert choose_batch_size(None, "cpu", cpu, **llama8b) == 12  # 1 GiB of logits on a CPU
    assert choose_batch_size(None, "cpu", cpu, vocab_size=512, hidden_size=64, n_layers=2, model_bytes=10**6) == 64
    assert choose_batch_size(7, "cuda", gpu, **llama8b) == 7


def test_bf16_scoring_on_cpu_agrees_with_fp32_and_takes_target_and_normaliser_from_the_same_logits(toy_dir, release_pairs):
    pairs, _ = release_pairs
    sub = pairs[pairs["lang"].isin(["en", "de"])]
    texts = list(dict.fromkeys([*sub["acceptable_sentence"], *sub["unacceptable_sentence"]]))
    fp32 = load_model(toy_dir, device="cpu", dtype="float32")
    bf16 = load_model(toy_dir, device="cpu", dtype="bf16")
    assert bf16.info.dtype == "bfloat16" and next(bf16.model.parameters()).dtype == torch.bfloat16
    low = Scorer(bf16)
    assert Scorer(fp32).setup.precision == "float32; attention in float64"
    assert "output layer (a float32 copy)" in low.setup.precision
    a = Scorer(fp32).score([("", t) for t in texts])
    b = low.score([("", t) for t in texts])
    per_token = np.concatenate([a[("", t)].logprobs - b[("", t)].logprobs for t in texts])
    print(f"bf16 vs fp32 per token: max |d| {np.abs(per_token).max():.4f} nats, mean {np.abs(per_token).mean():.4f}")
    assert np.abs(per_token).mean() < 0.05
    x = np.array([a[("", t)].logprobs.sum() for t in texts])
    y = np.array([b[("", t)].logprobs.sum() for t in texts])
    assert np.median(np.abs(x - y) / np.abs(x)) < 0.02
    decided = [(x[texts.index(p)] > x[texts.index(q)]) == (y[texts.index(p)] > y[texts.index(q)])
               for p, q in zip(sub["acceptable_sentence"], sub["unacceptable_sentence"])]
    assert np.mean(decided) >= 0.95
    # Every possible next token scored at one position: the probabilities sum to one only if each target's logit
    # and the normaliser come from the same logits (a bf16 normaliser under float32 targets missed by ~1e-2).
    ids = low.prefix() + low.encode(["A whale lives in"])[0]
    row = pack([ids], 0).rows[0]
    states = low._forward([row], packed=False).flatten(0, 1)
    vocab = bf16.model.config.vocab_size
    lp = low._logprobs(states, np.full(vocab, len(ids) - 1), np.arange(vocab), np.zeros(vocab, np.int64), np.full(1, np.nan))
    assert abs(float(torch.logsumexp(torch.as_tensor(lp, dtype=torch.float64), 0))) < 1e-5


def test_conditional_scores_what_follows_the_concept_in_both_sentences(toy):
    a, b = "A toaster is used for heating food.", "A blender is used for heating food."
    c, d = "Heating food is done by a toaster", "Heating food is done by a kettle"  # the concept comes last
    s = Scorer(toy).score([("", t) for t in (a, b, c, d)])
    spans = {"acceptable_concept_span": [[2, 9], [26, 33]], "unacceptable_concept_span": [[2, 9], [26, 32]]}
    v = pair_scores(pd.DataFrame({"acceptable_sentence": [a, c], "unacceptable_sentence": [b, d], **spans}), s)
    at = after_concept(a, s[("", a)].starts.tolist(), 9, b, s[("", b)].starts.tolist(), 9)
    assert at is not None and a[at[0]:] == b[at[1]:] and a[at[0]:].strip().startswith("is used")  # not inside "toaster"
    for side, (text, start) in enumerate(zip((a, b), at)):
        ts = s[("", text)]
        assert v["conditional"][side][0] == pytest.approx(float(ts.logprobs[ts.starts >= start].sum()))
        assert v["conditional_per_token"][side][0] == pytest.approx(v["conditional"][side][0] / (ts.starts >= start).sum())
        assert v["full"][side][0] < v["conditional"][side][0] < 0
    assert v["conditional_per_char"][0][0] == pytest.approx(v["conditional"][0][0] / len(a[at[0]:]))
    # Sentences with nothing after the concept have no conditional score, and still a full one.
    assert after_concept(c, s[("", c)].starts.tolist(), 33, d, s[("", d)].starts.tolist(), 32) is None
    assert all(np.isnan(v[k][side][1]) for k in VARIANTS if k.startswith("conditional") for side in (0, 1))
    assert v["full"][0][1] == pytest.approx(float(s[("", c)].logprobs.sum()))
    # Without concept spans (a release published before they were) there is no conditional score at all.
    bare = pair_scores(pd.DataFrame({"acceptable_sentence": [a], "unacceptable_sentence": [b]}), s)
    assert np.isnan(bare["conditional"][0][0]) and not np.isnan(bare["full"][0][0])
    assert len(VARIANTS) == 8


def test_per_token_character_and_byte_normalisations(toy):
    text, other = "Ein Bär lebt im Wald.", "Ein Hund lebt im Wald."
    scored = Scorer(toy).score([("", text), ("", other)])
    ts = scored[("", text)]
    total = float(ts.logprobs.sum())
    rows = pd.DataFrame({"acceptable_sentence": [text], "unacceptable_sentence": [other],
                         "acceptable_concept_span": [[4, 7]], "unacceptable_concept_span": [[4, 8]]})
    v = {k: a[0] for k, (a, _) in pair_scores(rows, scored).items()}
    assert v["full"] == pytest.approx(total)
    assert v["full_per_token"] == pytest.approx(total / len(ts.logprobs))
    assert v["full_per_char"] == pytest.approx(total / len(text))
    assert v["full_per_byte"] == pytest.approx(total / len(text.encode("utf-8")))
    assert v["full_per_char"] != v["full_per_byte"]  # "ä" is one character, two bytes
    tail = " lebt im Wald."  # shared after the concept: 14 characters and bytes
    assert v["conditional_per_char"] == v["conditional_per_byte"] == pytest.approx(v["conditional"] / len(tail))


def test_scored_texts_sum_from_a_character_like_a_filter_over_each_text():
    rng = np.random.default_rng(0)
    texts = [TokenScores(rng.normal(size=n).astype(np.float32), rng.permutation(n * 3)[:n], np.zeros(n, np.int64))
             for n in rng.integers(0, 6, size=40)]  # starts in any order; some texts with no scored token
    table = ScoredTexts(texts)
    which, chars = rng.integers(0, len(texts), size=500), rng.integers(0, 25, size=500)
    total, n = table.from_char(which, chars)
    for k, c, got, count in zip(which, chars, total, n):
        kept = texts[k].starts >= c
        assert count == kept.sum() and got == pytest.approx(texts[k].logprobs[kept].astype(np.float64).sum(), abs=1e-9)
    assert table.start_lists == [sorted(t.starts.tolist()) for t in texts]


def test_model_info_names_the_weights_and_bad_folders_are_clear_errors(toy, toy_dir, tmp_path):
    assert toy.info.source == "local" and toy.info.weights_sha256 == weights_sha256(toy_dir)
    assert toy.info.toy and toy.info.n_layers == 2 and toy.info.device == "cpu" and toy.info.dtype == "float32"
    changed = tmp_path / "changed"
    shutil.copytree(toy_dir, changed)
    weights = next(changed.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    assert weights_sha256(changed) != toy.info.weights_sha256
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no config.json"):
        load_model(tmp_path / "empty")


def test_token_budget_batches_bound_padded_size_and_keep_every_index_once():
    from evaluate.scoring import length_batches

    lengths = [5, 40, 12, 12, 3, 40, 7, 25, 1, 9] * 7
    batches = length_batches(lengths, batch_size=8, max_tokens=64)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 8 and (len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 64)
        assert lengths[b[0]] == max(lengths[i] for i in b)  # longest first: the first row sets the width
    assert max(map(len, batches)) == 8 and min(map(len, batches)) == 1  # short texts fill batches, long ones go alone
    assert length_batches(lengths, batch_size=8) == length_batches(lengths, batch_size=8, max_tokens=10**9)


def test_extraction_is_cut_to_a_token_budget_on_a_cpu_only(toy, release_pairs, tmp_path, monkeypatch):
    from evaluate import neuro

    monkeypatch.setattr(neuro, "CPU_EXTRACT_BYTES", 80 * 4 * (2 * 3 * 64 + 4 * 256))  # 80 tokens for the toy
    budget = neuro.extraction_tokens(toy)
    assert budget == 80
    pairs, _ = release_pairs
    texts = list(dict.fromkeys(pairs["acceptable_sentence"][:60]))
    counter = RowCounter(toy.model)
    try:
        store = neuro.extract_hidden({"probe": toy}, Scorer(toy), texts, tmp_path / "states")["probe"]
    finally:
        counter.close()
    assert sorted(store.texts) == sorted(texts) and counter.rows == len(texts)
    assert all(ids.numel() <= budget or ids.shape[0] == 1 for ids in counter.inputs)
    assert max(ids.shape[0] for ids in counter.inputs) > 1  # short sentences still share a batch
    on_gpu = toy.__class__(toy.model, toy.tokenizer, toy.info.model_copy(update={"device": "cuda"}))
    assert neuro.extraction_tokens(on_gpu) is None


def test_the_control_is_rebuilt_identically_for_each_language(toy):
    """Neuro frees the control before probing and rebuilds it per language: the same seed must give the same weights."""
    from evaluate.models import random_control

    a, b, other = random_control(toy, seed=3), random_control(toy, seed=3), random_control(toy, seed=4)
    pa, pb, po = (dict(m.model.named_parameters()) for m in (a, b, other))
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert not all(torch.equal(pa[k], po[k]) for k in pa)
    assert not all(torch.equal(pa[k], p) for k, p in toy.model.named_parameters())


def test_the_bundled_sample_gives_release_rows_for_the_benchmarks():
    """bench/direct_scoring.py scores these: every release column, one row per pair of the bundled seeds."""
    from builder.releases.features import PAIR_FEATURES
    from evaluate.toy import sample_pairs

    pairs = sample_pairs()
    assert list(pairs.columns) == list(PAIR_FEATURES) and len(pairs) == 423 and set(pairs["lang"]) == {"en"}
    first = pairs.iloc[0]
    start, end = first["acceptable_concept_span"]
    assert first["acceptable_concept"] in first["acceptable_sentence"][start:end].lower()  # with its article: "A toaster"
