"""Evaluation of models on a released version: direct, meta, neuro, consistency, self-translation, M2C QA, reports, gates."""
