"""Workspace → release rows: one config per language for minimal pairs, one per language for M2C.

A language's minimal pairs are its sentence pairs with status "generated" (English: the COMPS source
sentences), joined with the pair, its property and concepts, and the verified words in that language.
Rows are read in a few bulk queries and kept column-wise, so a 250,000-pair release stays fast.

A row is *verified* when each of its three words is a verified word (an expert seed or a curator's
decision) that was not changed after the sentence was written; otherwise it needs a waiver.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import pyarrow as pa
from sqlalchemy import and_, func, select

from builder.languages import SOURCE_LANGUAGE
from builder.records import NEGATIVE_TYPES
from builder.releases.features import M2C_FEATURES, M2C_PREFIX, PAIR_FEATURES
from builder.releases.waivers import waivers
from builder.workspace import schema as t
from builder.workspace.store import Workspace

_NEG_INDEX = {name: i for i, name in enumerate(NEGATIVE_TYPES)}
_WORDS = ("property", "acceptable concept", "unacceptable concept")


@dataclass
class ConfigRows:
    """One config's rows, column-wise, with what the release checks need beside them."""

    config: str
    lang: str
    columns: dict[str, list]
    unverified: dict[int, str] = field(default_factory=dict)  # row index -> why it is neither verified nor waived
    waived: dict[int, str] = field(default_factory=dict)  # row index -> the waiver's reason
    concept_spans: list[tuple | None] = field(default_factory=list)  # pairs: (a0, a1, u0, u1)
    call_ids: list[str | None] = field(default_factory=list)

    @property
    def is_m2c(self) -> bool:
        return self.config.startswith(M2C_PREFIX)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def ids(self) -> list[str]:
        return self.columns["test_id" if self.is_m2c else "pair_id"]

    def without(self, drop: set[int]) -> "ConfigRows":
        keep = [i for i in range(len(self)) if i not in drop]
        remap = {old: new for new, old in enumerate(keep)}
        return ConfigRows(
            self.config, self.lang, {k: [v[i] for i in keep] for k, v in self.columns.items()},
            {remap[i]: r for i, r in self.unverified.items() if i in remap},
            {remap[i]: r for i, r in self.waived.items() if i in remap},
            [self.concept_spans[i] for i in keep] if self.concept_spans else [],
            [self.call_ids[i] for i in keep] if self.call_ids else [],
        )

    def table(self) -> pa.Table:
        features = M2C_FEATURES if self.is_m2c else PAIR_FEATURES
        return pa.Table.from_pydict({k: self.columns[k] for k in features}, schema=features.arrow_schema)


def _word_provenance(ws: Workspace, langs: list[str]) -> dict[tuple[str, str], tuple[int, bool]]:
    """(item, lang) -> (curators who checked the word, whether a curator corrected the LLM's proposal)."""
    vw, rv, pr, ra = t.verified_words, t.reviews, t.proposals, t.review_annotations
    seeds = {
        (r["item_id"], r["lang"]): r["n"]
        for r in ws.rows(select(t.seed_translations.c.item_id, t.seed_translations.c.lang,
                                func.count(func.distinct(t.seed_translations.c.translator)).label("n"))
                         .where(t.seed_translations.c.lang.in_(langs))
                         .group_by(t.seed_translations.c.item_id, t.seed_translations.c.lang))
    }
    annotators = {
        r["proposal_id"]: r["n"]
        for r in ws.rows(select(ra.c.proposal_id, func.count(func.distinct(ra.c.reviewer)).label("n"))
                         .where(ra.c.lang.in_(langs), ra.c.cancelled.is_(False), ra.c.decision.is_not(None))
                         .group_by(ra.c.proposal_id))
    }
    out: dict[tuple[str, str], tuple[int, bool]] = {}
    stmt = (select(vw.c.item_id, vw.c.lang, vw.c.origin, vw.c.proposal_id, rv.c.decision, rv.c.final_text,
                   pr.c.text.label("proposed"))
            .select_from(vw.outerjoin(rv, rv.c.id == vw.c.review_id).outerjoin(pr, pr.c.id == vw.c.proposal_id))
            .where(vw.c.lang.in_(langs)))
    with ws.engine.connect() as conn:
        for item, lang, origin, proposal_id, decision, final, proposed in conn.execute(stmt):
            if origin == "source":
                out[(item, lang)] = (0, False)
            elif origin == "seed":
                out[(item, lang)] = (max(1, seeds.get((item, lang), 0)), False)
            else:
                corrected = decision == "corrected" or (final is not None and proposed is not None and final != proposed)
                out[(item, lang)] = (max(1, annotators.get(proposal_id, 0)), corrected)
    return out


