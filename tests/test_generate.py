"""Stage 4: sentences from verified words, shared acceptable sentences, integrity, flags."""

import asyncio
from collections import defaultdict

from conftest import settings_for
from sqlalchemy import select

from builder.flags import RUNS, list_flags
from builder.generate import generate, regenerate
from builder.languages import registry
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient
from builder.reviews import accept
from builder.selection import Scope
from builder.status import flagged_items, status
from builder.testing.standin import Faults
from builder.translate import translate
from builder.workspace import schema as t

PROPS = "is used for heating food,can fly,has a mane"


def stage(ws, server, fn, langs, props: str = PROPS, **kw):
    client = LLMClient(LLMCache.of_workspace(ws), settings_for(server, **kw))

    async def go():
        try:
            return await fn(ws, client, [registry(ws)[c] for c in langs], scope=Scope.parse(ws, props))
        finally:
            await client.aclose()

    return asyncio.run(go())


def sentences(ws, lang):
    stmt = (select(t.sentence_pairs, t.pairs.c.group_id).join(t.pairs, t.pairs.c.id == t.sentence_pairs.c.pair_id)
            .where(t.sentence_pairs.c.lang == lang))
    return ws.rows(stmt)


def test_generation_waits_for_verified_words_then_shares_the_acceptable_sentence(sample_ws, server):
    ws = sample_ws
    n_pairs = len(Scope.parse(ws, PROPS).pairs(ws))
    summary = stage(ws, server, generate, ["fr"])
    assert summary.blocked["fr"] == n_pairs and not sentences(ws, "fr")
    stage(ws, server, translate, ["fr"])
    accept(ws, "fr", reviewer="curator-a")
    summary = stage(ws, server, generate, ["fr"])
    assert summary.generated["fr"] == n_pairs and summary.flagged["fr"] == 0
    rows = sentences(ws, "fr")
    by_group = defaultdict(set)
    for r in rows:
        by_group[r["group_id"]].add(r["acceptable"])
        a0, a1 = r["spans"]["acceptable_concept"]
        u0, u1 = r["spans"]["unacceptable_concept"]
        # identical outside the concept span, and the property span is recorded
        assert r["acceptable"][:a0] + r["acceptable"][a1:] == r["unacceptable"][:u0] + r["unacceptable"][u1:]
        p0, p1 = r["spans"]["acceptable_property"]
        assert r["acceptable"][p0:p1].startswith(r["acceptable"][a1:].strip().rstrip(".")[:5])
    assert all(len(v) == 1 for v in by_group.values())  # written once per concept-property
    calls = {r["llm_call_id"] for r in rows}
    assert len(calls) == len(by_group)  # one request per concept-property
    # Lineage: sentence -> call; its words -> proposal -> review by the curator.
    words = ws.rows(select(t.verified_words).where(t.verified_words.c.lang == "fr"))
    assert all(w["proposal_id"] and w["review_id"] and w["reviewer"] == "curator-a" for w in words)


def test_seed_languages_generate_straight_from_expert_seeds_and_english_from_comps(sample_ws, server):
    ws = sample_ws
    stage(ws, server, generate, ["en", "de"])
    en = {r["pair_id"]: r for r in sentences(ws, "en")}
    de = {r["pair_id"]: r for r in sentences(ws, "de")}
    assert en.keys() == de.keys() and en  # the same pair ids in every language
    toaster = [r for r in en.values() if r["acceptable"] == "A toaster is used for heating food."]
    assert {r["unacceptable"] for r in toaster} == {
        "A coffee maker is used for heating food.", "A refrigerator is used for heating food.",
        "A kettle is used for heating food.", "A wren is used for heating food."}
    assert all(r["origin"] == "comps" and r["llm_call_id"] is None for r in en.values())
    assert all("Toaster" in de[p]["acceptable"] for p in (r["pair_id"] for r in toaster))


