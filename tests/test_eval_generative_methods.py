"""Generative evaluation: consistency assembly, self-translation and M2C QA against the stand-in server and a toy."""

from __future__ import annotations

import asyncio

import numpy as np
import pandas as pd
import pytest
from completions_standin import CompletionsStandin
from conftest import settings_for
from generative_fixtures import VERSION, learnt_tests, report_row
from sqlalchemy import select

from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient, LLMError, Request
from builder.llm.config import LLMSettings
from builder.workspace import schema as t
from evaluate.answers import read_answer
from evaluate.consistency import ORDER, assemble, decisions
from evaluate.data import load_release
from evaluate.methods import EvalOptions, resolve
from evaluate.models import load_model, random_control
from evaluate.report import build_report
from evaluate.run import run_evaluation
from evaluate.selftranslate import LETTERS, acceptable_first, clean_translation, letter_sentence, source_prompts, table1

NAN = float("nan")


def _items(method, variant, rows):
    return pd.DataFrame([{"pair_id": p, "lang": lang, "property_id": "q", "negative_type": "random", "method": method,
                          "variant": variant, "score_acceptable": a, "score_unacceptable": u, "correct": a > u}
                         for lang, p, a, u in rows])


DIRECT = _items("direct", "full", [
    ("en", "p1", 2, 1), ("en", "p2", 1, 2), ("en", "p3", NAN, 1), ("en", "p4", 1, 1),  # p3 undefined, p4 tie: invalid
    ("de", "p1", 2, 1), ("de", "p2", 2, 1), ("de", "p3", 1, NAN), ("de", "p4", 3, 1),
    ("zh", "p1", 1, 2), ("zh", "p2", 1, 2), ("zh", "p3", 2, 1),  # p4 not in Chinese
])
META = pd.concat([_items("meta", "acceptable_first", [("en", "p1", 0, -1), ("en", "p2", 0, -1)]),
                  _items("meta", "acceptable_second", [("en", "p1", 0, -1), ("en", "p2", -1, 0)])])


def test_decisions_read_ties_and_undefined_scores_as_invalid():
    d = decisions(DIRECT, "direct", "full")
    assert d["en"] == {"p1": "acceptable", "p2": "unacceptable", "p3": None, "p4": None}
    assert d["zh"] == {"p1": "unacceptable", "p2": "unacceptable", "p3": "acceptable"}


def test_assembled_matrix_breakdown_same_language_figures_and_labels_have_exact_values():
    first, second = decisions(META, "meta", "acceptable_first"), decisions(META, "meta", "acceptable_second")
    runs = {"de": ({"p1": "acceptable", "p2": None, "p3": "unacceptable"}, {"p1": "acceptable", "p2": None, "p3": "acceptable"})}
    out = assemble({"direct/full": decisions(DIRECT, "direct", "full")}, runs, "two sampled runs",
                   {"en": (first["en"], second["en"])})
    got = {(s.variant, s.lang, s.metric): (s.value, s.n) for s in out.scores}
    # de-en: p1 same, p2 differs, p3 invalid on both sides agrees, p4 invalid vs valid differs
    assert got[("direct/full", "de-en", "consistency")] == (0.5, 4)
    assert got[("direct/full", "en-zh", "consistency")] == (pytest.approx(1 / 3), 3)  # p2 same; p1, p3 differ
    assert got[("direct/full", "de-zh", "consistency")] == (0.0, 3)
    # Against English: de agrees where English was right (p1) and not where it was wrong (p2)
    assert got[("direct/full", "de", "consistency_en_correct")] == (1.0, 1)
    assert got[("direct/full", "de", "consistency_en_incorrect")] == (0.0, 1)
    assert got[("direct/full", "zh", "consistency_en")] == (pytest.approx(1 / 3), 3)
    assert got[("direct/full", "zh", "consistency_en_correct")] == (0.0, 1)
    assert got[("direct/full", "zh", "consistency_en_incorrect")] == (1.0, 1)
    assert got[("order_agreement", "en", "agreement")] == (0.5, 2)  # options swapped: p1 same, p2 flips
    assert got[("run_to_run", "de", "agreement")] == (pytest.approx(2 / 3), 3)  # two invalid replies agree
    split = out.tables["consistency_breakdown"].set_index("lang")
    assert (split.at["de", "invalid_source"], split.at["de", "invalid_target"]) == (2, 1)
    assert (split.at["zh", "invalid_source"], split.at["zh", "invalid_target"]) == (1, 0)
    m = out.tables["consistency_matrix"].set_index(["lang_a", "lang_b"])["value"]
    assert m[("zh", "de")] == m[("de", "zh")] == 0.0 and m[("en", "en")] == 1.0
    labels = out.tables["consistency_labels"].set_index(["lang", "label"])["share"]
    assert labels[("en", "invalid")] == 0.5 and labels[("de", "acceptable")] == 0.75
    assert out.tables["consistency_order_agreement"]["compared"].tolist() == [ORDER]
    assert out.tables["consistency_run_to_run"]["compared"].tolist() == ["two sampled runs"]


