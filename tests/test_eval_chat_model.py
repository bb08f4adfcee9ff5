"""The generative methods on a real chat model (SmolLM2-135M-Instruct): what it is given is its chat template's rendering."""

from __future__ import annotations

import functools

import pytest
from generative_fixtures import report_row

from builder.default_model import gguf_path
from evaluate import m2c as m2c_method
from evaluate import selftranslate
from evaluate.backends import TransformersGenerator, chat_text
from evaluate.methods import EvalOptions, resolve
from evaluate.models import load_model
from evaluate.report import build_report
from evaluate.run import run_evaluation
from evaluate.scoring import Scorer
from evaluate.selftranslate import options, source_prompts

# SmolLM2's template, as its model card gives it: a default system turn, the user's turn, the assistant's turn opened.
SMOLLM2_TURN = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n")


class Seen:
    """What the model is given: every prompt row passed to `generate` and every (context, reply) the scorer scores."""

    def __init__(self, loaded, monkeypatch):
        self.generated: list[list[int]] = []
        self.scored: list[tuple[str, str]] = []
        generate, score = loaded.model.generate, Scorer.score

        def seen_generate(*args, input_ids, attention_mask, **kw):
            self.generated += [row[mask.bool()].tolist() for row, mask in zip(input_ids, attention_mask)]
            return generate(*args, input_ids=input_ids, attention_mask=attention_mask, **kw)

        def seen_score(scorer, requests, progress=None):
            self.scored += list(requests)
            return score(scorer, requests, progress)

        monkeypatch.setattr(loaded.model, "generate", seen_generate)
        monkeypatch.setattr(Scorer, "score", seen_score)


def test_chat_text_is_the_templates_rendering_and_tokenizes_as_the_template_does(smollm2):
    tok = smollm2.tokenizer
    prompt = "Please translate the following text into German: “A toaster is used for heating food.”"
    assert chat_text(tok, prompt) == SMOLLM2_TURN.format(prompt=prompt)
    gen = TransformersGenerator(smollm2)
    # the ids the model is given are those of transformers' own tokenizing path (a list with return_dict=False)
    assert gen.encode(prompt) == tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                         tokenize=True, return_dict=False)
    assert gen.prompt_format == SMOLLM2_TURN
    # a reply is scored after the assistant's turn opens; the scorer's own <|im_start|> stands for the template's first
    assert gen.reply_context(prompt, without="<|im_start|>") == SMOLLM2_TURN.format(prompt=prompt)[len("<|im_start|>"):]


