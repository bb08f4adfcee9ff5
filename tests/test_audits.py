"""Pair audits: planted cases for each audit, the bundled sample clean, similarity from the real model."""

import asyncio
import re

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from test_generate import stage as run  # a stage over some properties, answered by the stand-in
from typer.testing import CliRunner

from builder.audits import audit, occurrence, overlap_table, shared
from builder.audits.occurrence import Side, problems
from builder.audits.overlap import PairWords
from builder.audits.similarity import similarities, type_problems
from builder.cli import app
from builder.flags import list_flags
from builder.generate import generate
from builder.languages import registry
from builder.llm.config import LLMSettings
from builder.paths import sample_dir
from builder.records import concept_id, pair_id
from builder.releases import load
from builder.releases.checks import ReleaseCheckError
from builder.releases.publish import PublishRequest, publish
from builder.runner import run_stage
from builder.selection import Scope
from builder.status import status
from builder.workspace import schema as t

pytest_plugins = ["release_fixtures"]
runner = CliRunner()
BALL = "is used for hitting a ball"
BOOKS = "is used for storing books"


def cli(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def flags(ws, stage):
    return {(f.item_id, f.lang): f.reason for f in list_flags(ws, stage=stage)}


# -- the concept named once ------------------------------------------------------------------------------


def test_a_concept_named_twice_or_inside_the_other_sentence_is_found():
    twice = problems(Side(sentence="球棒用于击球。", span=(0, 2), names=("球棒",)),
                     Side(sentence="球用于击球。", span=(0, 1), names=("球",)), spaced=False, script="Hans")
    assert twice == ["the acceptable sentence '球棒用于击球。' contains the unacceptable concept (球)",
                     "the unacceptable concept occurs again outside its span in '球用于击球。' (at '球')"]
    inside = problems(Side(sentence="Ong làm mật.", span=(0, 3), names=("ong", "Ong")),
                      Side(sentence="Ong bắp cày làm mật.", span=(0, 11), names=("ong bắp cày",)), spaced=True, script="Latn")
    assert inside == ["the unacceptable sentence 'Ong bắp cày làm mật.' contains the acceptable concept (ong / Ong)"]
    # Arabic: the article and prepositions are written onto the word (الكرة, للكرة).
    arabic = problems(Side(sentence="يستخدم الناس المضرب لضرب الكرة.", span=(13, 19), names=("مضرب",)),
                      Side(sentence="يستخدم الناس القفاز لضرب الكرة.", span=(13, 19), names=("قفاز",)),
                      spaced=True, script="Arab")
    assert arabic == []
    assert problems(Side(sentence="يستخدم الناس المضرب لضرب الكرة.", span=(13, 19), names=("مضرب",)),
                    Side(sentence="يستخدم الناس الكرة لضرب الكرة.", span=(13, 18), names=("كرة",)),
                    spaced=True, script="Arab")[0].startswith("the acceptable sentence")
    # Words, not letters, in spaced scripts: "ant" is not in "elephant".
    assert problems(Side(sentence="An elephant lives in colonies.", span=(0, 11), names=("elephant",)),
                    Side(sentence="An ant lives in colonies.", span=(0, 6), names=("ant",)), spaced=True, script="Latn") == []


WORDS = ["ong", "Ong", "bắp", "cày", "máy", "bay", "Bay", "STRASSE", "straße", "cafe\u0301", "café", "الكرة", "كرة",
         "للكرة", "ball", "football"]
SEPARATORS = [" ", "  ", "\u00a0", "-", ", ", "'", " (", ") "]


@st.composite
def spaced_text(draw, most: int = 6) -> str:
    words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=most))
    seps = draw(st.lists(st.sampled_from(SEPARATORS), min_size=len(words) + 1, max_size=len(words) + 1))
    return "".join(s + w for s, w in zip(seps, words)) + seps[-1]


@st.composite
def side(draw, unspaced: bool = False) -> Side:
    sentence = draw(st.text("球棒用于击球鹰會飛", min_size=1, max_size=12) if unspaced else spaced_text())
    start = draw(st.integers(0, len(sentence)))
    names = draw(st.lists(st.text("球棒鹰", min_size=1, max_size=2) if unspaced else spaced_text(2), min_size=1, max_size=2))
    return Side(sentence=sentence, span=(start, draw(st.integers(start, len(sentence)))), names=tuple(names))


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_the_occurrence_rule_clears_a_pair_unread_only_when_reading_it_word_by_word_finds_nothing(data):
    """The rule's shortcut is exact: separators other than one space, case, composed and decomposed letters,
    prefixed particles: whatever the word-by-word reading finds, the shortcut never clears."""
    unspaced = data.draw(st.booleans())
    script = "Hans" if unspaced else data.draw(st.sampled_from(["Latn", "Arab"]))
    a, u = data.draw(side(unspaced)), data.draw(side(unspaced))
    found = occurrence._read(a, u, spaced=not unspaced, script=script)
    assert not (found and occurrence.clear(a, u, spaced=not unspaced)), found
    assert problems(a, u, spaced=not unspaced, script=script) == found