def test_plain_text_requests_are_cached_by_decoding_settings(ws, server):
    server.lexicon.texts[("German", "A cat purrs.")] = "Eine Katze schnurrt."
    req = Request((("user", "Please translate the following text into German: “A cat purrs.”"),), "text", "t", "de", "h")

    async def go(**kw):
        client = LLMClient(LLMCache.of_workspace(ws), settings_for(server))
        try:
            return await client.ask_text(req, **kw)
        finally:
            await client.aclose()

    assert asyncio.run(go(max_tokens=64)).text == "Eine Katze schnurrt."
    assert asyncio.run(go(max_tokens=64)).text == "Eine Katze schnurrt." and server.stats.calls == 1
    asyncio.run(go(max_tokens=64, temperature=0.7, seed=1))
    asyncio.run(go(max_tokens=64, temperature=0.7, seed=2))
    assert server.stats.calls == 3  # each sampled run is asked (and cached) apart
    bad = Request((("user", "Tell me a joke"),), "text", "t", None, "h")
    with pytest.raises(LLMError, match="cannot tell what this prompt asks"):
        asyncio.run(LLMClient(LLMCache.of_workspace(ws), settings_for(server)).ask_text(bad, max_tokens=5))


def _meta_choice(words, preferred):
    known = [w for w in words if w in preferred]
    return known[0] if len(known) == 1 else words[0]


