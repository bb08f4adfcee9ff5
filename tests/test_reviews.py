"""The review owner without Label Studio: typed annotation records in; decisions, verified words,
adjudication and agreement out. Proposals, sentences and inflection forms come from the real stages
against the OpenAI-compatible stand-in server."""

import json
import unicodedata
from datetime import datetime, timedelta, timezone

import pytest
from conftest import with_llm
from hypothesis import given, settings
from hypothesis import strategies as st
from nltk.metrics.distance import edit_distance as levenshtein
from sqlalchemy import select
from test_generate import stage
from test_m2c_workspace import _templates
from typer.testing import CliRunner

from builder import reviews
from builder.audits import audit
from builder.cli import app
from builder.flags import list_flags
from builder.generate import generate, regenerate
from builder.languages import registry
from builder.m2c.fills import needs, propose_forms
from builder.records import VerifiedWord, pair_id
from builder.reviews import (
    Annotation,
    FormsEdit,
    ReviewProject,
    SentenceEdit,
    TranslationEdit,
    record_pull,
)
from builder.textdiff import edit_distance
from builder.translate import repropose, translate
from builder.workspace import schema as t

pytestmark = pytest.mark.both_databases

SERVER = "local:0123456789abcdef0123456789abcdef"
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)
PROPS = "can fly"




def _project(ws, stage_name, lang):
    reviews.remember_project(ws, ReviewProject(stage=stage_name, lang=lang, project_id=len(reviews.review_projects(ws)) + 1,
                                               title=f"[{stage_name}:{lang}] review", server=SERVER))


def said(aid, item, proposal_id, reviewer, decision, text=None, *, stage_name="translation", minutes=0, comment="",
         cancelled=False):
    """A translation (or adjudication) annotation as `annotation` would hand it over."""
    ts = T0 + timedelta(minutes=minutes)
    return Annotation(stage=stage_name, lang="fr", item_id=item, annotation_id=aid, server=SERVER, task_id=1000 + aid,
                      decision=decision, comment=comment, reviewer=reviewer, cancelled=cancelled, lead_time_s=3.0,
                      created_at=T0, updated_at=ts, translation=TranslationEdit(proposal_id=proposal_id, text=text))


def _words(ws, lang="fr"):
    return {r["item_id"]: r for r in ws.rows(select(t.verified_words).where(t.verified_words.c.lang == lang))}


@pytest.fixture
def fr(sample_ws, server):
    """French proposals for the items of one property, and a translation project on the server."""
    stage(sample_ws, server, translate, ["fr"], PROPS)
    _project(sample_ws, "translation", "fr")
    return sample_ws, reviews.latest_proposals(sample_ws, "fr")


