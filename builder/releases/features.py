"""The documented schema of a release: `datasets` features for minimal-pair and M2C configs."""

from __future__ import annotations

from datasets import ClassLabel, Features, List, Value

from builder.records import NEGATIVE_TYPES

M2C_PREFIX = "m2c_"

PAIR_FEATURES = Features({
    "pair_id": Value("string"),
    "lang": Value("string"),
    "property_id": Value("string"),
    "property": Value("string"),
    "property_en": Value("string"),
    "acceptable_concept": Value("string"),
    "unacceptable_concept": Value("string"),
    "acceptable_concept_en": Value("string"),
    "unacceptable_concept_en": Value("string"),
    "category": Value("string"),
    "negative_type": ClassLabel(names=list(NEGATIVE_TYPES)),
    "similarity": Value("float64"),
    "acceptable_sentence": Value("string"),
    "unacceptable_sentence": Value("string"),
    "property_span": List(Value("int32"), length=2),
    "acceptable_concept_span": List(Value("int32"), length=2),
    "unacceptable_concept_span": List(Value("int32"), length=2),
    "review_status": Value("string"),
    "n_reviewers": Value("int32"),
    "corrected": Value("bool"),
    "sentence_origin": Value("string"),
    "sentence_review": Value("string"),
})

M2C_FEATURES = Features({
    "test_id": Value("string"),
    "lang": Value("string"),
    "capability": Value("string"),
    "template_id": Value("string"),
    "context": Value("string"),
    "question": Value("string"),
    "answer": Value("string"),
    "alternatives": List(Value("string")),
    "answer_forms": List(Value("string")),
})

COLUMN_DOCS = {
    "pair_id": "the pair's id, the same in every language (derived from the English COMPS source)",
    "lang": "language code",
    "property_id": "the property's id, the same in every language",
    "property": "the property in this language (verified word)",
    "property_en": "the property in English (COMPS)",
    "acceptable_concept": "the concept the property holds for, in this language",
    "unacceptable_concept": "the concept it does not hold for, in this language",
    "acceptable_concept_en": "the acceptable concept in English",
    "unacceptable_concept_en": "the unacceptable concept in English",
    "category": "category of the acceptable concept",
    "negative_type": "how the unacceptable concept was chosen: " + ", ".join(NEGATIVE_TYPES),
    "similarity": "cosine similarity of the two English concept names under all-MiniLM-L6-v2 (null when not computed)",
    "acceptable_sentence": "the true sentence",
    "unacceptable_sentence": "the false sentence, identical outside the concept",
    "property_span": "[start, end) character offsets of the property in acceptable_sentence (null when unknown)",
    "acceptable_concept_span": "[start, end) character offsets of the acceptable concept in acceptable_sentence",
    "unacceptable_concept_span": "[start, end) character offsets of the unacceptable concept in unacceptable_sentence",
    "review_status": "verified (every word checked by a curator or expert), waived (released with a recorded reason), source (English COMPS)",
    "n_reviewers": "curators who checked the least-reviewed word of the row (0 for the English source)",
    "corrected": "whether a curator corrected any of the row's LLM-proposed words, or its sentences",
    "sentence_origin": "who wrote the sentences as released: comps (the English source), llm, or curator (a curator "
                       "fixed them, or wrote what the LLM could not)",
    "sentence_review": "the Label Studio annotation that settled the sentences (server identity and annotation id); "
                       "null when no curator reviewed them",
    "test_id": "the M2C test's id (hash of language, template and rendered text)",
    "capability": "what the test probes: negation, numerals, spatial, temporal, comparatives, or a language feature",
    "template_id": "the template the test was rendered from",
    "context": "the passage",
    "question": "the question about the passage",
    "answer": "the gold answer",
    "alternatives": "other accepted answers",
    "answer_forms": "other inflected forms of the gold lexeme (to tell morphological errors apart)",
}


def is_m2c(config: str) -> bool:
    return config.startswith(M2C_PREFIX)


def features_for(config: str) -> Features:
    return M2C_FEATURES if is_m2c(config) else PAIR_FEATURES


def id_column(config: str) -> str:
    return "test_id" if is_m2c(config) else "pair_id"