def test_endpoint_run_against_the_standin_gives_the_expected_figures(subset, server, tmp_path):
    pairs, info, m2c = subset
    ids = sorted(pairs["pair_id"].unique())
    known = ids[:4]
    by = {lang: pairs[pairs["lang"] == lang].set_index("pair_id") for lang in ("en", "de", "zh")}
    lex = server.lexicon
    lex.preferred = set(pairs[pairs["pair_id"].isin(known)]["acceptable_concept"])
    lex.unsure = {by["de"].at[ids[7], "property"]}
    for pid in known:
        for col in ("acceptable_sentence", "unacceptable_sentence"):
            lex.texts[("German", by["en"].at[pid, col])] = by["de"].at[pid, col]
    lex.facts = set(pairs["acceptable_sentence"])
    de_tests = m2c[m2c["lang"] == "de"].sort_values("test_id").reset_index(drop=True)
    kinds = {}
    for i, r in de_tests.iterrows():
        kind = ("gold", "form", "miss")[i % 3] if len(r["answer_forms"]) or i % 3 != 1 else "miss"
        kinds[r["test_id"]] = kind
        lex.m2c_answers[(r["context"], r["question"])] = {"gold": r["answer"], "form": (list(r["answer_forms"]) or [""])[0],
                                                          "miss": "Keine Ahnung."}[kind]
    out = tmp_path / "out"
    settings = settings_for(server, model="standin-chat")
    res = run_evaluation(pairs, info, None, resolve("consistency,selftranslate,m2c"), out, EvalOptions(), m2c=m2c,
                         endpoint=settings)
    assert res.config.methods == ["meta", "consistency", "selftranslate", "m2c"]
    assert res.config.model.source == "endpoint" and res.config.scoring is None
    got = {(s.method, s.variant, s.lang, s.metric): s.value for s in res.scores}

    # meta in generative mode: the stand-in picks a preferred concept, else the first listed; "unsure" is invalid
    def meta(lang, order):
        d = {}
        for pid, r in by[lang].iterrows():
            if r["property"] in lex.unsure and lang == "de":
                d[pid] = None
                continue
            words = (r["acceptable_concept"], r["unacceptable_concept"])
            choice = _meta_choice(words if order == "first" else words[::-1], lex.preferred)
            d[pid] = "acceptable" if choice == r["acceptable_concept"] else "unacceptable"
        return d

    second = {lang: meta(lang, "second") for lang in ("en", "de")}
    same = sum(second["en"][p] == second["de"][p] for p in ids) / len(ids)
    assert got[("consistency", "meta/acceptable_second", "de-en", "consistency")] == pytest.approx(same)
    invalid = sum(v is None for v in meta("de", "first").values())
    assert invalid > 0 and got[("meta", "acceptable_first", "de", "invalid_share")] == pytest.approx(invalid / len(ids))
    assert got[("consistency", "run_to_run", "de", "agreement")] == 1.0  # the stand-in does not sample
    assert "seed 1 against seed 2" in res.tables["consistency_run_to_run"]["compared"].iloc[0]
    assert res.tables["consistency_order_agreement"].empty  # generative meta has no scored orders to compare

    # self-translation: known German translations are the released sentences (held true), others are marked
    # copies, where the stand-in answers "A" (right only when the acceptable sentence came first)
    assert got[("selftranslate", "original", "en", "accuracy")] == 1.0
    expect = (len(known) + sum(acceptable_first(p) for p in ids[4:])) / len(ids)
    for cond in ("X", "T"):
        assert got[("selftranslate", cond, "en-de", "consistency")] == pytest.approx(expect)
        assert got[("selftranslate", cond, "en-de", "consistency_high_quality")] == 1.0
    assert got[("selftranslate", "I", "en-de", "consistency")] == 1.0  # the input stays English
    assert got[("selftranslate", "X", "en-zh", "consistency")] == pytest.approx(sum(map(acceptable_first, ids)) / len(ids))
    summary = res.tables["selftranslate_summary"].set_index(["direction", "condition"])
    assert summary.at[("en-de", "X"), "n_high_quality"] == len(known) and summary.at[("en-zh", "X"), "tokenizer"] == "zh"
    assert summary.at[("en-de", "X"), "pearson_chrf"] > 0.5  # well translated items are the consistent ones
    trans = res.tables["selftranslate_translations"]
    assert trans[(trans["direction"] == "en-de") & trans["pair_id"].isin(known)]["bleu"].tolist() == pytest.approx([100.0] * len(known))
    labels = res.tables["selftranslate_labels"]
    assert set(labels["condition"]) == {"original", "I", "X", "T"}

    # M2C: accuracy and morphological-error share of the German answers, zero- and one-shot
    n = len(kinds)
    for variant in ("zero_shot", "one_shot"):
        assert got[("m2c", variant, "de", "accuracy")] == pytest.approx(sum(k == "gold" for k in kinds.values()) / n)
        assert got[("m2c", variant, "de", "morph_error_share")] == pytest.approx(sum(k == "form" for k in kinds.values()) / n)
    assert "form" in kinds.values()
    items = res.tables["m2c_items"]
    one = items[items["variant"] == "one_shot"]
    same_template = one.merge(items[["test_id", "template_id"]].drop_duplicates(), left_on="exemplar", right_on="test_id")
    assert len(one) == len(m2c) and (same_template["template_id_x"] == same_template["template_id_y"]).all()
    assert (one["exemplar"] != one["test_id"]).all()

    calls = server.stats.calls
    again = run_evaluation(pairs, info, None, resolve("consistency,selftranslate,m2c"), out, EvalOptions(), m2c=m2c,
                           endpoint=settings)
    assert server.stats.calls == calls and len(again.scores) == len(res.scores)
    import shutil

    shutil.rmtree(out / "parts")  # only the LLM cache left: re-running asks nothing
    run_evaluation(pairs, info, None, resolve("consistency,selftranslate,m2c"), out, EvalOptions(), m2c=m2c, endpoint=settings)
    assert server.stats.calls == calls

    rep = build_report(out)
    md = (out / "report.md").read_text()
    for title in ("## Cross-lingual consistency", "## Self-translation consistency", "## M2C question answering"):
        assert title in md
    assert rep.plots["consistency_heatmaps"] > 0 and "plots/consistency_heatmaps.png" in md
    heat = pd.read_csv(out / "plots" / "consistency_heatmaps.csv")
    assert set(heat["variant"]) == {"meta/acceptable_first", "meta/acceptable_second"}
    bars = pd.read_csv(out / "plots" / "selftranslate_consistency.csv")
    drawn = bars[bars["metric"] == "consistency"].set_index(["direction", "condition"])["value"]
    assert drawn[("en-de", "X")] == pytest.approx(expect) and drawn[("en-de", "I")] == 1.0
    assert set(bars[bars["metric"] == "bleu"]["direction"]) == {"en-de", "en-zh"} and "plots/selftranslate_consistency.png" in md