def test_one_curator_decides_alone_with_lineage_and_a_repeated_pull_changes_nothing(fr):
    ws, latest = fr
    acc, cor, rej, skip = sorted(latest)[:4]
    anns = [said(1, acc, latest[acc]["id"], "ana", "accept"),
            said(2, cor, latest[cor]["id"], "ana", "corrected", "la correction"),
            said(3, rej, latest[rej]["id"], "ana", "reject", comment="wrong sense"),
            said(4, skip, latest[skip]["id"], "ana", None, cancelled=True)]
    s = record_pull(ws, SERVER, anns)
    assert (s.new, s.verified, s.rejected, s.by_decision) == (4, 2, 1, {"accept": 1, "corrected": 1, "reject": 1})
    words = _words(ws)
    assert set(words) == {acc, cor}
    assert words[acc]["text"] == latest[acc]["text"] and words[cor]["text"] == "la correction"
    review = ws.rows(select(t.reviews).where(t.reviews.c.id == words[cor]["review_id"]))[0]
    assert (words[cor]["proposal_id"], words[cor]["origin"], words[cor]["reviewer"]) == (latest[cor]["id"], "review", "ana")
    assert (review["decision"], review["channel"], review["proposal_id"]) == ("corrected", "label-studio", latest[cor]["id"])
    stored = {r["item_id"]: r for r in ws.rows(select(t.review_annotations))}
    assert stored[cor]["edit_distance"] > 0 and stored[acc]["edit_distance"] == 0 and stored[acc]["final_text"] == latest[acc]["text"]
    assert stored[skip]["cancelled"] and stored[skip]["decision"] is None
    assert set(reviews.rejected_items(ws, "fr")) == {rej} and reviews.rejected_items(ws, "fr")[rej]["comment"] == "wrong sense"
    n_reviews = ws.count(t.reviews)
    again = record_pull(ws, SERVER, anns)
    assert (again.new, again.updated, again.unchanged, again.verified) == (0, 0, 4, 0) and ws.count(t.reviews) == n_reviews
    # The curator edits the correction later: the same annotation, the same review, the new text.
    edited = record_pull(ws, SERVER, [said(2, cor, latest[cor]["id"], "ana", "corrected", "la bonne correction", minutes=5)])
    assert (edited.new, edited.updated) == (0, 1) and ws.count(t.reviews) == n_reviews
    assert _words(ws)[cor]["text"] == "la bonne correction" and _words(ws)[cor]["review_id"] == words[cor]["review_id"]


def test_a_disagreement_blocks_verification_until_adjudicated(fr):
    ws, latest = fr
    agree, disagree, same_fix = sorted(latest)[:3]
    p = {i: latest[i]["id"] for i in (agree, disagree, same_fix)}
    record_pull(ws, SERVER, [
        said(1, agree, p[agree], "bo", "accept"), said(2, agree, p[agree], "cy", "accept"),
        said(3, disagree, p[disagree], "bo", "accept"), said(4, disagree, p[disagree], "cy", "corrected", "ventilateur"),
        said(5, same_fix, p[same_fix], "bo", "corrected", "grille-pain"), said(6, same_fix, p[same_fix], "cy", "corrected", "grille-pain"),
    ])
    words = _words(ws)
    assert disagree not in words and words[same_fix]["text"] == "grille-pain"
    assert words[agree]["reviewer"] == "bo, cy"
    assert set(reviews.disagreements(ws, "fr")) == {disagree}
    agr = reviews.stage_agreement(ws, "fr").agreement
    assert (agr.items, agr.text_pairs) == (3, 3)
    assert agr.observed == pytest.approx(2 / 3) and agr.exact_match == pytest.approx(2 / 3) and agr.alpha is not None
    status = {(r["stage"], r["lang"]): r for r in reviews.review_status(ws)}[("translation", "fr")]
    assert (status["disagreements"], status["pending"], status["accept"], status["corrected"]) == (1, len(latest) - 3, 1, 1)
    assert status["reviewers"] == ["bo", "cy"] and status["agreement"] == agr.model_dump()
    # The adjudicator decides; the decision wins and names them.
    _project(ws, "adjudication", "fr")
    record_pull(ws, SERVER, [said(7, disagree, p[disagree], "dee", "corrected", "ventilateur de plafond",
                               stage_name="adjudication", minutes=10)])
    word = _words(ws)[disagree]
    assert (word["text"], word["reviewer"]) == ("ventilateur de plafond", "dee (adjudicated)")
    review = ws.rows(select(t.reviews).where(t.reviews.c.id == word["review_id"]))[0]
    assert review["decision"] == "corrected" and review["reviewer"] == "dee (adjudicated)"
    assert reviews.disagreements(ws, "fr") == {}


