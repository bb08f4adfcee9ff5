"""The platform's sentence scores against lm-evaluation-harness (HF backend, through the release's exported task
files) and minicons (summed, with BOS), on the demo release, for the toy and for SmolLM2-135M-Instruct: every sentence
within 1e-3 nats, every decision identical; and a changed convention (the BOS moved, the first token dropped) is
caught."""

from __future__ import annotations

import pytest
from eval_fixtures import VERSION

from builder.default_model import gguf_path
from builder.releases.lmeval import export_lm_eval
from builder.testing.parity import compare, ensure_environment, lm_eval_sentence_scores, run_references
from evaluate.gguf import converted
from evaluate.models import load_model
from evaluate.scoring import Scorer

# SmolLM2's setup runs three scorers (ours, lm-eval, minicons): minutes on two idle cores, past ten on busy ones.
pytestmark = pytest.mark.timeout(1800)
BATCH = 16
SMOL_DOCS = 40  # per language: a fifth of the release keeps SmolLM2's three runs to minutes on two cores


def platform_scores(loaded, sentences: list[str], bos: str = "auto") -> tuple[dict[str, float], Scorer]:
    scorer = Scorer(loaded, bos)
    scored = scorer.score([("", s) for s in sentences])
    return {s: float(scored[("", s)].logprobs.astype("float64").sum()) for s in sentences}, scorer


@pytest.fixture(scope="module")
def tasks(release, tmp_path_factory):
    files = export_lm_eval(release, VERSION, tmp_path_factory.mktemp("lm-eval") / "tasks")
    return files[0].parent, sorted(p.stem for p in files if not p.stem.startswith("_"))


@pytest.fixture(scope="module", params=["toy", "SmolLM2-135M-Instruct"])
def scored(request, release_pairs, tasks):
    """(name, pairs, platform scores, lm-eval's, minicons's, the loaded model) for one model."""
    ensure_environment()
    pairs, _ = release_pairs
    if request.param == "toy":
        folder, limit = request.getfixturevalue("toy_dir"), None
    else:
        folder, limit = converted(gguf_path())[0], SMOL_DOCS
        pairs = pairs.groupby("lang").head(SMOL_DOCS)  # the tasks' first documents: the release's row order
    loaded = load_model(folder, batch_size=BATCH)
    sentences = list(dict.fromkeys([*pairs["acceptable_sentence"], *pairs["unacceptable_sentence"]]))
    ours, scorer = platform_scores(loaded, sentences)
    tasks_dir, names = tasks
    refs = run_references(["lm_eval_tasks", "minicons"], model=folder, bos_token=scorer.setup.bos_token,
                          bos_id=scorer.bos_id, batch_size=BATCH, sentences=sentences, tasks_dir=tasks_dir, tasks=names,
                          limit=limit)
    lm_eval = lm_eval_sentence_scores(refs["lm_eval_tasks"]["docs"], pairs)
    return request.param, pairs, ours, lm_eval, dict(zip(sentences, refs["minicons"]["scores"])), loaded


def test_every_sentence_and_decision_agrees_with_lm_eval_and_minicons(scored):
    name, pairs, ours, lm_eval, minicons, _ = scored
    for tool, theirs in (("lm-eval", lm_eval), ("minicons", minicons)):
        parity = compare(tool, ours, theirs, pairs)
        print(f"{name} vs {tool}: {parity.n_sentences} sentences, max |d| {parity.max_abs_diff:.2e} nats, "
              f"{parity.n_pairs - parity.decisions_differing}/{parity.n_pairs} decisions identical")
        assert parity.ok, parity.worst


@pytest.mark.parametrize("scored", ["toy"], indirect=True)  # the conventions are the same for every model
def test_moving_the_bos_or_dropping_the_first_token_breaks_parity(scored):
    _, pairs, _, lm_eval, _, loaded = scored
    sentences = list(lm_eval)
    moved, _ = platform_scores(loaded, sentences, bos=loaded.tokenizer.eos_token)
    dropped, _ = platform_scores(loaded, sentences, bos="none")
    for changed in (moved, dropped):
        parity = compare("lm-eval", changed, lm_eval, pairs)
        assert parity.max_abs_diff > 0.5 and parity.decisions_differing > 0 and not parity.ok