SIDES = ("acceptable_sentence", "unacceptable_sentence")


def standin_decision(pid: str, acceptable: str, unacceptable: str, facts: set[str], misread: bool) -> str:
    """What the stand-in's reply to a two-sentence task means: it names the one option it holds true (the first
    option when it holds neither or both), the other one after an instruction it misreads."""
    first, second = (acceptable, unacceptable) if acceptable_first(pid) else (unacceptable, acceptable)
    held = [x for x in (first, second) if x in facts]
    pick = held[0] if len(held) == 1 else first
    if misread:
        pick = second if pick == first else first
    return "acceptable" if pick == acceptable else "unacceptable"


def test_selftranslate_reproduces_the_papers_table_1_in_both_directions_on_the_standin(subset, server, tmp_path):
    """T, I and X for en→de and de→en (multisense Table 1), with the values the stand-in's replies imply."""
    pairs, info, _ = subset
    ids = sorted(pairs["pair_id"].unique())
    by = {lang: pairs[pairs["lang"] == lang].set_index("pair_id") for lang in ("en", "de")}
    words = source_prompts()
    lex = server.lexicon
    lex.facts = set(by["en"].loc[ids[:6], SIDES[0]]) | set(by["de"].loc[ids[2:], SIDES[0]])  # six true per language
    names = {"en-de": "German", "de-en": "Englische"}  # the target as each source's translation prompt names it
    for direction, known in (("en-de", ids[:4]), ("de-en", ids[4:])):
        src, tgt = direction.split("-")
        for pid in known:
            for col in SIDES:
                lex.texts[(names[direction], by[src].at[pid, col])] = by[tgt].at[pid, col]
    lex.texts[("German", words["en"].prefix)] = "Welcher Satz ist wahr?"
    lex.misread = {"Welcher Satz ist wahr?"}  # its own German instruction, which it then misreads
    res = run_evaluation(pairs, info, None, resolve("selftranslate"), tmp_path / "out",
                         EvalOptions(translate_directions=("en-de", "de-en")), endpoint=settings_for(server))

    def translated(direction: str, text: str) -> str:
        return lex.texts.get((names[direction], text), f"{text} ({names[direction]})")

    expected = {}
    for direction in ("en-de", "de-en"):
        src = direction.split("-")[0]
        misread = translated(direction, words[src].prefix) in lex.misread
        original = {pid: standin_decision(pid, *by[src].loc[pid, list(SIDES)], lex.facts, False) for pid in ids}
        own = {pid: [translated(direction, by[src].at[pid, col]) for col in SIDES] for pid in ids}
        conditions = {"T": {pid: standin_decision(pid, *own[pid], lex.facts, misread) for pid in ids},
                      "I": {pid: standin_decision(pid, *by[src].loc[pid, list(SIDES)], lex.facts, misread) for pid in ids},
                      "X": {pid: standin_decision(pid, *own[pid], lex.facts, False) for pid in ids}}
        expected[direction.replace("-", "→")] = {c: np.mean([d[p] == original[p] for p in ids]) for c, d in conditions.items()}
    want = pd.DataFrame.from_dict(expected, orient="index")[["T", "I", "X"]]
    assert len(set(want.to_numpy().ravel())) >= 4  # the conditions and directions differ, so a mix-up would show
    got = table1(res.tables["selftranslate_summary"]).set_index("Src→Tgt")
    pd.testing.assert_frame_equal(got, want, check_names=False)
    scores = {(s.variant, s.lang, s.metric): s.value for s in res.scores if s.method == "selftranslate"}
    assert scores[("T", "de-en", "consistency")] == want.at["de→en", "T"]
    de_original = [standin_decision(pid, *by["de"].loc[pid, list(SIDES)], lex.facts, False) for pid in ids]
    assert scores[("original", "de", "accuracy")] == np.mean([d == "acceptable" for d in de_original])
    build_report(tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    rows = [f"| {d} | {want.at[d, 'T']:.3f} | {want.at[d, 'I']:.3f} | {want.at[d, 'X']:.3f} |" for d in want.index]
    assert "| Src→Tgt | T | I | X |\n|---|---|---|---|\n" + "\n".join(rows) in md


def test_translate_directions_are_checked_before_anything_is_asked(subset, server, tmp_path):
    pairs, info, _ = subset
    with pytest.raises(ValueError, match="SOURCE-TARGET"):
        EvalOptions(translate_directions=("en_de",))
    with pytest.raises(ValueError, match="the evaluated pairs have no ja"):
        run_evaluation(pairs, info, None, resolve("selftranslate"), tmp_path / "o",
                       EvalOptions(translate_directions=("en-ja",)), endpoint=settings_for(server))
    assert server.stats.calls == 0


def test_selftranslate_refuses_a_language_the_release_gives_no_name_before_asking_anything(subset, server, tmp_path):
    pairs, info, _ = subset
    unnamed = info.model_copy(update={"languages": [lang for lang in info.languages if lang.code != "zh"]})
    with pytest.raises(ValueError, match="selftranslate: the release declares no zh"):
        run_evaluation(pairs, unnamed, None, resolve("selftranslate"), tmp_path / "o", endpoint=settings_for(server))
    assert server.stats.calls == 0


def test_endpoint_refuses_methods_that_need_scores(subset, server, tmp_path):
    pairs, info, _ = subset
    with pytest.raises(ValueError, match="method direct needs log-probability scores, which an endpoint does not offer: "
                                         "add --score-endpoint"):
        run_evaluation(pairs, info, None, resolve("direct"), tmp_path / "o", endpoint=settings_for(server))


def test_every_method_an_endpoint_can_run_runs_there_with_and_without_score_endpoint(subset, taught_toy_dir, tmp_path):
    """One server that scores (echoed prompt log-probabilities) and replies (chat), serving the taught toy."""
    pairs, info, m2c = subset
    taught = load_model(taught_toy_dir, batch_size=16)
    every = "direct,meta,consistency,selftranslate,m2c"
    with CompletionsStandin(taught, "taught-toy") as server:
        settings = LLMSettings(base_url=server.base_url, api_key="test-key", model="taught-toy", concurrency=4,
                               timeout_s=120.0, max_retries=0)
        with pytest.raises(ValueError, match="^method direct needs log-probability scores, which an endpoint does not "
                                             "offer: add --score-endpoint"):
            run_evaluation(pairs, info, None, resolve(every), tmp_path / "o", m2c=m2c, endpoint=settings)
        with pytest.raises(ValueError, match="^method neuro needs a local model's hidden states, which an endpoint does "
                                             "not offer: evaluate a local model$"):
            run_evaluation(pairs, info, None, resolve("neuro"), tmp_path / "o", endpoint=settings, score_endpoint=True)
        assert server.requests == 0  # refused before anything was asked
        scored = run_evaluation(pairs, info, None, resolve(every), tmp_path / "scored", EvalOptions(bos_policy="<s>"),
                                m2c=m2c, endpoint=settings, score_endpoint=True)
        read = run_evaluation(pairs, info, None, resolve("meta,consistency,selftranslate,m2c"), tmp_path / "read",
                              m2c=m2c, endpoint=settings)
        replies = dict(server.replies)
    assert scored.config.methods == ["direct", "meta", "consistency", "selftranslate", "m2c"] and scored.config.scoring
    assert read.config.methods == ["meta", "consistency", "selftranslate", "m2c"] and read.config.scoring is None
    # Scored through the endpoint, direct and meta are the local model's scores; read, meta's are the replies' 1 and 0.
    local = run_evaluation(pairs, info, taught, resolve("direct,meta"), tmp_path / "local", EvalOptions(bos_policy="bos"))
    both = local.items.merge(scored.items, on=["method", "variant", "lang", "pair_id"], suffixes=("_local", "_remote"))
    assert len(both) == len(local.items) == len(scored.items) > 0
    assert np.nanmax(np.abs(both["score_acceptable_local"] - both["score_acceptable_remote"])) < 1e-3
    assert (both["correct_local"] == both["correct_remote"]).all()
    assert set(read.items["score_acceptable"]) <= {0.0, 1.0} and len(read.tables["meta_replies"]) == 2 * len(pairs)
    # consistency compares direct's decisions, and meta's in both orders, only where the endpoint scores
    variants = {v: {s.variant for s in r.scores if s.method == "consistency"} for v, r in (("scored", scored), ("read", read))}
    assert {"direct/full", "order_agreement", "run_to_run"} <= variants["scored"]
    assert not {"direct/full", "order_agreement"} & variants["read"] and "run_to_run" in variants["read"]
    # selftranslate and m2c read the server's replies, with or without --score-endpoint: the same items
    for table in ("selftranslate_items", "selftranslate_translations", "m2c_items"):
        pd.testing.assert_frame_equal(scored.tables[table], read.tables[table])
    st = scored.tables["selftranslate_items"]
    assert set(st["condition"]) == {"original", "I", "X", "T"} and set(st["reply"]) <= set(replies.values())
    asked_in = [s if c in ("original", "X") else t for s, t, c in zip(st["source"], st["target"], st["condition"])]
    assert list(st["decision"]) == [letter_sentence(pid, read_answer(r, LETTERS, lang)) for pid, r, lang in
                                    zip(st["pair_id"], st["reply"], asked_in)]
    learnt = set(learnt_tests(m2c)["test_id"])
    items = scored.tables["m2c_items"]
    zero = items[(items["variant"] == "zero_shot") & items["test_id"].isin(learnt)]
    assert len(zero) and zero["correct"].all() and set(items["reply"]) <= set(replies.values())


def test_local_toy_runs_every_method_and_beats_its_untrained_control(subset, taught_toy_dir, tmp_path):
    pairs, info, m2c = subset
    taught = load_model(taught_toy_dir, batch_size=16)
    runs = {}
    for name, loaded in (("taught", taught), ("control", random_control(taught, seed=0))):
        runs[name] = run_evaluation(pairs, info, loaded, resolve("consistency,selftranslate,m2c"), tmp_path / name,
                                    EvalOptions(), m2c=m2c)
    res = runs["taught"]
    assert res.config.methods == ["direct", "meta", "consistency", "selftranslate", "m2c"]
    learnt = set(learnt_tests(m2c)["test_id"])
    for name, expected in (("taught", 1.0), ("control", 0.0)):
        items = runs[name].tables["m2c_items"]
        zero = items[(items["variant"] == "zero_shot") & items["test_id"].isin(learnt)]
        assert zero["correct"].mean() == expected, name
    quality = {name: r.tables["selftranslate_summary"].set_index(["direction", "condition"]).at[("en-de", "X"), "chrf"]
               for name, r in runs.items()}
    assert quality["taught"] > 80 > 20 > quality["control"]
    # The summary's consistency is the agreement of the items' decisions with the original's
    st = res.tables["selftranslate_items"]
    orig = st[st["condition"] == "original"].set_index("pair_id")["decision"]
    t_de = st[(st["condition"] == "T") & (st["target"] == "de")].set_index("pair_id")["decision"]
    agree = np.mean([orig[p] == t_de[p] for p in t_de.index])
    got = {(s.method, s.variant, s.lang, s.metric): s.value for s in res.scores}
    assert got[("selftranslate", "T", "en-de", "consistency")] == pytest.approx(agree)
    assert res.tables["consistency_order_agreement"]["compared"].iloc[0] == ORDER
    runs = res.tables["consistency_run_to_run"]  # a local model samples too: the two runs are its own
    assert set(runs["lang"]) == {"de", "en", "zh"} and "seed 1 against seed 2" in runs["compared"].iloc[0]
    assert ("consistency", "direct/full", "de-en", "consistency") in got
    build_report(tmp_path / "taught")
    md = (tmp_path / "taught" / "report.md").read_text()
    for title in ("## Cross-lingual consistency", "## Self-translation consistency", "## M2C question answering",
                  "## direct by negative type"):
        assert title in md
    # The toy tokenizer's BOS token <s> is shown as text, not read as a strikethrough tag.
    html = (tmp_path / "taught" / "report.html").read_text()
    assert "<s>" not in html and "(token '&lt;s&gt;';" in report_row(html, "BOS policy")


@pytest.mark.parametrize("reply, expected", [
    ("“Ein Toaster erwärmt Speisen.”\nHinweis: wörtlich übersetzt.", "Ein Toaster erwärmt Speisen."),
    ("\n  \"'Привет.'\"  ", "Привет."),
    ("「A」または「B」で答えてください。", "「A」または「B」で答えてください。"),  # quotes inside the text stay
    ("Bitte antworten Sie mit „A“ oder „B“.", "Bitte antworten Sie mit „A“ oder „B“."),
    ("", ""),
])
def test_a_translation_is_the_first_line_unwrapped_only_where_quotes_wrap_it(reply, expected):
    assert clean_translation(reply) == expected


@pytest.mark.parametrize("variant", ["paper", "corrected"])
def test_the_sampled_runs_ask_the_meta_prompts_of_the_runs_variant(m2c_release, server, tmp_path, variant):
    """The run-to-run baseline asks what meta asks: with --prompt-variant corrected, Arabic's corrected prompt."""
    data = load_release(m2c_release, VERSION, ["ar"])
    pairs = data.pairs[data.pairs["pair_id"].isin(sorted(data.pairs["pair_id"].unique())[:3])].reset_index(drop=True)
    out = tmp_path / "out"
    run_evaluation(pairs, data.dataset, None, resolve("consistency"), out, EvalOptions(prompt_variant=variant),
                   endpoint=settings_for(server, model="standin-chat"))
    template = {lang.code: lang for lang in data.dataset.languages}["ar"].prompt(variant)
    cache = LLMCache.open(out / "llm-cache.sqlite")
    with cache.engine.connect() as conn:
        asked = [r.request["messages"][-1]["content"] for r in conn.execute(
            select(t.llm_cache.c.request).join(t.llm_calls, t.llm_calls.c.id == t.llm_cache.c.llm_call_id)
            .where(t.llm_calls.c.stage.like("consistency: sampled run%")))]
    cache.close()
    expected = {template.format(property=r.property, word1=r.acceptable_concept, word2=r.unacceptable_concept)
                for r in pairs.itertuples()}
    assert len(asked) == 2 * len(pairs) and set(asked) == expected