def test_generated_pairs_naming_their_concept_twice_are_flagged_then_cleared_when_rewritten(sample_ws, server):
    ws = sample_ws
    group = [p for p in Scope.parse(ws, BALL).pairs(ws) if p["acceptable_id"] == concept_id("baseball bat")]
    words = {w["item_id"]: w["text"] for w in ws.rows(select(t.verified_words).where(t.verified_words.c.lang == "zh"))}
    english = {r["id"]: r["english"] for r in ws.rows(select(t.concepts))}
    for cid in {group[0]["acceptable_id"], *(p["unacceptable_id"] for p in group)}:  # one frame, naming the bat in it
        server.lexicon.sentences[("zh", BALL, english[cid])] = {
            "sentence": f"{words[cid]}用球棒击球。", "concept_span": words[cid], "concept_form": words[cid],
            "property_span": "用球棒击球"}
    run(ws, server, generate, ["zh"], BALL)
    summary = run(ws, server, audit, ["zh"], BALL)
    found = flags(ws, "occurrence")
    assert set(found) == {(p["id"], "zh") for p in group} and summary.findings["zh"]["occurrence"] == 4
    assert all(why.startswith("the acceptable concept occurs again outside its span in '球棒用球棒击球。' (at '球棒'); "
                              "the unacceptable sentence ") and why.endswith("contains the acceptable concept (球棒)")
               for why in found.values())
    assert next(s for s in status(ws, ["zh"])).flags["occurrence"] == 4

    # Written again without the repetition, the audit clears the flags it raised.
    with ws.transaction() as conn:
        conn.execute(t.sentence_pairs.delete().where(t.sentence_pairs.c.lang == "zh"))
    server.lexicon.sentences.clear()
    run(ws, server, generate, ["zh"], BALL, model="another-model")  # not the cached replies
    assert run(ws, server, audit, ["zh"], BALL).findings["zh"]["occurrence"] == 0 and flags(ws, "occurrence") == {}


# -- concept–property overlap ------------------------------------------------------------------------------


def test_overlap_finds_a_shared_character_or_word_stem_and_counts_shortcuts_per_type():
    assert shared("书架", "用于存放书籍", spaced=False) == {"书"}
    assert shared("蜜蜂", "会酿蜜", spaced=False) == {"蜜"}
    assert shared("衣柜", "用于存放书籍", spaced=False) == set()
    assert shared("bookcase", "is used for storing books", spaced=True) == {"book"}
    assert shared("wardrobe", "is used for storing books", spaced=True) == set()
    assert shared("Bücherregal", "wird zum Aufbewahren von Büchern verwendet", spaced=True) == {"büch"}
    rows = overlap_table("zh", [PairWords(negative_type="taxonomic", property="用于存放书籍", acceptable="书架", unacceptable="床"),
                                PairWords(negative_type="overlap", property="用于存放书籍", acceptable="书架", unacceptable="书桌"),
                                PairWords(negative_type="overlap", property="会飞", acceptable="鹰", unacceptable="企鹅"),
                                # the same concept under another property, after it: judged against that property's words
                                PairWords(negative_type="random", property="会飞", acceptable="书架", unacceptable="鹰")],
                         spaced=False, script="Hans")
    assert [(r.negative_type, r.pairs, r.positive, r.negative, r.shortcut) for r in rows] == \
        [("taxonomic", 1, 1, 0, 1), ("overlap", 2, 1, 1, 0), ("random", 1, 0, 0, 0)]


def test_status_reports_overlap_per_language_and_negative_type(sample_ws, server):
    ws = sample_ws
    run(ws, server, generate, ["zh"], BOOKS)
    zh = next(s for s in status(ws, ["zh"]))
    # 书架 / 用于存放书籍 share 书 in every pair of the group; none of the negatives does.
    assert [(o.negative_type, o.pairs, o.positive, o.negative, o.shortcut) for o in zh.overlap] == \
        [("taxonomic", 1, 1, 0, 1), ("overlap", 1, 1, 0, 1), ("co-occurrence", 1, 1, 0, 1), ("random", 1, 1, 0, 1)]