def test_review_status_counts_a_disputed_item_among_disagreements_only(fr):
    """Every item decided, one disputed: it waits for the adjudicator alone, so status shows nothing pending for the
    curators and one disagreement, and the next steps send it to adjudication only."""
    ws, latest = fr
    disputed = sorted(latest)[0]
    record_pull(ws, SERVER, [said(n, item, p["id"], "bo", "accept") for n, (item, p) in enumerate(sorted(latest.items()), 1)]
                + [said(len(latest) + 1, disputed, latest[disputed]["id"], "cy", "corrected", "ventilateur")])
    res = CliRunner().invoke(app, ["review", "status", "--json", "-w", str(ws.directory)])
    assert res.exit_code == 0, res.output
    row = {(r["stage"], r["lang"]): r for r in json.loads(res.output)}[("translation", "fr")]
    assert (row["pending"], row["disagreements"], row["accept"]) == (0, 1, len(latest) - 1)
    shown = CliRunner().invoke(app, ["review", "status", "-w", str(ws.directory)]).output
    assert "1 translation item(s) whose curators disagree wait for an adjudicator" in shown
    assert "translation item(s) wait for curators" not in shown


def test_a_correction_after_verification_withdraws_the_word_until_an_adjudicator_settles_it(fr):
    ws, latest = fr
    item, other = sorted(latest)[:2]
    p, q = latest[item]["id"], latest[other]["id"]
    s = record_pull(ws, SERVER, [said(1, item, p, "bo", "accept"), said(2, other, q, "bo", "reject", comment="wrong sense")])
    assert s.verified == 1 and _words(ws)[item]["reviewer"] == "bo" and set(reviews.rejected_items(ws, "fr")) == {other}
    # A second curator corrects the verified word, a third accepts the rejected one: both items now wait.
    s = record_pull(ws, SERVER, [said(3, item, p, "cy", "corrected", "ventilateur", minutes=5),
                                 said(4, other, q, "cy", "accept", minutes=5)])
    assert item not in _words(ws) and s.withdrawn == 1 and s.disagreements == {("translation", "fr"): 2}
    assert set(reviews.disagreements(ws, "fr")) == {item, other}
    assert reviews.rejected_items(ws, "fr") == {}  # a disputed rejection goes to the adjudicator, not back to the LLM
    assert not ws.rows(select(t.reviews).where(t.reviews.c.proposal_id.in_((p, q))))  # no decision holds on either
    status = {(r["stage"], r["lang"]): r for r in reviews.review_status(ws)}[("translation", "fr")]
    assert (status["disagreements"], status["accept"], status["reject"]) == (2, 0, 0)
    assert record_pull(ws, SERVER, []).disagreements == {}  # said once, when they arise
    assert record_pull(ws, SERVER, [said(6, item, p, "dag", "accept", minutes=6)]).disagreements == {}  # not new
    # The adjudicator takes the first curator's word: verified again, under the adjudicator's name.
    _project(ws, "adjudication", "fr")
    s = record_pull(ws, SERVER, [said(5, item, p, "dee", "accept", latest[item]["text"], stage_name="adjudication", minutes=10)])
    word = _words(ws)[item]
    assert s.verified == 1 and (word["text"], word["reviewer"]) == (latest[item]["text"], "dee (adjudicated)")
    assert set(reviews.disagreements(ws, "fr")) == {other}


def test_a_curator_who_changes_an_accept_to_a_reject_takes_the_word_back(fr):
    ws, latest = fr
    item = sorted(latest)[0]
    record_pull(ws, SERVER, [said(1, item, latest[item]["id"], "bo", "accept")])
    s = record_pull(ws, SERVER, [said(1, item, latest[item]["id"], "bo", "reject", comment="wrong sense", minutes=3)])
    assert item not in _words(ws) and s.withdrawn == 1 and s.disagreements == {}
    assert reviews.rejected_items(ws, "fr")[item]["comment"] == "wrong sense"


