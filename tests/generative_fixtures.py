"""Session fixtures for the generative methods: a release with M2C tests, a small subset, a toy that learnt answers.

The release is the demo's (replayed stages) plus M2C tests rendered from the shipped German, Chinese
and English templates (inline values only, so every fill counts as verified), published by the
real `publish`. The toy is trained once on what the generative methods ask: the zero-shot M2C
prompts of one German test per template followed by their gold answers, the paper's translation prompt for the
subset's English sentences followed by the released German sentence, and the judgement corpus.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from sample_workspace import build_sample_release

from evaluate.data import load_release
from evaluate.m2c import prompt_words, zero_shot
from evaluate.selftranslate import source_prompts
from evaluate.toy import judgement_corpus, train_toy

os.environ.setdefault("HF_HUB_OFFLINE", "1")
VERSION = "1.0.0"
LANGS = ["de", "en", "zh"]
N_PAIRS = 8
TOY_STEPS = 400


@pytest.fixture(scope="session")
def m2c_release(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("m2c-release")
    return build_sample_release(root, VERSION, m2c_langs=tuple(LANGS), m2c_n=3)


@pytest.fixture(scope="session")
def subset(m2c_release):
    """(pairs of N_PAIRS pair ids in de, en, zh; dataset info; M2C tests of de, en, zh)."""
    data = load_release(m2c_release, VERSION, LANGS, m2c=True)
    keep = sorted(data.pairs["pair_id"].unique())[:N_PAIRS]
    return data.pairs[data.pairs["pair_id"].isin(keep)].reset_index(drop=True), data.dataset, data.m2c


def learnt_tests(m2c: pd.DataFrame) -> pd.DataFrame:
    """The M2C tests whose answers the toy is taught: the first German test of each template."""
    return m2c[m2c["lang"] == "de"].sort_values("test_id").groupby("template_id").head(1)


@pytest.fixture(scope="session")
def taught_toy_dir(subset, tmp_path_factory) -> Path:
    pairs, _, m2c = subset
    words = prompt_words()
    qa = [f"{zero_shot(words[r['lang']], r)} {r['answer']}\n" for r in learnt_tests(m2c).to_dict("records")]
    en, de = (pairs[pairs["lang"] == x].set_index("pair_id") for x in ("en", "de"))
    translate = source_prompts()["en"].translate
    translations = [f"{translate.format(language='German', text=en.at[pid, col])}{de.at[pid, col]}\n"
                    for pid in en.index for col in ("acceptable_sentence", "unacceptable_sentence")]
    texts = qa * 4 + translations * 4 + judgement_corpus(pairs)
    return train_toy(texts, tmp_path_factory.mktemp("taught-toy") / "model", steps=TOY_STEPS, seed=0, batch_size=16)


def report_row(html: str, setting: str) -> str:
    """The settings table's row for `setting`, as the HTML report has it; it must hold two cells."""
    row = html.split(f"<tr>\n<td>{setting}</td>", 1)[1].split("</tr>", 1)[0]
    assert row.count("<td>") == 1, row  # nothing in the value split the cell
    return row