# -- the LLM judge ------------------------------------------------------------------------------------------


def test_a_negative_the_judge_calls_true_is_flagged_with_its_reason_and_blocks_the_release(sample_ws, server, tmp_path):
    ws = sample_ws
    server.lexicon.judgements[("en", "A wardrobe is used for storing books.")] = "Many people keep books in a wardrobe."
    run(ws, server, generate, ["en"], BOOKS)

    def sent() -> int:  # requests of the stages, not the client's one probe of the endpoint's structured outputs
        return server.stats.calls - server.stats.probes

    calls = sent()
    summary = run(ws, server, audit, ["en"], BOOKS)
    wardrobe = pair_id(BOOKS, "bookcase", "wardrobe")
    assert flags(ws, "judge") == {(wardrobe, "en"): "the judge says 'wardrobe' may have the property: "
                                                    "Many people keep books in a wardrobe."}
    assert summary.judged == {"en": 4} and summary.findings["en"]["judge"] == 1
    assert sent() == calls + 1  # one request for the concept-property's four negatives
    run(ws, server, audit, ["en"], BOOKS)
    assert sent() == calls + 1  # cached: a re-run costs nothing
    with pytest.raises(ReleaseCheckError, match="pair audits") as exc:
        publish(ws, PublishRequest(target=tmp_path / "r", version="0.1.0"))
    assert f"en {wardrobe}: the judge says 'wardrobe' may have the property" in str(exc.value)


# -- similarity ---------------------------------------------------------------------------------------------