def test_an_annotation_deleted_in_label_studio_stops_counting_and_keeps_its_row(fr):
    ws, latest = fr
    a, b = sorted(latest)[:2]
    pa, pb = latest[a]["id"], latest[b]["id"]
    anns = [said(1, a, pa, "bo", "accept"), said(2, b, pb, "bo", "accept"), said(3, b, pb, "cy", "corrected", "x")]
    record_pull(ws, SERVER, anns, exported=[("translation", "fr")])
    assert a in _words(ws) and b not in _words(ws)
    # Annotations 1 and 3 were deleted in Label Studio: the export of the translation project lacks them.
    s = record_pull(ws, SERVER, [anns[1]], exported=[("translation", "fr")])
    assert (s.deleted, s.unchanged, s.withdrawn, s.verified) == (2, 1, 1, 1)
    words = _words(ws)
    assert a not in words and words[b]["reviewer"] == "bo" and reviews.disagreements(ws, "fr") == {}
    rows = {r["annotation_id"]: r for r in ws.rows(select(t.review_annotations))}
    assert set(rows) == {1, 2, 3} and rows[2]["withdrawn_at"] is None
    assert rows[1]["withdrawn_at"] is not None and rows[3]["withdrawn_at"] is not None and rows[3]["final_text"] == "x"
    status = {(r["stage"], r["lang"]): r for r in reviews.review_status(ws)}[("translation", "fr")]
    assert (status["annotations"], status["reviewers"], status["accept"]) == (1, ["bo"], 1)
    assert record_pull(ws, SERVER, [anns[1]], exported=[("translation", "fr")]).deleted == 0  # withdrawn once
    assert record_pull(ws, SERVER, [], exported=[("sentences", "fr")]).deleted == 0  # another project's export
    # An annotation that comes back (a server restored from a backup) counts again.
    s = record_pull(ws, SERVER, anns, exported=[("translation", "fr")])
    assert s.updated == 2 and a in _words(ws) and set(reviews.disagreements(ws, "fr")) == {b}


def test_an_annotation_made_before_a_re_proposal_stays_on_its_proposal(fr, server):
    ws, latest = fr
    item = sorted(latest)[0]
    first = latest[item]
    record_pull(ws, SERVER, [said(1, item, first["id"], "ana", "reject", comment="wrong sense: the sports bat")])
    rejected = reviews.rejected_items(ws, "fr")
    assert with_llm(ws, server, lambda c: repropose(ws, c, registry()["fr"], rejected)) == 1
    second = reviews.latest_proposals(ws, "fr")[item]
    assert second["revision"] == 2 and item not in reviews.rejected_items(ws, "fr")  # the reject was on the old proposal
    # The curator changes the old annotation after the task was updated to show the new proposal: it stays
    # on the proposal it was made on, which is no longer current, so it verifies nothing.
    s = record_pull(ws, SERVER, [said(1, item, second["id"], "ana", "accept", minutes=5)])
    assert s.updated == 1 and s.verified == 0 and item not in _words(ws)
    old = ws.rows(select(t.review_annotations).where(t.review_annotations.c.annotation_id == 1))[0]
    assert old["proposal_id"] == first["id"] and old["final_text"] == first["text"]
    # A new annotation on the new proposal decides it.
    s = record_pull(ws, SERVER, [said(2, item, second["id"], "ana", "accept", minutes=6)])
    word = _words(ws)[item]
    assert s.verified == 1 and word["proposal_id"] == second["id"] and "revised" in word["text"]


