"""The probe solver against scikit-learn: every fit's decision values equal those of StandardScaler fitted on the
fit's training rows followed by LogisticRegression(C) with the same sample weights, in both of the solver's regimes
(more training rows than features, and fewer)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from evaluate import neuro


def probe_problem(n: int, d: int, layers: int, seed: int):
    """Float16-rounded states with a weak label direction, a constant column and per-sample weights; a fold plan of
    five outer fits and their inner fits (the plan `fold_plan` makes, from plain folds)."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2
    states = []
    for _ in range(layers):
        X = rng.normal(size=(n, d)) * rng.uniform(0.5, 3.0, size=d) + rng.normal(size=d)
        X[:, 0] += 0.8 * (2 * labels - 1)
        X[:, 1] = 2.5  # constant: centred, left unscaled
        states.append(X.astype(np.float16).astype(np.float32))
    weights = rng.integers(1, 4, size=n).astype(np.float64)
    fold = rng.permutation(n) % 5
    train = [fold != o for o in range(5)] + [(fold != i) & (fold != o) for o in range(5) for i in range(5) if i != o]
    return states, np.array(train), labels, weights


def sklearn_decisions(states, train, labels, weights, C):
    out = np.empty((len(states), len(train), len(labels)))
    for layer, X in enumerate(states):
        for f, rows in enumerate(train):
            scaler = StandardScaler().fit(X[rows].astype(np.float64))
            model = LogisticRegression(C=C, tol=1e-12, max_iter=100_000)
            model.fit(scaler.transform(X[rows].astype(np.float64)), labels[rows], sample_weight=weights[rows])
            out[layer, f] = model.decision_function(scaler.transform(X.astype(np.float64)))
    return out


@pytest.mark.parametrize(("n", "d"), [(400, 12), (60, 90)], ids=["rows>features", "rows<features"])
def test_probe_decisions_equal_scikit_learn(n, d):
    states, train, labels, weights = probe_problem(n, d, layers=2, seed=n)
    ours = neuro.probe_decisions(states, train, labels, weights, C=0.5)
    theirs = sklearn_decisions(states, train, labels, weights, C=0.5)
    assert ours.shape == theirs.shape == (2, 25, n)
    assert np.abs(ours - theirs).max() < 1e-4 * max(1.0, np.abs(theirs).max())
    assert ((ours > 0) == (theirs > 0)).mean() > 0.999
