"""Probing folds and the leak they close: hidden states that encode nothing but the concept a sentence is about."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evaluate.neuro import HiddenStore, fold_plan, probe, probe_sets

BLOCKS, PER_SIDE, HIDDEN, LAYERS = 8, 3, 64, 2


def concept_pairs() -> pd.DataFrame:
    """Pairs in blocks of PER_SIDE concepts that are always acceptable and PER_SIDE always unacceptable, every one of
    one side paired with every one of the other: a concept's identity predicts the label, and each concept occurs in
    PER_SIDE pairs, each with its own sentence."""
    rows = []
    for b in range(BLOCKS):
        for i in range(PER_SIDE):
            for j in range(PER_SIDE):
                good, bad = f"good{b}_{i}", f"bad{b}_{j}"
                rows.append({"lang": "en", "negative_type": "random", "property_id": f"prop{b}_{i}_{j}",
                             "acceptable_concept": good, "unacceptable_concept": bad,
                             "acceptable_sentence": f"A {good} is {b}{i}{j}.", "unacceptable_sentence": f"A {bad} is {b}{i}{j}."})
    return pd.DataFrame(rows)


def concept_store(pairs: pd.DataFrame, directory) -> HiddenStore:
    """Each sentence's state at every layer: its concept's random vector and a little noise, nothing about the label."""
    rng = np.random.default_rng(0)
    concepts = sorted({*pairs["acceptable_concept"], *pairs["unacceptable_concept"]})
    vector = dict(zip(concepts, rng.normal(size=(len(concepts), HIDDEN))))
    texts = [*pairs["acceptable_sentence"], *pairs["unacceptable_sentence"]]
    about = [*pairs["acceptable_concept"], *pairs["unacceptable_concept"]]
    directory.mkdir()
    store = HiddenStore(directory, texts, LAYERS, HIDDEN)
    for layer in range(LAYERS):
        states = np.stack([vector[c] for c in about]) + 0.1 * rng.normal(size=(len(texts), HIDDEN))
        store.path(layer).write_bytes(states.astype(np.float16).tobytes())
    return store


def test_concept_grouped_folds_close_the_leak_that_pair_grouped_folds_leave(tmp_path):
    pairs = concept_pairs()
    store = concept_store(pairs, tmp_path / "states")
    f1 = {}
    for group_by in ("concept", "pair"):
        (ps,) = probe_sets(pairs, store.row_of, group_by)
        plan = fold_plan(ps, 5)
        for fold in range(plan.k):  # no concept of a held-out sentence occurs in training under concept folds
            held, trained = (set(pd.concat([pairs["acceptable_concept"], pairs["unacceptable_concept"]])
                                 .iloc[ps.rows[plan.fold == fold if side else plan.fold != fold]]) for side in (True, False))
            assert (held & trained == set()) == (group_by == "concept")
        f1[group_by] = probe(store, ps, plan, 1.0, "probe").f1.mean()
    # Unseen concepts leave the probe nothing to go on; seen ones give the label away.
    assert f1["concept"] < 0.65 and f1["pair"] > 0.95, f1
    assert len(set(probe_sets(pairs, store.row_of, "concept")[0].groups)) == BLOCKS


def test_nested_cross_validation_needs_three_groups():
    pairs = concept_pairs()
    pairs = pairs[pairs["acceptable_concept"].str.startswith(("good0_", "good1_"))]
    (ps,) = probe_sets(pairs, {t: i for i, t in enumerate([*pairs["acceptable_sentence"], *pairs["unacceptable_sentence"]])})
    with pytest.raises(ValueError, match="2 group"):
        fold_plan(ps, 5)