def test_sentence_decisions_count_only_for_the_pair_version_they_were_made_on(sample_ws, server):
    ws = sample_ws
    stage(ws, server, generate, ["de"], PROPS)
    _project(ws, "sentences", "de")
    pairs = reviews.current_pairs(ws, "de")
    keep, fix = sorted(pairs)[:2]

    def on(aid, pair, decision, *, unacceptable=None, comment="", minutes=0, version=None):
        sp = pairs[pair]
        return Annotation(stage="sentences", lang="de", item_id=pair, annotation_id=aid, server=SERVER, task_id=aid,
                          decision=decision, comment=comment, reviewer="ana", created_at=T0,
                          updated_at=T0 + timedelta(minutes=minutes),
                          sentences=SentenceEdit(version=version or sp["version"], draft_acceptable=sp["acceptable"],
                                                 draft_unacceptable=sp["unacceptable"], unacceptable=unacceptable))

    record_pull(ws, SERVER, [on(1, keep, "accept"), on(2, fix, "reject", comment="the property reads as a question")])
    got = reviews.sentence_decisions(ws, "de")
    assert got[keep].decision == "accept" and (got[keep].acceptable, got[keep].unacceptable) == (
        pairs[keep]["acceptable"], pairs[keep]["unacceptable"])
    assert reviews.rejected_pairs(ws, "de") == {fix: "the property reads as a question"}
    assert with_llm(ws, server, lambda c: regenerate(ws, c, registry(ws)["de"], reviews.rejected_pairs(ws, "de"))).generated["de"] == 1
    new_version = reviews.current_pairs(ws, "de")[fix]["version"]
    assert new_version != pairs[fix]["version"]
    assert fix not in reviews.sentence_decisions(ws, "de") and reviews.rejected_pairs(ws, "de") == {}
    # An edit of the old annotation after the task shows the new sentences stays on the version it was made on.
    record_pull(ws, SERVER, [on(2, fix, "fix", unacceptable="Ein Satz.", minutes=5, version=new_version)])
    assert fix not in reviews.sentence_decisions(ws, "de")
    status = {(r["stage"], r["lang"]): r for r in reviews.review_status(ws)}[("sentences", "de")]
    assert (status["pending"], status["accept"], status["fix"], status["reject"]) == (len(pairs) - 1, 1, 0, 0)


def test_inflection_decisions_go_through_the_lexicon_and_unreadable_tables_are_counted(ws, server, tmp_path):
    server.lexicon.inflections.update({("de", "Tisch", "SG.DAT"): "Tisch", ("de", "Tisch", "PL.DAT"): "Tischen",
                                       ("de", "Lampe", "SG.DAT"): "Lampe", ("de", "Lampe", "PL.DAT"): "Lampe"})
    with_llm(ws, server, lambda c: propose_forms(ws, c, registry(ws)["de"], needs(ws, "de", _templates(tmp_path))))
    waiting = {tb["lemma"]: (item, tb["draft"]) for item, tb in reviews.current_tables(ws, "de").items()}

    def table(aid, lemma, decision, text=None):
        item, draft = waiting[lemma]
        return Annotation(stage="inflections", lang="de", item_id=item, annotation_id=aid, server=SERVER, task_id=aid,
                          decision=decision, reviewer="ana", created_at=T0, updated_at=T0 + timedelta(minutes=aid),
                          forms=FormsEdit(lemma=lemma, draft=draft, text=text))

    s = record_pull(ws, SERVER, [table(1, "Tisch", "accept"), table(2, "Lampe", "fix", "SG.DAT Lampe\nPL.DAT"),
                                 table(3, "Bett", "reject")])
    assert s.new == 3 and s.forms == {"verified": 2, "rejected": 2, "invalid": 1, "corrected": 0}
    s = record_pull(ws, SERVER, [table(4, "Lampe", "fix", "SG.DAT\tLampe\nPL.DAT\tLampen")])
    assert s.forms == {"verified": 1, "corrected": 1, "rejected": 0}
    forms = {(r["lemma"], r["features"]): r for r in ws.rows(select(t.lexicon_forms))}
    assert (forms[("Lampe", "PL.DAT")]["form"], forms[("Lampe", "PL.DAT")]["proposed_form"]) == ("Lampen", "Lampe")
    assert forms[("Tisch", "PL.DAT")]["reviewer"] == "ana" and forms[("Bett", "SG.DAT")]["status"] == "rejected"


