"""Session fixtures for evaluation tests: a real release of the demo data, a toy model trained on it.

The release is published by the real stages (`builder demo` replayed from the bundled recording,
then `publish`), 7 languages x 104 pairs. The toy model is trained once per session on judgement
sentences made from those pairs, for a fixed number of steps from a fixed seed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from sample_workspace import build_sample_release
from transformers.modeling_outputs import CausalLMOutput

from builder.default_model import gguf_path
from evaluate.data import load_release_pairs
from evaluate.models import LoadedModel, ModelInfo, load_model
from evaluate.toy import judgement_corpus, train_toy

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TOY_STEPS = 1000
VERSION = "1.0.0"


@pytest.fixture(scope="session")
def release(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("eval-release")
    return build_sample_release(root, VERSION)


@pytest.fixture(scope="session")
def release_pairs(release):
    return load_release_pairs(release, VERSION)


@pytest.fixture(scope="session")
def toy_dir(release_pairs, tmp_path_factory) -> Path:
    pairs, _ = release_pairs
    return train_toy(judgement_corpus(pairs), tmp_path_factory.mktemp("toy") / "model", steps=TOY_STEPS, seed=0)


@pytest.fixture(scope="session")
def toy(toy_dir) -> LoadedModel:
    return load_model(toy_dir)


@pytest.fixture(scope="module")
def smollm2() -> LoadedModel:
    """The default model, converted from its GGUF file once per machine (cached by the file's sha256)."""
    return load_model(gguf_path(), batch_size=16)


@pytest.fixture(scope="session")
def evaluated(release, toy_dir, tmp_path_factory):
    """`builder eval run` with all three methods on the toy: (out dir, CLI result)."""
    from typer.testing import CliRunner

    from builder.cli import app

    out = tmp_path_factory.mktemp("eval-run") / "out"
    res = CliRunner().invoke(app, ["eval", "run", "--release", str(release), "--version", VERSION, "--model", str(toy_dir),
                                   "--methods", "direct,meta,neuro", "--batch-size", "16", "--out", str(out)],
                             catch_exceptions=False)
    return out, res


@pytest.fixture
def results_copy(evaluated, tmp_path) -> Path:
    out, res = evaluated
    assert res.exit_code == 0, res.output
    return Path(shutil.copytree(out, tmp_path / "results"))


class FirstMentionLM(torch.nn.Module):
    """A hand-built language model that prefers whatever was mentioned first.

    An induction head: the next token is copied from what followed earlier occurrences of the
    current context, longer matches weighted far more (exp(3 x match length, up to 8 tokens)) and,
    among equal matches, earlier ones more (exp(-0.02 x position)). Asked which of two listed words
    is right, it continues with the first one listed.
    """

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, input_ids, attention_mask=None, **_):
        B, T = input_ids.shape
        pos = torch.arange(T)
        logits = torch.empty(B, T, self.vocab_size)
        for b in range(B):
            ids = input_ids[b]
            same = (ids[:, None] == ids[None, :]) & (pos[None, :] < pos[:, None])
            match = torch.zeros(T, T)
            for t in range(T):
                match[t] = same[t].float()
                if t:
                    match[t, 1:] *= 1 + match[t - 1, :-1]
            w = torch.where(match > 0, torch.exp(3 * match.clamp(max=8) - 0.02 * pos[None, :]), torch.zeros(()))[:, : T - 1]
            probs = torch.full((T, self.vocab_size), 1e-6).scatter_add_(1, ids[1:][None, :].expand(T, T - 1), w)
            logits[b] = (probs / probs.sum(-1, keepdim=True)).log()
        return CausalLMOutput(logits=logits)


def first_mention_model(tokenizer) -> LoadedModel:
    info = ModelInfo(name="first-mention (hand-built)", source="local", revision=None, weights_sha256=None,
                     architecture="FirstMentionLM", n_params=0, n_layers=0, hidden_size=0, device="cpu",
                     dtype="float32", batch_size=16)
    return LoadedModel(FirstMentionLM(len(tokenizer)), tokenizer, info)
