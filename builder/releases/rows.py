"""Workspace → release rows: one config per language for minimal pairs, one per language for M2C.

A language's minimal pairs are its sentence pairs (English: the COMPS source sentences), joined with the
pair, its property and concepts, and the verified words in that language. Rows are read in a few bulk
queries and kept column-wise, so a 250,000-pair release stays fast.

A row is *verified* when each of its three words is a verified word (an expert seed or a curator's
decision) that was not changed after the sentence was written (or after a curator settled the sentences);
otherwise it needs a waiver. Where curators reviewed the sentences themselves, their settled decision
applies: accepted and fixed sentences are released as the curators left them, with the annotation that
settled them as lineage, and with spans and concept words found in them again (`builder.audits.curated`:
a curator who writes "बस" where the verified word is "bus" releases "बस"); rejected ones wait for
regeneration like unverified rows, and sentences whose curators disagree wait for an adjudicator. A pair
the LLM could not write (flagged) is released once a curator has written it; until then it is no row,
and coverage counts it with the command that gets it written.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from operator import itemgetter

import pyarrow as pa
from sqlalchemy import func, select

from builder.audits.curated import settled_pair
from builder.audits.occurrence import occurrences
from builder.languages import SOURCE_LANGUAGE, registry
from builder.llm.served import model_label
from builder.records import NEGATIVE_TYPES
from builder.releases.features import M2C_FEATURES, M2C_PREFIX, PAIR_FEATURES
from builder.releases.waivers import waivers
from builder.review_stages import review_stage
from builder.reviews import (
    DecisionLineage,
    Opinion,
    SentenceReview,
    disagreements,
    sentence_decisions,
    sentence_lineage,
)
from builder.selection import stale_pairs
from builder.workspace import schema as t
from builder.workspace.store import Workspace, collector_paused

_NEG_INDEX = {name: i for i, name in enumerate(NEGATIVE_TYPES)}
_WORDS = ("property", "acceptable concept", "unacceptable concept")
# What to do about sentences a curator left that cannot be released as they are.
FIX_IN_LABEL_STUDIO = ("correct them in Label Studio (edit the annotation, then `builder review pull`), or reject them "
                       "there to have them written again (`builder review repropose --stage sentences -l {lang}`)")


@dataclass
class ConfigRows:
    """One config's rows, column-wise, with what the release checks need beside them."""

    config: str
    lang: str
    columns: dict[str, list]
    unverified: dict[int, str] = field(default_factory=dict)  # row index -> why it is neither verified nor waived
    waived: dict[int, str] = field(default_factory=dict)  # row index -> the waiver's reason
    concept_spans: list[tuple] = field(default_factory=list)  # pairs: (a0, a1, u0, u1), each may be None
    concept_forms: list[tuple[str, str]] = field(default_factory=list)  # pairs: the concepts' forms in the sentences
    call_ids: list[str | None] = field(default_factory=list)
    curated: set[int] = field(default_factory=set)  # rows whose sentences and spans are as curators left them
    unwritten: dict[str, str] = field(default_factory=dict)  # pair id -> why the LLM could not write it (no row)

    @property
    def is_m2c(self) -> bool:
        return self.config.startswith(M2C_PREFIX)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def ids(self) -> list[str]:
        return self.columns["test_id" if self.is_m2c else "pair_id"]

    def without(self, drop: set[int]) -> ConfigRows:
        keep = [i for i in range(len(self)) if i not in drop]
        remap = {old: new for new, old in enumerate(keep)}
        return ConfigRows(
            self.config, self.lang, {k: [v[i] for i in keep] for k, v in self.columns.items()},
            {remap[i]: r for i, r in self.unverified.items() if i in remap},
            {remap[i]: r for i, r in self.waived.items() if i in remap},
            [self.concept_spans[i] for i in keep] if self.concept_spans else [],
            [self.concept_forms[i] for i in keep] if self.concept_forms else [],
            [self.call_ids[i] for i in keep] if self.call_ids else [],
            {remap[i] for i in self.curated if i in remap}, self.unwritten,
        )

    def table(self) -> pa.Table:
        features = M2C_FEATURES if self.is_m2c else PAIR_FEATURES
        return pa.Table.from_pydict({k: self.columns[k] for k in features}, schema=features.arrow_schema)