def _pair_query(langs: list[str]):
    sp, p, pr = t.sentence_pairs, t.pairs, t.properties
    ca, cu = t.concepts.alias("ca"), t.concepts.alias("cu")
    wp, wa, wu = (t.verified_words.alias(n) for n in ("wp", "wa", "wu"))

    def word(alias, item_col):
        return alias, and_(alias.c.item_id == item_col, alias.c.lang == sp.c.lang)

    def span(key, i):
        return sp.c.spans[(key, i)].as_integer()

    joined = sp.join(p, p.c.id == sp.c.pair_id).join(pr, pr.c.id == p.c.property_id)
    joined = joined.join(ca, ca.c.id == p.c.acceptable_id).join(cu, cu.c.id == p.c.unacceptable_id)
    for alias, cond in (word(wp, p.c.property_id), word(wa, p.c.acceptable_id), word(wu, p.c.unacceptable_id)):
        joined = joined.outerjoin(alias, cond)
    return (
        select(
            sp.c.pair_id, sp.c.lang, p.c.property_id, wp.c.text, pr.c.english, wa.c.text, wu.c.text,
            ca.c.english, cu.c.english, ca.c.category, p.c.negative_type, p.c.similarity,
            sp.c.acceptable, sp.c.unacceptable,
            span("acceptable_property", 0), span("acceptable_property", 1),
            span("acceptable_concept", 0), span("acceptable_concept", 1),
            span("unacceptable_concept", 0), span("unacceptable_concept", 1),
            p.c.acceptable_id, p.c.unacceptable_id, wp.c.origin, wa.c.origin, wu.c.origin,
            wp.c.verified_at > sp.c.created_at, wa.c.verified_at > sp.c.created_at, wu.c.verified_at > sp.c.created_at,
            sp.c.llm_call_id,
        )
        .select_from(joined)
        .where(sp.c.status == "generated", sp.c.lang.in_(langs))
        .order_by(sp.c.lang, sp.c.pair_id)
    )


def pair_rows(ws: Workspace, langs: list[str]) -> dict[str, ConfigRows]:
    provenance = _word_provenance(ws, langs)
    waived = waivers(ws)
    out: dict[str, ConfigRows] = {}
    with ws.engine.connect() as conn:
        result = conn.execute(_pair_query(langs))
        for row in result:
            (pid, lang, prop_id, prop, prop_en, acc, unacc, acc_en, unacc_en, category, neg, sim, sa, su,
             ap0, ap1, ac0, ac1, uc0, uc1, acc_id, unacc_id, o_p, o_a, o_u, st_p, st_a, st_u, call_id) = row
            rows = out.get(lang)
            if rows is None:
                rows = out[lang] = ConfigRows(lang, lang, {k: [] for k in PAIR_FEATURES})
            c = rows.columns
            i = len(c["pair_id"])
            words = ((prop_id, o_p, st_p), (acc_id, o_a, st_a), (unacc_id, o_u, st_u))
            why = [f"{kind} {item} has no verified word in {lang}" if origin is None
                   else f"{kind} {item} was re-verified after the sentence was written (regenerate it)" if stale
                   else "" for kind, (item, origin, stale) in zip(_WORDS, words)]
            why = "; ".join(w for w in why if w)
            prov = [provenance.get((item, lang), (0, False)) for item, _, _ in words]
            if lang == SOURCE_LANGUAGE and not why:
                status = "source"
            elif not why:
                status = "verified"
            elif ("pair", pid, lang) in waived:
                status = "waived"
                rows.waived[i] = waived[("pair", pid, lang)]
            else:
                status = "unverified"
                rows.unverified[i] = why
            for k, v in (("pair_id", pid), ("lang", lang), ("property_id", prop_id), ("property", prop),
                         ("property_en", prop_en), ("acceptable_concept", acc), ("unacceptable_concept", unacc),
                         ("acceptable_concept_en", acc_en), ("unacceptable_concept_en", unacc_en),
                         ("category", category), ("negative_type", _NEG_INDEX.get(neg, -1)), ("similarity", sim),
                         ("acceptable_sentence", sa), ("unacceptable_sentence", su),
                         ("property_span", None if ap0 is None or ap1 is None else [ap0, ap1]),
                         ("review_status", status), ("n_reviewers", min(n for n, _ in prov)),
                         ("corrected", any(cor for _, cor in prov))):
                c[k].append(v)
            rows.concept_spans.append(None if None in (ac0, ac1, uc0, uc1) else (ac0, ac1, uc0, uc1))
            rows.call_ids.append(call_id)
    return out