def test_a_disagreement_after_an_inflection_table_was_verified_puts_its_forms_back(ws, server, tmp_path):
    server.lexicon.inflections.update({("de", "Tisch", "SG.DAT"): "Tisch", ("de", "Tisch", "PL.DAT"): "Tischen"})
    with_llm(ws, server, lambda c: propose_forms(ws, c, registry(ws)["de"], needs(ws, "de", _templates(tmp_path))))
    item, tisch = next((i, tb) for i, tb in reviews.current_tables(ws, "de").items() if tb["lemma"] == "Tisch")

    def table(aid, reviewer, decision, text=None, stage_name="inflections"):
        return Annotation(stage=stage_name, lang="de", item_id=item, annotation_id=aid, server=SERVER, task_id=aid,
                          decision=decision, reviewer=reviewer, created_at=T0, updated_at=T0 + timedelta(minutes=aid),
                          forms=FormsEdit(lemma="Tisch", draft=tisch["draft"], text=text))

    def forms():
        return {r["features"]: r for r in ws.rows(select(t.lexicon_forms)) if r["lemma"] == "Tisch"}

    _project(ws, "inflections", "de")
    record_pull(ws, SERVER, [table(1, "ana", "accept")])
    assert {r["status"] for r in forms().values()} == {"verified"} and item not in reviews.current_tables(ws, "de")
    fixed = tisch["draft"].replace("Tischen", "Tischen (pl.)")
    s = record_pull(ws, SERVER, [table(2, "bo", "fix", fixed)])
    assert s.forms["withdrawn"] == 2 and s.disagreements == {("inflections", "de"): 1}
    assert {r["status"] for r in forms().values()} == {"proposed"}
    assert reviews.current_tables(ws, "de")[item]["version"] == tisch["version"]  # the table the curators saw, waiting
    assert set(reviews.disagreements(ws, "de", "inflections")) == {item}
    _project(ws, "adjudicate-forms", "de")
    record_pull(ws, SERVER, [table(3, "dee", "fix", fixed, stage_name="adjudicate-forms")])
    settled = forms()
    assert {r["status"] for r in settled.values()} == {"verified"} and settled["PL.DAT"]["form"] == "Tischen (pl.)"
    assert settled["PL.DAT"]["reviewer"] == "dee (adjudicated)" and reviews.disagreements(ws, "de", "inflections") == {}


def test_a_disputed_verdict_of_the_judge_is_flagged_again_until_adjudicated(sample_ws, server):
    ws, books = sample_ws, "is used for storing books"
    server.lexicon.judgements[("en", "A wardrobe is used for storing books.")] = "Many people keep books in a wardrobe."
    stage(ws, server, generate, ["en"], books)
    stage(ws, server, audit, ["en"], books)
    wardrobe = pair_id(books, "bookcase", "wardrobe")
    assert set(reviews.judge_pending(ws, "en")) == {wardrobe}
    sp = reviews.current_pairs(ws, "en")[wardrobe]

    def verdict(aid, reviewer, decision, stage_name="judge"):
        return Annotation(stage=stage_name, lang="en", item_id=wardrobe, annotation_id=aid, server=SERVER, task_id=aid,
                          decision=decision, reviewer=reviewer, created_at=T0, updated_at=T0 + timedelta(minutes=aid),
                          sentences=SentenceEdit(version=sp["version"], draft_acceptable=sp["acceptable"],
                                                 draft_unacceptable=sp["unacceptable"]))

    _project(ws, "judge", "en")
    record_pull(ws, SERVER, [verdict(1, "ana", "keep")])
    assert list_flags(ws, stage="judge") == [] and reviews.judge_pending(ws, "en") == {}
    s = record_pull(ws, SERVER, [verdict(2, "bo", "false negative")])
    assert s.disagreements == {("judge", "en"): 1}
    (flag,) = list_flags(ws, stage="judge")
    assert flag.item_id == wardrobe and "ana: keep; bo: false negative" in flag.reason
    assert "builder review push --stage adjudicate-judge --lang en" in flag.reason
    assert set(reviews.judge_pending(ws, "en")) == {wardrobe} and wardrobe not in reviews.judge_decisions(ws, "en")
    _project(ws, "adjudicate-judge", "en")
    record_pull(ws, SERVER, [verdict(3, "dee", "keep", stage_name="adjudicate-judge")])
    assert list_flags(ws, stage="judge") == [] and reviews.judge_decisions(ws, "en")[wardrobe].reviewer == "dee (adjudicated)"