def _words(ws: Workspace, langs: list[str]) -> dict[str, dict[str, tuple[str, str, int, bool]]]:
    """lang -> item -> (verified text, origin, curators who checked it, whether a curator corrected the LLM's proposal)."""
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
    out: dict[str, dict[str, tuple[str, str, int, bool]]] = {lang: {} for lang in langs}
    stmt = (select(vw.c.item_id, vw.c.lang, vw.c.text, vw.c.origin, vw.c.proposal_id, rv.c.decision, rv.c.final_text,
                   pr.c.text.label("proposed"))
            .select_from(vw.outerjoin(rv, rv.c.id == vw.c.review_id).outerjoin(pr, pr.c.id == vw.c.proposal_id))
            .where(vw.c.lang.in_(langs)))
    with ws.engine.connect() as conn:
        for item, lang, text, origin, proposal_id, decision, final, proposed in conn.execute(stmt):
            if origin == "source":
                out[lang][item] = (text, origin, 0, False)
            elif origin == "seed":
                out[lang][item] = (text, origin, max(1, seeds.get((item, lang), 0)), False)
            else:
                corrected = decision == "corrected" or (final is not None and proposed is not None and final != proposed)
                out[lang][item] = (text, origin, max(1, annotators.get(proposal_id, 0)), corrected)
    return out


def _span(key: str, i: int):
    return t.sentence_pairs.c.spans[(key, i)].as_integer()


def pair_rows(ws: Workspace, langs: list[str]) -> dict[str, ConfigRows]:
    """Column-wise: one scan of the sentences, joined with pairs, concepts and words in memory."""
    with collector_paused():  # millions of small tuples and lists, none in a reference cycle
        return _pair_rows(ws, langs)


def _pair_rows(ws: Workspace, langs: list[str]) -> dict[str, ConfigRows]:
    sp = t.sentence_pairs
    with ws.engine.connect() as conn:
        pairs = {r[0]: tuple(r[1:]) for r in conn.execute(
            select(t.pairs.c.id, t.pairs.c.property_id, t.pairs.c.acceptable_id, t.pairs.c.unacceptable_id,
                   t.pairs.c.negative_type, t.pairs.c.similarity))}
    concepts = {r["id"]: r for r in ws.rows(select(t.concepts.c.id, t.concepts.c.english, t.concepts.c.category))}
    props = {r["id"]: r["english"] for r in ws.rows(select(t.properties.c.id, t.properties.c.english))}
    words = _words(ws, langs)
    stale = stale_pairs(ws, langs, pairs)
    waived = waivers(ws)
    reg = registry(ws)
    stmt = (select(sp.c.pair_id, sp.c.lang, sp.c.acceptable, sp.c.unacceptable,
                   _span("acceptable_property", 0), _span("acceptable_property", 1),
                   _span("acceptable_concept", 0), _span("acceptable_concept", 1),
                   _span("unacceptable_concept", 0), _span("unacceptable_concept", 1), sp.c.llm_call_id,
                   sp.c.acceptable_form, sp.c.unacceptable_form, sp.c.status, sp.c.reason)
            .where(sp.c.lang.in_(langs)))
    with ws.engine.connect() as conn:
        fetched = conn.execute(stmt).all()
    by_lang: dict[str, list] = defaultdict(list)
    for r in fetched:
        by_lang[r[1]].append(r)
    out = {}
    for lang, rows in sorted(by_lang.items()):
        rows.sort(key=lambda r: r[0])
        script = (reg[lang].spaced, reg[lang].script) if lang in reg else (True, "Latn")
        out[lang] = _config(lang, rows, pairs, concepts, props, words[lang], stale, waived, script,
                            sentence_decisions(ws, lang), sentence_lineage(ws, lang), disagreements(ws, lang, "sentences"))
    return out