def test_frame_errors_are_reasked_with_the_reason_then_flagged(sample_ws, server):
    ws = sample_ws
    server.faults = Faults(frame_rate=1.0)  # every reply breaks the frame of its last sentence
    summary = stage(ws, server, generate, ["de"], max_reasks=2)
    rows = sentences(ws, "de")
    flagged = [r for r in rows if r["status"] == "flagged"]
    assert summary.flagged["de"] == len(flagged) > 0
    assert all("differ outside the concept span" in r["reason"] for r in flagged)
    assert summary.generated["de"] == len(rows) - len(flagged) > 0  # the good pairs of a group are kept
    # A later run asks the flagged pairs again, with the reason, and never redoes a generated pair; once RUNS runs have
    # given up on a pair, it waits for a person and a run sends nothing more.
    generated = {r["pair_id"]: r["created_at"] for r in rows if r["status"] == "generated"}
    for run in range(2, RUNS + 1):
        again = stage(ws, server, generate, ["de"], max_reasks=0)
        assert (again.flagged["de"], again.generated["de"]) == (len(flagged), 0)
        assert {f.attempts for f in list_flags(ws, stage="generate")} == {run}
    assert {r["pair_id"]: r["created_at"] for r in sentences(ws, "de") if r["status"] == "generated"} == generated
    firsts = [r["request"]["messages"][1]["content"] for r in ws.rows(select(t.llm_cache.c.request))]
    assert sum("An earlier answer for these items could not be used" in m and "differ outside the concept span" in m
               and f"(given up {RUNS - 1} time(s))" in m for m in firsts) == len(flagged)
    calls = server.stats.calls
    last = stage(ws, server, generate, ["de"])
    assert server.stats.calls == calls and (last.generated["de"], last.flagged["de"]) == (0, 0)
    assert {f.attempts for f in list_flags(ws, stage="generate")} == {RUNS}


def test_frame_errors_fixed_on_reask_are_generated(sample_ws, server):
    ws = sample_ws
    server.faults = Faults(frame_rate=0.5, seed=1)
    summary = stage(ws, server, generate, ["zh"], max_reasks=6)
    assert summary.flagged["zh"] == 0 and summary.generated["zh"] == len(Scope.parse(ws, PROPS).pairs(ws))
    followups = [m["content"] for r in ws.rows(select(t.llm_cache.c.request)) for m in r["request"]["messages"][2:] if m["role"] == "user"]
    assert any("failed validation: the sentences differ outside the concept span" in m for m in followups)


def test_flagged_pairs_are_listed_with_their_reason_until_they_are_regenerated(sample_ws, server):
    ws = sample_ws
    server.faults = Faults(frame_rate=1.0)
    summary = stage(ws, server, generate, ["de"], max_reasks=1)
    flagged = {r["pair_id"]: r["reason"] for r in sentences(ws, "de") if r["status"] == "flagged"}
    listed = flagged_items(ws, stage="generate")
    assert {f.item_id: f.reason for f in listed} == flagged and len(flagged) == summary.flagged["de"] > 0
    assert all(f.lang == "de" and f.reason.startswith("failed validation: the sentences differ") for f in listed)
    pairs = {r["id"]: r for r in ws.rows(select(t.pairs))}
    english = {r["id"]: r["english"] for r in ws.rows(select(t.concepts))}
    assert all(f.what.startswith(f"{english[pairs[f.item_id]['acceptable_id']]} / {english[pairs[f.item_id]['unacceptable_id']]}: ")
               for f in listed)
    assert {s.lang: s.flags for s in status(ws, ["de", "fr"])} == {"de": {"generate": len(flagged)}, "fr": {}}

    server.faults = Faults()
    client = LLMClient(LLMCache.of_workspace(ws), settings_for(server))

    async def again():
        try:
            return await regenerate(ws, client, registry(ws)["de"], dict.fromkeys(flagged, "keep the frame"))
        finally:
            await client.aclose()

    assert asyncio.run(again()).generated["de"] == len(flagged)
    assert flagged_items(ws) == [] and all(r["status"] == "generated" for r in sentences(ws, "de"))
