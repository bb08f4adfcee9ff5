"""Versioned relational schema (SQLAlchemy Core, so a PostgreSQL URL works unchanged)."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

SCHEMA_VERSION = 11  # 2: review projects and annotations (Label Studio); 3: sentence_reviews, m2c_tests, lexicon_forms,
# release_waivers; 4: review rows keyed by the Label Studio server's identity (column `server`), no longer by its URL;
# 5: llm_claims; 6: llm_endpoints, llm_calls.mode and .max_tokens, batches.failures;
# 7: table_reviews; 8: indexes on review_annotations (lang, stage) and sentence_pairs (lang); 9: flags.attempts;
# 10: review_annotations.withdrawn_at (annotations deleted in Label Studio); 11: the workspace's identity (meta
# `workspace_id`), which keeps its Label Studio projects apart from another workspace's on one server

OLDEST_MIGRATED = 4  # older workspaces keyed review rows by Label Studio's URL: only their server could re-key them

metadata = MetaData()

# schema_version, created_at, workspace_id (a random id made once, when the workspace is made or migrated to version 11)
meta = Table("meta", metadata, Column("key", String(64), primary_key=True), Column("value", Text, nullable=False))

languages = Table(
    "languages",
    metadata,
    Column("code", String(8), primary_key=True),
    Column("data", JSON, nullable=False),
    Column("added_at", DateTime(timezone=True), nullable=False),
)

concepts = Table(
    "concepts",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("english", Text, nullable=False),
    Column("category", Text),
    Column("source", Text, nullable=False),
)

properties = Table(
    "properties",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("english", Text, nullable=False),
    Column("phrase", Text, nullable=False),
    Column("source", Text, nullable=False),
)

pairs = Table(
    "pairs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("group_id", String(32), nullable=False, index=True),
    Column("property_id", String(32), ForeignKey("properties.id"), nullable=False, index=True),
    Column("acceptable_id", String(32), ForeignKey("concepts.id"), nullable=False),
    Column("unacceptable_id", String(32), ForeignKey("concepts.id"), nullable=False),
    Column("negative_type", String(16), nullable=False),
    Column("similarity", Float),
    Column("prefix_acceptable", Text, nullable=False),
    Column("prefix_unacceptable", Text, nullable=False),
    Column("source", Text, nullable=False),
)

seed_translations = Table(
    "seed_translations",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("item_id", String(32), nullable=False),
    Column("kind", String(10), nullable=False),
    Column("lang", String(8), nullable=False),
    Column("text", Text, nullable=False),
    Column("translator", Text, nullable=False),
    Column("source", Text, nullable=False),
    UniqueConstraint("item_id", "lang", "translator"),
)

llm_calls = Table(  # written by builder.llm.cache, as are llm_cache, llm_endpoints and batches
    "llm_calls",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("request_key", String(64), nullable=False, index=True),
    Column("model", Text, nullable=False),
    Column("prompt_hash", String(64), nullable=False),
    Column("stage", String(32), nullable=False),
    Column("lang", String(8)),
    Column("source", String(16), nullable=False),
    Column("tokens_in", Integer, nullable=False),
    Column("tokens_out", Integer, nullable=False),
    Column("latency_ms", Float, nullable=False),
    Column("cost_usd", Float),  # NULL: the model is not in the price table (reports count these as unknown)
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("mode", String(16)),  # the structured-output mode sent (builder.llm.modes), or "text"
    Column("max_tokens", Integer),
)

llm_endpoints = Table(  # the structured-output mode each endpoint and model accepts, found once
    "llm_endpoints",
    metadata,
    Column("endpoint", Text, primary_key=True),  # the base URL, redacted
    Column("model", Text, primary_key=True),
    Column("mode", String(16), nullable=False),
    Column("refusals", JSON, nullable=False),  # stronger mode -> the server's words refusing it
    Column("probed_at", DateTime(timezone=True), nullable=False),
)

llm_cache = Table(
    "llm_cache",
    metadata,
    Column("request_key", String(64), primary_key=True),
    Column("request", JSON, nullable=False),
    Column("response", JSON, nullable=False),
    Column("llm_call_id", String(40), ForeignKey("llm_calls.id"), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

llm_claims = Table(  # a request being sent by one worker; the others wait for its reply in llm_cache
    "llm_claims",
    metadata,
    Column("request_key", String(64), primary_key=True),
    Column("worker", String(32), nullable=False),  # the holding client's random token
    Column("host", Text, nullable=False),  # and its process, so that a dead one's claims on this host end at once
    Column("pid", Integer, nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),  # renewed before each attempt
)

proposals = Table(
    "proposals",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("item_id", String(32), nullable=False),
    Column("kind", String(10), nullable=False),
    Column("lang", String(8), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("text", Text, nullable=False),
    Column("alternatives", JSON, nullable=False),
    Column("note", Text, nullable=False),
    Column("ambiguous", Boolean, nullable=False),
    Column("llm_call_id", String(40), ForeignKey("llm_calls.id"), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("item_id", "lang", "revision"),
)

reviews = Table(
    "reviews",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("proposal_id", Integer, ForeignKey("proposals.id"), nullable=False),
    Column("decision", String(16), nullable=False),
    Column("final_text", Text),
    Column("reviewer", Text, nullable=False),
    Column("comment", Text, nullable=False, default=""),
    Column("channel", String(32), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

verified_words = Table(
    "verified_words",
    metadata,
    Column("item_id", String(32), primary_key=True),
    Column("lang", String(8), primary_key=True),
    Column("kind", String(10), nullable=False),
    Column("text", Text, nullable=False),
    Column("origin", String(16), nullable=False),
    Column("reviewer", Text),
    Column("proposal_id", Integer, ForeignKey("proposals.id")),
    Column("review_id", Integer, ForeignKey("reviews.id")),
    Column("seed_id", Integer, ForeignKey("seed_translations.id")),
    Column("verified_at", DateTime(timezone=True), nullable=False),
)

flags = Table(  # written by builder.flags
    "flags",
    metadata,
    Column("stage", String(16), primary_key=True),
    Column("item_id", String(32), primary_key=True),
    Column("lang", String(8), primary_key=True),
    Column("reason", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("attempts", Integer),  # runs of an LLM stage that gave up on the item (NULL: one, or not an LLM stage's flag)
)

sentence_pairs = Table(
    "sentence_pairs",
    metadata,
    Column("pair_id", String(32), ForeignKey("pairs.id"), primary_key=True),
    Column("lang", String(8), primary_key=True, index=True),  # read a language at a time; the key leads with the pair
    Column("acceptable", Text, nullable=False),
    Column("unacceptable", Text, nullable=False),
    Column("spans", JSON, nullable=False),
    Column("acceptable_form", Text, nullable=False),
    Column("unacceptable_form", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    Column("origin", String(16), nullable=False),
    Column("llm_call_id", String(40), ForeignKey("llm_calls.id")),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

batches = Table(
    "batches",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("stage", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("input_file_id", Text, nullable=False),
    Column("request_keys", JSON, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("collected_at", DateTime(timezone=True)),  # NULL while the batch is open
    Column("failures", JSON),  # request key -> {"reason", "final"} for the lines that came back without a reply
)

review_projects = Table(
    "review_projects",
    metadata,
    Column("stage", String(16), primary_key=True),
    Column("lang", String(8), primary_key=True),
    Column("project_id", Integer, nullable=False),
    Column("title", Text, nullable=False),
    Column("server", Text, nullable=False),  # the server's identity (`annotation.server`), never its URL
)

review_annotations = Table(
    "review_annotations",
    metadata,
    Column("annotation_id", Integer, primary_key=True, autoincrement=False),  # Label Studio's id
    Column("server", Text, primary_key=True),  # which server: its identity, as in review_projects
    Column("stage", String(16), nullable=False),
    Column("lang", String(8), nullable=False),
    Column("item_id", String(32), nullable=False, index=True),
    Column("proposal_id", Integer, ForeignKey("proposals.id")),
    Column("task_id", Integer, nullable=False),
    Column("decision", String(16)),
    Column("final_text", Text),
    Column("comment", Text, nullable=False),
    Column("reviewer", Text, nullable=False),
    Column("cancelled", Boolean, nullable=False),
    Column("lead_time_s", Float),
    Column("edit_distance", Integer),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # When a pull found the annotation gone from Label Studio (deleted there): it no longer counts; the row stays
    # for lineage. NULL while it is there.
    Column("withdrawn_at", DateTime(timezone=True)),
    Index("ix_review_annotations_lang_stage", "lang", "stage"),  # every review query is for a stage in a language
)

sentence_reviews = Table(
    "sentence_reviews",
    metadata,
    # The sentence-specific half of a `review_annotations` row (same key): which version of the pair the
    # curator saw, fixed at the first pull, and the sentences they left.
    Column("annotation_id", Integer, primary_key=True, autoincrement=False),
    Column("server", Text, primary_key=True),
    Column("pair_id", String(32), ForeignKey("pairs.id"), nullable=False, index=True),
    Column("lang", String(8), nullable=False),
    Column("version", String(16), nullable=False),
    Column("acceptable", Text, nullable=False),
    Column("unacceptable", Text, nullable=False),
)

table_reviews = Table(
    "table_reviews",
    metadata,
    # The inflection-specific half of a `review_annotations` row (same key): which version of the lemma's
    # proposed table the curator saw, fixed at the first pull.
    Column("annotation_id", Integer, primary_key=True, autoincrement=False),
    Column("server", Text, primary_key=True),
    Column("lang", String(8), nullable=False),
    Column("lemma", Text, nullable=False),
    Column("version", String(16), nullable=False),
)

m2c_tests = Table(
    "m2c_tests",
    metadata,
    Column("test_id", String(40), primary_key=True),  # stable: hash of lang, template id, rendered text
    Column("lang", String(8), nullable=False, index=True),
    Column("capability", String(32), nullable=False),   # negation, numerals, spatial, temporal, comparatives, or a language feature
    Column("template_id", Text, nullable=False),        # e.g. "de/negation#0"
    Column("context", Text, nullable=False),
    Column("question", Text, nullable=False),
    Column("answer", Text, nullable=False),
    Column("alternatives", JSON, nullable=False),       # list[str] other accepted answers
    Column("answer_forms", JSON, nullable=False),       # list[str] other inflected forms of the gold lexeme (morphological-error detection)
    Column("fills", JSON, nullable=False),              # {placeholder: {"lemma":…, "form":…, "features":{…}}}
    Column("verified", Boolean, nullable=False),        # every lexicon fill it uses was verified by a curator (inline template values count as verified)
    Column("created_at", DateTime(timezone=True), nullable=False),
)

lexicon_forms = Table(  # M2C inflection tables: one form per lemma and feature bundle
    "lexicon_forms",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("lang", String(8), nullable=False),
    Column("lemma", Text, nullable=False),
    Column("pos", String(16), nullable=False),  # UniMorph part of speech (N, V, ADJ...), "" when not given
    Column("features", Text, nullable=False),  # canonical bundle in the language's dimension order, e.g. "SG.GEN"
    Column("form", Text, nullable=False),
    Column("status", String(16), nullable=False),  # proposed | verified | rejected
    Column("source", Text, nullable=False),  # "unimorph:<file>:<line>" | "llm" | "curator"
    Column("llm_call_id", String(40), ForeignKey("llm_calls.id")),
    Column("proposed_form", Text),  # what the LLM proposed, when a curator corrected it
    Column("reviewer", Text),
    Column("comment", Text, nullable=False, default=""),
    Column("verified_at", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("lang", "lemma", "pos", "features"),
)

release_waivers = Table(
    "release_waivers",
    metadata,
    Column("kind", String(8), primary_key=True),  # "pair" (a minimal pair in one language) or "m2c" (an M2C test)
    Column("item_id", String(40), primary_key=True),  # pair id or M2C test id
    Column("lang", String(8), primary_key=True),
    Column("reason", Text, nullable=False),
    Column("waived_by", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)