def m2c_rows(ws: Workspace, langs: list[str]) -> dict[str, ConfigRows]:
    waived = waivers(ws)
    m = t.m2c_tests
    out: dict[str, ConfigRows] = {}
    stmt = (select(m.c.test_id, m.c.lang, m.c.capability, m.c.template_id, m.c.context, m.c.question, m.c.answer,
                   m.c.alternatives, m.c.answer_forms, m.c.verified)
            .where(m.c.lang.in_(langs)).order_by(m.c.lang, m.c.test_id))
    for r in ws.rows(stmt):
        config = M2C_PREFIX + r["lang"]
        rows = out.get(config)
        if rows is None:
            rows = out[config] = ConfigRows(config, r["lang"], {k: [] for k in M2C_FEATURES})
        i = len(rows)
        if not r["verified"]:
            key = ("m2c", r["test_id"], r["lang"])
            if key in waived:
                rows.waived[i] = waived[key]
            else:
                rows.unverified[i] = f"M2C test {r['test_id']} uses fills no curator has verified"
        for k in M2C_FEATURES:
            rows.columns[k].append(r[k])
    return out


def languages_with_data(ws: Workspace) -> list[str]:
    sp, m = t.sentence_pairs, t.m2c_tests
    langs = {r["lang"] for r in ws.rows(select(sp.c.lang).where(sp.c.status == "generated").distinct())}
    langs |= {r["lang"] for r in ws.rows(select(m.c.lang).distinct())}
    return sorted(langs)


def models_used(ws: Workspace, configs: dict[str, ConfigRows]) -> list[dict]:
    """LLM models behind the released rows: sentence generation, and the proposals behind verified words."""
    calls = {r["id"]: (r["model"], r["stage"]) for r in ws.rows(select(t.llm_calls.c.id, t.llm_calls.c.model, t.llm_calls.c.stage))}
    counts: Counter = Counter()
    used_calls: set[str] = set()
    for rows in configs.values():
        used_calls.update(c for c in rows.call_ids if c)
    for cid in used_calls:
        if cid in calls:
            counts[calls[cid]] += 1
    langs = sorted({rows.lang for rows in configs.values() if not rows.is_m2c})
    vw, pr = t.verified_words, t.proposals
    word_calls = ws.rows(select(pr.c.llm_call_id).distinct().select_from(vw.join(pr, pr.c.id == vw.c.proposal_id))
                         .where(vw.c.lang.in_(langs)))
    for r in word_calls:
        if r["llm_call_id"] in calls:
            counts[calls[r["llm_call_id"]]] += 1
    by_model: dict[str, dict[str, int]] = defaultdict(dict)
    for (model, stage), n in counts.items():
        by_model[model][stage] = n
    return [{"model": m, "calls": dict(sorted(s.items()))} for m, s in sorted(by_model.items())]