def test_selftranslate_both_ways_and_m2c_run_through_smollm2s_chat_template(smollm2, subset, tmp_path, monkeypatch):
    pairs, info, m2c = subset
    # Few prompts and few new tokens: what is checked is what the model is given, not how well it translates.
    monkeypatch.setattr(selftranslate, "MAX_TRANSLATION_TOKENS", 8)
    monkeypatch.setattr(m2c_method, "MAX_NEW_TOKENS", 4)
    keep = sorted(pairs["pair_id"].unique())[:1]
    pairs = pairs[pairs["pair_id"].isin(keep) & pairs["lang"].isin(["en", "de"])].reset_index(drop=True)
    template = m2c[m2c["lang"] == "de"].sort_values("test_id")["template_id"].iloc[0]
    tests = m2c[m2c["template_id"] == template].sort_values("test_id").head(2).reset_index(drop=True)
    seen = Seen(smollm2, monkeypatch)
    res = run_evaluation(pairs, info, smollm2, resolve("selftranslate,m2c"), tmp_path / "out",
                         EvalOptions(translate_directions=("en-de", "de-en")), m2c=tests)
    assert res.config.prompt_format == SMOLLM2_TURN

    # Every prompt generated from is one user turn of the template, token for token.
    words = source_prompts()
    de, en = (pairs[pairs["lang"] == lang].iloc[0] for lang in ("de", "en"))
    asked = {words["en"].translate.format(language="German", text=en["acceptable_sentence"]),
             words["de"].translate.format(language="Englische", text=de["acceptable_sentence"]),
             words["de"].translate.format(language="Englische", text=words["de"].prefix)}
    given = {smollm2.tokenizer.decode(ids) for ids in seen.generated}
    assert {SMOLLM2_TURN.format(prompt=p) for p in asked} <= given
    head, tail = SMOLLM2_TURN.split("{prompt}")
    assert all(text.startswith(head) and text.endswith(tail) for text in given)
    m2c_items = res.tables["m2c_items"]
    assert set(m2c_items["variant"]) == {"zero_shot", "one_shot"} and len(m2c_items) == 4
    assert (m2c_items["reply"].str.len() > 0).all()  # it answered, in its assistant turn

    # Decisions are scored where the assistant's reply begins: after the template's rendering of the task (less its
    # first <|im_start|> when the scorer prepends that token itself).
    bos = Scorer(smollm2).setup.bos_token
    assert {x for _, x in seen.scored} == {"A", "B"}
    rendered = {c if c.startswith("<|im_start|>") else bos + c for c, _ in seen.scored}
    assert all(r.startswith(head) and r.endswith(tail) for r in rendered)
    for src, row in (("en", en), ("de", de)):
        task = words[src].instruction.task(*options(row["pair_id"], row["acceptable_sentence"], row["unacceptable_sentence"]))
        assert SMOLLM2_TURN.format(prompt=task) in rendered

    summary = res.tables["selftranslate_summary"]
    assert set(zip(summary["direction"], summary["condition"])) == {(d, c) for d in ("en-de", "de-en") for c in "IXT"}
    translations = res.tables["selftranslate_translations"]
    assert set(translations["direction"]) == {"en-de", "de-en"} and len(translations) == 2

    # The report shows the template literally: its <|im_start|> neither splits the table cell nor becomes a tag.
    build_report(tmp_path / "out")
    html = (tmp_path / "out" / "report.html").read_text()
    row = report_row(html, "generation prompt")
    assert "&lt;|im_start|&gt;user\\n{prompt}&lt;|im_end|&gt;\\n&lt;|im_start|&gt;assistant\\n" in row
    assert "<|im_start|>" not in html


def test_prompts_sharing_their_beginning_are_read_once_and_get_the_replies_they_get_read_whole(smollm2, monkeypatch):
    instruction = ("Answer the question about the context with one word, in the form the sentence needs. "
                   "Do not explain your answer.\n\nContext: ")
    prompts = [f"{instruction}{who} is a {job} and {other} is not.\nQuestion: Who is a {job}?\nAnswer:"
               for who, other in (("Anna", "Ben"), ("Clara", "David"), ("Max", "Lena"))
               for job in ("baker", "teacher", "pilot")] + ["Translate into German: “A kettle is used for boiling water.”"]
    read: list[int] = []
    forward = smollm2.model.forward

    @functools.wraps(forward)  # generate reads the signature to choose the inputs it passes
    def counted(*args, input_ids, **kw):
        if input_ids.shape[1] > 1:  # prompts read (decoding reads one token a row)
            read.append(input_ids.numel())
        return forward(*args, input_ids=input_ids, **kw)

    monkeypatch.setattr(smollm2.model, "forward", counted)
    whole = TransformersGenerator(smollm2)
    whole.packs = False
    replies = whole.generate(prompts, max_new_tokens=12, stage="test")
    read_whole, read[:] = sum(read), []
    shared = TransformersGenerator(smollm2)
    assert shared.packs
    assert shared.generate(prompts, max_new_tokens=12, stage="test") == replies
    assert sum(read) < 0.6 * read_whole
    # sampled replies come through the same cache, seeded
    assert (shared.generate(prompts, max_new_tokens=12, stage="test", temperature=1.0, seed=3)
            == shared.generate(prompts, max_new_tokens=12, stage="test", temperature=1.0, seed=3))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_packing_probe_takes_smollm2_in_either_precision_and_refuses_it_when_position_ids_are_dropped(dtype, monkeypatch):
    """Packed, a text's states differ from its states alone by rounding only (0.03 of their norm in bfloat16, which the
    probe once refused, so bfloat16 scoring ran one text per row); with its positions taken from the row, by far more."""
    loaded = load_model(gguf_path(), device="cpu", dtype=dtype)
    assert Scorer(loaded).packs
    body = loaded.model.base_model
    forward = body.forward

    def row_positions(*args, position_ids=None, **kwargs):  # as a model that numbers a row's tokens itself
        return forward(*args, **kwargs)

    monkeypatch.setattr(body, "forward", row_positions)
    assert not Scorer(loaded).packs
