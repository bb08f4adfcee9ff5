"""Evaluation of models on a released version: direct, meta, neuro, consistency, self-translation, M2C QA, reports, gates."""

# The package's public names are its modules (imported by name, e.g. `from evaluate import answers`).
__all__ = [
    "answers", "backends", "consistency", "data", "decision_agreement", "direct", "endpoint_scoring",
    "gates", "gguf", "m2c", "meta", "methods", "models", "neuro", "page", "quality",
    "report", "results", "run", "scoring", "selftranslate", "store", "suite", "suite_run", "toy"
]