def test_similarity_from_the_real_embedding_model_ranks_related_concepts_higher(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the weights come from the installed package
    close, far, kin, stranger = similarities([("toaster", "microwave"), ("toaster", "wren"), ("dog", "cat"), ("dog", "violin")])
    assert close > far and kin > stranger
    assert all(-1.0 <= x <= 1.0 for x in (close, far, kin, stranger))


def test_a_random_negative_more_similar_than_the_taxonomic_one_is_flagged():
    negs = {"taxonomic": ("x_t", "bookcase", 0.27), "overlap": ("x_o", "table", 0.45), "random": ("x_r", "pineapple", 0.33)}
    found = type_problems("stool", negs)
    assert list(found) == ["x_r"] and "the taxonomic negative 'bookcase' only 0.27" in found["x_r"]
    assert type_problems("stool", {**negs, "random": ("x_r", "saxophone", 0.11)}) == {}
    assert type_problems("stool", {**negs, "random": ("x_r", "pineapple", 0.30)}) == {}  # within the margin


# -- the bundled sample ---------------------------------------------------------------------------------------


def test_the_sample_is_clean_after_its_fixes(demo_ws, tmp_path):
    """The demo's workspace ran every audit (the judge replayed from the bundled recording): nothing is flagged."""
    ws = demo_ws
    assert [f for f in list_flags(ws) if f.stage in ("similarity", "occurrence", "judge")] == []
    demo = Scope.parse(ws, str(sample_dir() / "demo" / "properties.txt"))
    sims = [p["similarity"] for p in demo.pairs(ws)]
    assert len(sims) == 104 and all(isinstance(s, float) for s in sims)
    judged = ws.rows(select(t.llm_calls.c.lang).where(t.llm_calls.c.stage == "judge"))
    assert {r["lang"] for r in judged} == {"en", "de", "zh", "ar", "ja", "ru", "vi"}
    # Audited again from the recording: still nothing to flag, and nothing sent.
    summary = run_stage(ws, LLMSettings.from_env(), "audit",
                        lambda c, p: audit(ws, c, [registry(ws)[x] for x in ("en", "de", "zh", "ar", "ja", "ru", "vi")],
                                           scope=demo), None)
    assert summary.result.total == 0 and summary.stats.sent == 0


def test_the_card_shows_the_overlap_table(demo_ws, tmp_path):
    target = tmp_path / "releases"
    publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    card = (target / "README.md").read_text(encoding="utf-8")
    assert "## Concept–property overlap" in card
    zh = pq.read_table(next((target / "data" / "zh").glob("*.parquet"))).to_pylist()
    han = re.compile(r"[\u4e00-\u9fff]")  # the CJK ideographs the sample's Chinese uses
    for neg, name in enumerate(("taxonomic", "overlap", "co-occurrence", "random")):
        rows = [r for r in zh if r["negative_type"] == neg]
        pos = sum(bool(set(han.findall(r["acceptable_concept"])) & set(r["property"])) for r in rows)
        un = sum(bool(set(han.findall(r["unacceptable_concept"])) & set(r["property"])) for r in rows)
        cut = sum(bool(set(han.findall(r["acceptable_concept"])) & set(r["property"]))
                  and not set(han.findall(r["unacceptable_concept"])) & set(r["property"]) for r in rows)
        assert f"| zh | {name} | {len(rows)} | {pos} | {un} | {cut} ({100 * cut / len(rows):.0f}%) |" in card
    assert pos > 0  # the sample's Chinese has such pairs (书架 / 存放书籍)


# -- the release check: the audits' own rules, and their open flags -------------------------------------------


@pytest.mark.both_databases
def test_publish_refuses_what_the_occurrence_audit_finds_by_the_same_rule_and_its_open_flags_unless_waived(demo_ws, tmp_path):
    """Vietnamese "máy bay" (airplane) written a second time with a no-break space: no plain substring finds it,
    the audit's word-by-word rule does, and so does the release check now, which also reads the audit's open flags."""
    ws, target = demo_ws, tmp_path / "releases"
    vi = registry(ws)["vi"]
    plane = pair_id("can fly", "airplane", "train")
    sp = ws.rows(select(t.sentence_pairs).where(t.sentence_pairs.c.pair_id == plane, t.sentence_pairs.c.lang == "vi"))[0]
    word = ws.rows(select(t.verified_words.c.text).where(t.verified_words.c.lang == "vi",
                                                          t.verified_words.c.item_id == concept_id("airplane")))[0]["text"]
    again = f", như {word.replace(' ', chr(0xA0))}."  # the same tail on both sentences: the frame stays whole
    assert word == "máy bay" and word not in again

    def write(acceptable: str, unacceptable: str) -> None:
        with ws.transaction() as conn:
            conn.execute(t.sentence_pairs.update().where(t.sentence_pairs.c.pair_id == plane, t.sentence_pairs.c.lang == "vi")
                         .values(acceptable=acceptable, unacceptable=unacceptable))

    def refused() -> str:
        res = cli("publish", "--dry-run", "--version", "1.0.0", "--to", target, "-w", ws.directory)
        assert res.exit_code == 1 and "release checks failed (pair audits)" in res.output
        return next(line for line in res.output.splitlines() if plane in line)

    write(sp["acceptable"].rstrip(".") + again, sp["unacceptable"].rstrip(".") + again)
    line = refused()  # found at publish before any audit ran
    assert "the acceptable concept occurs again outside its span" in line and "contains the acceptable concept" in line
    assert f"or waive the pair (`builder releases waive {plane} -l vi --reason … --by …`)" in line
    audit_summary = asyncio.run(audit(ws, None, [vi]))
    assert audit_summary.findings["vi"]["occurrence"] == 1
    (flag,) = [why for (pid, lang), why in flags(ws, "occurrence").items() if (pid, lang) == (plane, "vi")]
    assert f"vi {plane}: {flag}; or waive" in line  # one rule: the audit's flag is the check's finding, word for word

    # Fixed by hand without auditing again: the open flag still holds the pair back, and says what clears it.
    write(sp["acceptable"], sp["unacceptable"])
    assert f"{flag} (an open occurrence flag); the pair as released no longer shows it: run `builder audit -l vi` " \
           "to clear the flag" in refused()
    res = cli("audit", "-l", "vi", "-w", ws.directory)
    assert res.exit_code == 0, res.output
    assert flags(ws, "occurrence") == {}
    assert cli("publish", "--dry-run", "--version", "1.0.0", "--to", target, "-w", ws.directory).exit_code == 0

    # Or a maintainer waives the finding, with who and why recorded; the pair is released as it is.
    write(sp["acceptable"].rstrip(".") + again, sp["unacceptable"].rstrip(".") + again)
    waived = cli("releases", "waive", plane, "-l", "vi", "--reason", "the repetition is the point", "--by", "maintainer",
                 "-w", ws.directory)
    assert waived.exit_code == 0, waived.output
    res = cli("publish", "--version", "1.0.0", "--to", target, "-w", ws.directory)
    assert res.exit_code == 0, res.output
    assert f"1 finding(s) waived: vi {plane}: waived (the repetition is the point, by maintainer)" in res.output
    released = {r["pair_id"]: r for r in load(target, "1.0.0", "vi")}
    assert released[plane]["acceptable_sentence"].endswith(again)