def test_annotations_on_what_this_workspace_does_not_have_are_ignored_and_counted(fr):
    """Another workspace's tasks (a project two workspaces of an earlier version shared): an annotation on a proposal
    this workspace never made, on one of another item, or on sentences of a pair it never wrote, is not recorded; its
    task is counted; the workspace's own annotations in the same pull are recorded as ever."""
    ws, latest = fr
    mine, other = sorted(latest)[:2]
    unknown = max(p["id"] for p in latest.values()) + 1000
    sentence = Annotation(stage="sentences", lang="fr", item_id="p-nowhere", annotation_id=13, server=SERVER, task_id=1013,
                          decision="accept", reviewer="bo", created_at=T0, updated_at=T0,
                          sentences=SentenceEdit(version="v", draft_acceptable="a", draft_unacceptable="b"))
    _project(ws, "sentences", "fr")
    s = record_pull(ws, SERVER, [said(10, mine, latest[mine]["id"], "bo", "accept"),
                                 said(11, other, unknown, "bo", "accept"),  # a proposal made elsewhere
                                 said(12, other, latest[mine]["id"], "bo", "corrected", "x"),  # another item's proposal
                                 sentence])
    assert (s.new, s.verified, s.ignored) == (1, 1, {("translation", "fr"): 2, ("sentences", "fr"): 1})
    assert [(c.item_id, c.change) for c in s.changes] == [(mine, "new")]
    assert ws.column(select(t.review_annotations.c.annotation_id)) == [10] and set(_words(ws)) == {mine}


def test_records_that_do_not_fit_are_refused_with_the_annotation_named(fr):
    ws, latest = fr
    item = sorted(latest)[0]
    with pytest.raises(ValueError, match="annotation 9 .*decision 'fix' is not one of accept, corrected, reject, ambiguous"):
        said(9, item, latest[item]["id"], "ana", "fix")
    with pytest.raises(ValueError, match="annotation 9 .*; a sentences annotation carries 'sentences'"):
        said(9, item, latest[item]["id"], "ana", "accept", stage_name="sentences")
    with pytest.raises(ValueError, match="not from the pulled server local:other"):
        record_pull(ws, "local:other", [said(9, item, latest[item]["id"], "ana", "accept")])
    assert ws.count(t.review_annotations) == 0


def test_seed_words_are_recorded_once_and_only_as_source_or_seed(ws):
    word = VerifiedWord(item_id="c_1", kind="concept", lang="de", text="Toaster", origin="seed", reviewer="expert")
    with ws.transaction() as c:
        assert reviews.record_seed_words(ws, c, [word]) == 1
    with ws.transaction() as c:
        assert reviews.record_seed_words(ws, c, [word.model_copy(update={"text": "Brotröster"})]) == 0
    assert _words(ws, "de")["c_1"]["text"] == "Toaster"
    with pytest.raises(ValueError, match="origin is source or seed, not 'review'"), ws.transaction() as c:
        reviews.record_seed_words(ws, c, [word.model_copy(update={"origin": "review"})])


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="abcé\u0301 ", max_size=12), st.text(alphabet="abcé\u0301 ", max_size=12))
def test_edit_distance_is_levenshtein_on_nfc_text(a, b):
    """Trimming the common prefix and suffix first changes nothing (combining accents included); nltk's
    Levenshtein distance is the reference."""
    assert edit_distance(a, b) == levenshtein(unicodedata.normalize("NFC", a), unicodedata.normalize("NFC", b))
    assert edit_distance(a, a) == 0
