"""A tiny causal language model trained on the spot, for tests, benchmarks and the demo.

It is a toy and is labelled as one (`toy: true` in its config): a byte-level BPE tokenizer trained
locally and a 2-layer Llama-style model, trained for a fixed number of steps from a fixed seed, so
the same texts always give the same weights. Trained on `judgement_corpus`, it prefers acceptable
sentences and its last-token state encodes truth, because it must predict " yes" or " no" there.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from builder.generate import english_sentence
from builder.paths import sample_dir
from builder.records import pair_id, property_id

BOS, EOS, PAD = "<s>", "</s>", "<pad>"


def sample_pairs() -> pd.DataFrame:
    """The bundled sample's English pairs as release rows, built as `builder generate` does."""
    seeds = sample_dir() / "seeds"
    with (seeds / "concepts.csv").open(encoding="utf-8") as f:
        category = {r["concept"]: r["category"] for r in csv.DictReader(f)}
    rows = []
    for line in (seeds / "comps.jsonl").read_text(encoding="utf-8").splitlines():
        c = json.loads(line)
        acc, acc_span, span = english_sentence(c["prefix_acceptable"], c["property_phrase"])
        unacc, unacc_span, _ = english_sentence(c["prefix_unacceptable"], c["property_phrase"])
        rows.append({
            "pair_id": pair_id(c["property"], c["acceptable_concept"], c["unacceptable_concept"]), "lang": "en",
            "property_id": property_id(c["property"]), "property": c["property"], "property_en": c["property"],
            "acceptable_concept": c["acceptable_concept"], "unacceptable_concept": c["unacceptable_concept"],
            "acceptable_concept_en": c["acceptable_concept"], "unacceptable_concept_en": c["unacceptable_concept"],
            "category": category.get(c["acceptable_concept"], ""), "negative_type": c["negative_sample_type"],
            "similarity": c.get("similarity"), "acceptable_sentence": acc, "unacceptable_sentence": unacc,  # similarity: the audits compute it
            "property_span": list(span), "acceptable_concept_span": list(acc_span),
            "unacceptable_concept_span": list(unacc_span), "review_status": "source", "n_reviewers": 0, "corrected": False,
            "sentence_origin": "comps", "sentence_review": None,
        })
    return pd.DataFrame(rows)


def judgement_corpus(pairs: pd.DataFrame, fact_repeats: int = 3) -> list[str]:
    """Training texts from pair rows: each acceptable sentence as a fact, and every sentence judged.

    Judgements are balanced (as many "yes" as "no"), so the verdict must come from the sentence;
    facts are repeated so a memorising model still prefers them over foils it has seen judged "no".
    """
    acceptable = sorted(set(pairs["acceptable_sentence"]))
    unacceptable = sorted(set(pairs["unacceptable_sentence"]) - set(acceptable))
    yes_repeats = max(1, round(len(unacceptable) / max(len(acceptable), 1)))
    return (acceptable * fact_repeats + [f"{s} yes" for s in acceptable] * yes_repeats
            + [f"{s} no" for s in unacceptable])


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[BOS, EOS, PAD],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD)


def toy_config(tokenizer: PreTrainedTokenizerFast, *, hidden: int = 64, layers: int = 2, heads: int = 4,
               max_positions: int = 512) -> LlamaConfig:
    cfg = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=max_positions,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
    )
    cfg.toy = True
    return cfg


def train_toy(
    texts: Sequence[str],
    directory: str | Path,
    *,
    steps: int = 1000,
    seed: int = 0,
    batch_size: int = 32,
    lr: float = 6e-3,
    hidden: int = 64,
    layers: int = 2,
) -> Path:
    """Train the toy on `texts` and save model and tokenizer to `directory` (loadable by path)."""
    directory = Path(directory)
    tokenizer = train_tokenizer(texts)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(toy_config(tokenizer, hidden=hidden, layers=layers))
    encoded = [[tokenizer.bos_token_id, *ids, tokenizer.eos_token_id]
               for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread is both fastest for a model this small and deterministic
    try:
        model.train()
        for _ in range(steps):
            idx = torch.randint(len(encoded), (batch_size,), generator=gen).tolist()
            batch = [encoded[i] for i in idx]
            width = max(map(len, batch))
            ids = torch.full((batch_size, width), tokenizer.pad_token_id)
            labels = torch.full((batch_size, width), -100)
            mask = torch.zeros((batch_size, width), dtype=torch.long)
            for row, seq in enumerate(batch):
                ids[row, : len(seq)] = labels[row, : len(seq)] = torch.tensor(seq)
                mask[row, : len(seq)] = 1
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    directory.mkdir(parents=True, exist_ok=True)
    transformers.utils.logging.disable_progress_bar()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
