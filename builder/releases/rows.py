"""Workspace → release rows: one config per language for minimal pairs, one per language for M2C.

A language's minimal pairs are its sentence pairs with status "generated" (English: the COMPS source
sentences), joined with the pair, its property and concepts, and the verified words in that language.
Rows are read in a few bulk queries and kept column-wise, so a 250,000-pair release stays fast.

A row is *verified* when each of its three words is a verified word (an expert seed or a curator's
decision) that was not changed after the sentence was written; otherwise it needs a waiver.
Where curators reviewed the sentences themselves, their settled decision applies: fixed sentences are
released as fixed (and count as corrected), rejected ones wait for regeneration like unverified rows,
and sentences whose curators disagree wait for an adjudicator.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from operator import itemgetter
from os.path import commonprefix

import pyarrow as pa
from sqlalchemy import func, select

from builder.languages import SOURCE_LANGUAGE
from builder.records import NEGATIVE_TYPES
from builder.releases.features import M2C_FEATURES, M2C_PREFIX, PAIR_FEATURES
from builder.releases.waivers import waivers
from builder.reviews import ADJUDICATION, SentenceReview, disagreements, sentence_decisions
from builder.selection import stale_pairs
from builder.workspace import schema as t
from builder.workspace.store import Workspace, collector_paused

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
    concept_spans: list[tuple] = field(default_factory=list)  # pairs: (a0, a1, u0, u1), each may be None
    concept_forms: list[tuple[str, str]] = field(default_factory=list)  # pairs: the concepts' forms in the sentences
    call_ids: list[str | None] = field(default_factory=list)

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
    stmt = (select(sp.c.pair_id, sp.c.lang, sp.c.acceptable, sp.c.unacceptable,
                   _span("acceptable_property", 0), _span("acceptable_property", 1),
                   _span("acceptable_concept", 0), _span("acceptable_concept", 1),
                   _span("unacceptable_concept", 0), _span("unacceptable_concept", 1), sp.c.llm_call_id,
                   sp.c.acceptable_form, sp.c.unacceptable_form)
            .where(sp.c.status == "generated", sp.c.lang.in_(langs)))
    with ws.engine.connect() as conn:
        fetched = conn.execute(stmt).all()
    by_lang: dict[str, list] = defaultdict(list)
    for r in fetched:
        by_lang[r[1]].append(r)
    out = {}
    for lang, rows in sorted(by_lang.items()):
        rows.sort(key=lambda r: r[0])
        out[lang] = _config(lang, rows, pairs, concepts, props, words[lang], stale, waived, sentence_decisions(ws, lang),
                            disagreements(ws, lang, "sentences"))
    return out


def _fixed_spans(acceptable: str, unacceptable: str) -> tuple[int, int, int, int]:
    """Concept spans of curator-fixed sentences: where the two sentences differ."""
    p = len(commonprefix([acceptable, unacceptable]))
    q = len(commonprefix([acceptable[p:][::-1], unacceptable[p:][::-1]]))
    return p, len(acceptable) - q, p, len(unacceptable) - q


def _config(lang, rows, pairs, concepts, props, words, stale, waived,
            reviewed: dict[str, SentenceReview], disputed: dict[str, list[dict]]) -> ConfigRows:
    pid, _, sa, su, ap0, ap1, ac0, ac1, uc0, uc1, calls, af, uf = (list(c) for c in zip(*rows))
    prop_ids, acc_ids, unacc_ids, negs, sims = (list(c) for c in zip(*(pairs[p] for p in pid)))
    none = (None, None, 0, False)
    wp, wa, wu = ([words.get(i, none) for i in ids] for ids in (prop_ids, acc_ids, unacc_ids))
    result = ConfigRows(lang, lang, {})
    status = ["source" if lang == SOURCE_LANGUAGE else "verified"] * len(pid)
    missing = [i for i, (p, a, u) in enumerate(zip(wp, wa, wu)) if p[1] is None or a[1] is None or u[1] is None]
    index = {p: i for i, p in enumerate(pid)} if stale or reviewed or disputed else {}
    late = [index[p] for p, lg, _ in stale if lg == lang and p in index]
    sentence_fixed = set()
    held = {i: f"curators disagree on the sentences ({'; '.join(a['reviewer'] + ': ' + a['decision'] for a in anns)}); "
               f"an adjudicator decides them (`builder review push --stage {ADJUDICATION['sentences']} --lang {lang}`)"
            for i, anns in ((index[p], anns) for p, anns in disputed.items() if p in index)}
    for p, review in reviewed.items():
        i = index[p]
        if review.decision == "reject":
            held[i] = (f"a curator rejected the sentences ({review.comment or 'no comment'}); "
                       f"`builder review repropose --stage sentences --lang {lang}` writes them again")
        elif (review.acceptable, review.unacceptable) != (sa[i], su[i]):
            prop_text = sa[i][ap0[i]:ap1[i]] if ap0[i] is not None and ap1[i] is not None else None
            sa[i], su[i] = review.acceptable, review.unacceptable
            ac0[i], ac1[i], uc0[i], uc1[i] = _fixed_spans(sa[i], su[i])
            at = sa[i].find(prop_text) if prop_text else -1
            ap0[i], ap1[i] = (at, at + len(prop_text)) if at >= 0 else (None, None)
            sentence_fixed.add(i)
    for i in sorted(set(missing) | set(late) | set(held)):
        items = (prop_ids[i], acc_ids[i], unacc_ids[i])
        why = "; ".join([f"{kind} {item} has no verified word in {lang}" if w[1] is None
                         else f"{kind} {item} was re-verified after the sentence was written "
                              f"(`builder generate --lang {lang}` writes it again)"
                         for kind, item, w in zip(_WORDS, items, (wp[i], wa[i], wu[i]))
                         if w[1] is None or (pid[i], lang, item) in stale] + ([held[i]] if i in held else []))
        if ("pair", pid[i], lang) in waived:
            status[i] = "waived"
            result.waived[i] = waived[("pair", pid[i], lang)]
        else:
            status[i] = "unverified"
            result.unverified[i] = why
    text, count, fixed = itemgetter(0), itemgetter(2), itemgetter(3)
    english = {k: v["english"] for k, v in concepts.items()}
    category = {k: v["category"] for k, v in concepts.items()}
    result.columns = {
        "pair_id": pid, "lang": [lang] * len(pid), "property_id": prop_ids, "property": list(map(text, wp)),
        "property_en": list(map(props.__getitem__, prop_ids)), "acceptable_concept": list(map(text, wa)),
        "unacceptable_concept": list(map(text, wu)), "acceptable_concept_en": list(map(english.__getitem__, acc_ids)),
        "unacceptable_concept_en": list(map(english.__getitem__, unacc_ids)),
        "category": list(map(category.__getitem__, acc_ids)), "negative_type": [_NEG_INDEX.get(x, -1) for x in negs],
        "similarity": sims, "acceptable_sentence": sa, "unacceptable_sentence": su,
        "property_span": [None if x is None or y is None else [x, y] for x, y in zip(ap0, ap1)],
        "acceptable_concept_span": [None if x is None or y is None else [x, y] for x, y in zip(ac0, ac1)],
        "unacceptable_concept_span": [None if x is None or y is None else [x, y] for x, y in zip(uc0, uc1)],
        "review_status": status,
        "n_reviewers": list(map(min, map(count, wp), map(count, wa), map(count, wu))),
        "corrected": [any(x) or i in sentence_fixed
                      for i, x in enumerate(zip(map(fixed, wp), map(fixed, wa), map(fixed, wu)))],
    }
    result.concept_spans = list(zip(ac0, ac1, uc0, uc1))
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