def _names(i: int, item: str, col: dict[str, list], prop_ids, acc_ids, wp, wa, wu, script: tuple[bool, str]) -> bool:
    """Whether row `i`'s sentences name `item` by its verified word as it is now."""
    if item == acc_ids[i]:
        return col["acceptable_concept"][i] == wa[i][0]
    if item != prop_ids[i]:
        return col["unacceptable_concept"][i] == wu[i][0]
    return bool(wp[i][0] and occurrences(col["acceptable_sentence"][i], wp[i][0], spaced=script[0], script=script[1]))


def _config(lang, rows, pairs, concepts, props, words, stale, waived, script: tuple[bool, str],
            reviewed: dict[str, SentenceReview], lineage: dict[str, DecisionLineage],
            disputed: dict[str, list[Opinion]]) -> ConfigRows:
    result = ConfigRows(lang, lang, {k: [] for k in PAIR_FEATURES})
    # A pair the LLM could not write is no row until a curator has decided on it (written it, or rejected it).
    result.unwritten = {r[0]: r[14] for r in rows if r[13] == "flagged" and r[0] not in reviewed and r[0] not in disputed}
    rows = [r for r in rows if r[0] not in result.unwritten]
    if not rows:
        return result
    pid, _, sa, su, ap0, ap1, ac0, ac1, uc0, uc1, calls, af, uf, _, _ = (list(c) for c in zip(*rows))
    prop_ids, acc_ids, unacc_ids, negs, sims = (list(c) for c in zip(*(pairs[p] for p in pid)))
    none = (None, None, 0, False)
    wp, wa, wu = ([words.get(i, none) for i in ids] for ids in (prop_ids, acc_ids, unacc_ids))
    text, count, fixed = itemgetter(0), itemgetter(2), itemgetter(3)
    english = {k: v["english"] for k, v in concepts.items()}
    category = {k: v["category"] for k, v in concepts.items()}
    n = len(pid)
    col = result.columns = {
        "pair_id": pid, "lang": [lang] * n, "property_id": prop_ids, "property": list(map(text, wp)),
        "property_en": list(map(props.__getitem__, prop_ids)), "acceptable_concept": list(map(text, wa)),
        "unacceptable_concept": list(map(text, wu)), "acceptable_concept_en": list(map(english.__getitem__, acc_ids)),
        "unacceptable_concept_en": list(map(english.__getitem__, unacc_ids)),
        "category": list(map(category.__getitem__, acc_ids)), "negative_type": [_NEG_INDEX.get(x, -1) for x in negs],
        "similarity": sims, "acceptable_sentence": sa, "unacceptable_sentence": su,
        "property_span": [None if x is None or y is None else [x, y] for x, y in zip(ap0, ap1)],
        "acceptable_concept_span": [None if x is None or y is None else [x, y] for x, y in zip(ac0, ac1)],
        "unacceptable_concept_span": [None if x is None or y is None else [x, y] for x, y in zip(uc0, uc1)],
        "review_status": ["source" if lang == SOURCE_LANGUAGE else "verified"] * n,
        "n_reviewers": list(map(min, map(count, wp), map(count, wa), map(count, wu))),
        "corrected": [any(x) for x in zip(map(fixed, wp), map(fixed, wa), map(fixed, wu))],
        "sentence_origin": ["comps" if lang == SOURCE_LANGUAGE else "llm"] * n,
        "sentence_review": [None] * n,
    }
    index = {p: i for i, p in enumerate(pid)}
    held = {i: f"curators disagree on the sentences ({'; '.join(a.reviewer + ': ' + a.decision for a in anns)}); "
               f"an adjudicator decides them (`builder review push --stage {review_stage('sentences').adjudication} -l {lang}`)"
            for i, anns in ((index[p], anns) for p, anns in disputed.items() if p in index)}
    for p, review in reviewed.items():
        i = index.get(p)
        if i is None:
            continue
        if review.decision == "reject":
            held[i] = (f"a curator rejected the sentences ({review.comment or 'no comment'}); have them written again "
                       f"(`builder review repropose --stage sentences -l {lang}`)")
            continue
        origin = lineage.get(p)
        col["sentence_review"][i] = f"{origin.server} annotation {origin.annotation_id}" if origin else None
        spans = tuple(tuple(col[k][i]) if col[k][i] else None
                      for k in ("acceptable_concept_span", "unacceptable_concept_span", "property_span"))
        got = settled_pair((sa[i], su[i]), spans, (af[i], uf[i]), (review.acceptable, review.unacceptable),
                      (wp[i][0], wa[i][0], wu[i][0]), spaced=script[0], script=script[1])
        sa[i], su[i] = got.acceptable, got.unacceptable
        for k, span in (("acceptable_concept_span", got.acceptable_span), ("unacceptable_concept_span", got.unacceptable_span),
                        ("property_span", got.property_span)):
            col[k][i] = list(span) if span else None
        if got.located:
            result.curated.add(i)
        if got.problem:
            held[i] = f"{got.problem}; {FIX_IN_LABEL_STUDIO.format(lang=lang)}"
        col["acceptable_concept"][i], col["unacceptable_concept"][i] = got.acceptable_word, got.unacceptable_word
        col["corrected"][i] = (col["corrected"][i] or got.changed
                               or (got.acceptable_word, got.unacceptable_word) != (wa[i][0], wu[i][0]))
        col["sentence_origin"][i] = "curator" if got.changed else "llm"
    late = set()
    for (p, lg, item), at in stale.items():
        i = index.get(p) if lg == lang else None
        if i is None:
            continue
        decided = lineage[p].decided_at if p in lineage and p in reviewed else None
        # Settled by a curator who saw the word as it is now (their task shows it), or settled before it changed on
        # sentences that name it as it is now: not stale.
        if decided is not None and (decided >= at or _names(i, item, col, prop_ids, acc_ids, wp, wa, wu, script)):
            continue
        late.add((i, item))
    missing = [i for i, (a, b, c) in enumerate(zip(wp, wa, wu)) if a[1] is None or b[1] is None or c[1] is None]
    for i in sorted(set(missing) | {i for i, _ in late} | set(held)):
        items = (prop_ids[i], acc_ids[i], unacc_ids[i])
        why = "; ".join([f"{kind} {item} has no verified word in {lang}" if w[1] is None
                         else f"{kind} {item} was re-verified after the sentence was written "
                              f"(`builder generate --lang {lang}` writes it again)"
                         for kind, item, w in zip(_WORDS, items, (wp[i], wa[i], wu[i]))
                         if w[1] is None or (i, item) in late] + ([held[i]] if i in held else []))
        if ("pair", pid[i], lang) in waived:
            col["review_status"][i] = "waived"
            result.waived[i] = waived[("pair", pid[i], lang)]
        else:
            col["review_status"][i] = "unverified"
            result.unverified[i] = why
    result.concept_spans = [(a[0], a[1], u[0], u[1]) if a and u else (None, None, None, None)
                            for a, u in zip(col["acceptable_concept_span"], col["unacceptable_concept_span"])]
    result.concept_forms = list(zip(af, uf))
    result.call_ids = calls
    return result


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
    langs = {r["lang"] for r in ws.rows(select(sp.c.lang).distinct())}
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
    by_model: dict[str, Counter] = defaultdict(Counter)
    for (model, stage), n in counts.items():
        by_model[model_label(model)][stage] += n
    return [{"model": m, "calls": dict(sorted(s.items()))} for m, s in sorted(by_model.items())]
