"""Every flag has a way out, driven through the CLI as a maintainer would: each LLM stage asks its flagged items
again with the reason, a bounded number of runs; then the item waits for a person, and the printed next steps
say how to write it by hand or ask again anyway. Each printed command is run as printed and moves its item."""

import re
import shlex
from datetime import datetime, timedelta, timezone

import pytest
from curating import follow, step, steps
from sqlalchemy import func, select
from test_m2c_workspace import _templates
from typer.testing import CliRunner

from builder import reviews
from builder.cli import app
from builder.flags import RUNS, list_flags
from builder.m2c.fills import needs
from builder.records import concept_id, pair_id
from builder.reviews import Annotation, ReviewProject, SentenceEdit, TranslationEdit, record_pull
from builder.testing.standin import Faults
from builder.workspace import schema as t

runner = CliRunner()
SERVER = "local:0123456789abcdef0123456789abcdef"
PROP = "is used for heating food"
EARLIER = "An earlier answer for these items could not be used"


@pytest.fixture
def cli(sample_ws, server):
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k", "BUILDER_LLM_MODEL": "standin-translator"}

    def run(*args, ok=True):
        res = runner.invoke(app, list(args), env=env, catch_exceptions=False)
        assert res.exit_code == 0 or not ok, res.output
        return res.output

    run.here = ("-w", str(sample_ws.directory))
    return run


def flags(ws) -> dict[tuple[str, str, str], int]:
    return {(f.stage, f.lang, f.item_id): f.attempts for f in list_flags(ws)}


def asked(ws) -> list[str]:
    return [m["content"] for r in ws.rows(select(t.llm_cache.c.request)) for m in r["request"]["messages"] if m["role"] == "user"]


def _project(ws, stage, lang):
    reviews.remember_project(ws, ReviewProject(stage=stage, lang=lang, project_id=len(reviews.review_projects(ws)) + 1,
                                               title=f"[{stage}:{lang}]", server=SERVER))


def _said(aid, stage, item, decision, *, comment="", translation=None, sentences=None, minutes=0):
    ts = datetime(2026, 1, 5, 9, tzinfo=timezone.utc) + timedelta(minutes=minutes)
    return Annotation(stage=stage, lang="fr", item_id=item, annotation_id=aid, server=SERVER, task_id=1000 + aid,
                      decision=decision, comment=comment, reviewer="ana", created_at=ts, updated_at=ts,
                      translation=translation, sentences=sentences)


def test_translate_asks_flagged_items_again_with_the_reason_until_a_person_writes_them(sample_ws, server, cli, tmp_path):
    ws = sample_ws
    kettle = concept_id("kettle")
    server.lexicon.translations[("fr", "concept", "kettle")] = {"translation": "  ", "alternatives": []}  # never valid
    out = cli("translate", "--lang", "fr", *cli.here)
    assert flags(ws) == {("translate", "fr", kettle): 1}
    for run in range(2, RUNS + 1):
        calls = server.stats.calls
        out = follow(cli, out, "1 item(s) the LLM could not translate: asked again, with the reason")
        assert flags(ws) == {("translate", "fr", kettle): run} and server.stats.calls > calls  # asked anew, not from the cache
    assert any(f"{EARLIER}:\n- {kettle}: failed validation: translation: Value error, translation is blank "
               f"(given up {RUNS - 1} time(s))" in m for m in asked(ws))
    # Given up RUNS times: a run leaves it be, and the steps say how to write it by hand or ask again anyway.
    calls = server.stats.calls
    assert "requests sent 0" in cli("translate", "--lang", "fr", *cli.here) and server.stats.calls == calls
    assert step(cli("status", *cli.here), f"1 item(s) the LLM could not translate in {RUNS} runs") == \
        step(out, f"1 item(s) the LLM could not translate in {RUNS} runs")
    anyway = follow(cli, out, "or ask the LLM again for those 1 anyway")
    assert server.stats.calls > calls and flags(ws) == {("translate", "fr", kettle): RUNS + 1}
    seed = tmp_path / "hand.csv"
    seed.write_text(f"language,item_id,text,translator\nfr,{kettle},bouilloire,ana\n", encoding="utf-8")
    follow(cli, anyway, f"1 item(s) the LLM could not translate in {RUNS} runs: write each word in a CSV file",
           **{"FILE.csv": seed})
    word = ws.rows(select(t.verified_words).where(t.verified_words.c.lang == "fr", t.verified_words.c.item_id == kettle))[0]
    assert (word["text"], word["origin"]) == ("bouilloire", "seed") and flags(ws) == {}
    assert not [s for s in steps(cli("status", *cli.here)) if "could not translate" in s[0]]


@pytest.mark.both_databases
def test_generate_asks_flagged_pairs_again_and_writes_pairs_again_whose_words_were_verified_again(sample_ws, server, cli):
    ws = sample_ws
    cli("translate", "--lang", "fr", "--properties", PROP, *cli.here)
    cli("accept", "--lang", "fr", "--reviewer", "ana", *cli.here)
    kettle = concept_id("kettle")
    pair = pair_id(PROP, "toaster", "kettle")
    server.lexicon.sentences[("fr", PROP, "kettle")] = {"sentence": "Rien.", "concept_span": "Rien", "concept_form": "Rien",
                                                        "property_span": "Rien"}  # never the verified word
    out = cli("generate", "--lang", "fr", "--properties", PROP, *cli.here)
    assert flags(ws) == {("generate", "fr", pair): 1}
    # Before, a dry run of generate asked for nothing: flagged pairs were never asked again.
    assert "dry run: 1 request(s)" in cli("generate", "--lang", "fr", "--dry-run", *cli.here)
    assert step(cli("status", *cli.here), "1 pair(s) the LLM could not write") == \
        step(cli("review", "status", *cli.here), "1 pair(s) the LLM could not write") == \
        shlex.join(["builder", "generate", "--lang", "fr", *cli.here])
    assert step(out, "1 pair(s) the LLM could not write") == \
        shlex.join(["builder", "generate", "--lang", "fr", "--properties", PROP, *cli.here])  # the run's own scope
    for run in range(2, RUNS + 1):
        out = follow(cli, out, "1 pair(s) the LLM could not write: asked again, with the reason")
        assert flags(ws) == {("generate", "fr", pair): run}
    assert any(EARLIER in m and "(given up 1 time(s))" in m for m in asked(ws))
    assert step(out, f"1 pair(s) the LLM could not write in {RUNS} runs: a curator writes the sentences in Label Studio")
    calls = server.stats.calls
    assert "requests sent 0" in cli("generate", "--lang", "fr", *cli.here) and server.stats.calls == calls
    del server.lexicon.sentences[("fr", PROP, "kettle")]
    follow(cli, out, "or ask the LLM again for those 1 anyway")
    row = ws.rows(select(t.sentence_pairs).where(t.sentence_pairs.c.pair_id == pair, t.sentence_pairs.c.lang == "fr"))[0]
    assert row["status"] == "generated" and flags(ws) == {}

    # A curator corrects a word after its sentences were written: the release holds those pairs, naming the command
    # that writes them again, and that command does.
    proposal = reviews.latest_proposals(ws, "fr")[kettle]
    _project(ws, "translation", "fr")
    record_pull(ws, SERVER, [_said(1, "translation", kettle, "corrected", translation=TranslationEdit(
        proposal_id=proposal["id"], text="bouilloire"))])
    held = cli("publish", "--dry-run", "--bump", "minor", "--lang", "fr", *cli.here, ok=False)
    why = re.findall(r"concept c_\w+ was re-verified after the sentence was written \(`([^`]+)` writes it again\)", held)
    assert why and set(why) == {"builder generate --lang fr"}
    assert step(cli("status", *cli.here), "pair(s) written before a word of theirs was verified again") == \
        shlex.join(["builder", "generate", "--lang", "fr", *cli.here])
    cli(*shlex.split(why[0])[1:], *cli.here)
    rows = ws.rows(select(t.sentence_pairs).where(t.sentence_pairs.c.pair_id == pair, t.sentence_pairs.c.lang == "fr"))
    assert "bouilloire" in rows[0]["unacceptable"]
    assert "re-verified after the sentence was written" not in cli("publish", "--dry-run", "--bump", "minor", "--lang", "fr",
                                                                   *cli.here, ok=False)
    # The items outside the first run's properties are a step too.
    follow(cli, cli("status", *cli.here), "fr French: 183 item(s) not translated yet")
    assert len(reviews.latest_proposals(ws, "fr")) == 193
    assert not [w for w, _ in steps(cli("status", *cli.here)) if "not translated yet" in w]



def test_generate_keeps_sentences_a_curator_accepted_after_their_word_was_verified_again(sample_ws, server, cli):
    """A curator who accepts a pair's sentences after a word of theirs changed saw the word as it is now: `generate`
    rewrites the other pairs naming the word, never those, and the release holds only the others."""
    ws = sample_ws
    cli("translate", "--lang", "fr", "--properties", PROP, *cli.here)
    cli("accept", "--lang", "fr", "--reviewer", "ana", *cli.here)
    cli("generate", "--lang", "fr", "--properties", PROP, *cli.here)
    toaster, sp, pairs = concept_id("toaster"), t.sentence_pairs, t.pairs
    named = sorted(r["pair_id"] for r in ws.rows(select(sp.c.pair_id).join(pairs, pairs.c.id == sp.c.pair_id).where(
        sp.c.lang == "fr", (pairs.c.acceptable_id == toaster) | (pairs.c.unacceptable_id == toaster))))
    kept, *rewritten = named
    assert rewritten
    _project(ws, "translation", "fr")
    record_pull(ws, SERVER, [_said(1, "translation", toaster, "corrected", translation=TranslationEdit(
        proposal_id=reviews.latest_proposals(ws, "fr")[toaster]["id"], text="grille-pain"))])
    drafted = reviews.current_pairs(ws, "fr")[kept]
    _project(ws, "sentences", "fr")
    later = int((datetime.now(timezone.utc) - datetime(2026, 1, 5, 9, tzinfo=timezone.utc)).total_seconds() // 60) + 60
    record_pull(ws, SERVER, [_said(2, "sentences", kept, "accept", minutes=later, sentences=SentenceEdit(
        version=drafted["version"], draft_acceptable=drafted["acceptable"], draft_unacceptable=drafted["unacceptable"]))])
    held = cli("publish", "--dry-run", "--bump", "minor", "--lang", "fr", *cli.here, ok=False)
    assert all(f"fr {p}: " in held for p in rewritten) and f"fr {kept}: " not in held
    cli("generate", "--lang", "fr", *cli.here)
    now = reviews.current_pairs(ws, "fr")
    assert now[kept]["version"] == drafted["version"]
    assert all("grille-pain" in now[p]["acceptable"] + now[p]["unacceptable"] for p in rewritten)
    assert "re-verified after the sentence was written" not in cli("publish", "--dry-run", "--bump", "minor", "--lang",
                                                                   "fr", *cli.here, ok=False)

def test_a_rejected_pair_the_llm_cannot_rewrite_stays_rejected_and_is_asked_again(sample_ws, server, cli):
    ws = sample_ws
    cli("translate", "--lang", "fr", "--properties", PROP, *cli.here)
    cli("accept", "--lang", "fr", "--reviewer", "ana", *cli.here)
    cli("generate", "--lang", "fr", *cli.here)
    pair = pair_id(PROP, "toaster", "kettle")
    current = reviews.current_pairs(ws, "fr")[pair]
    _project(ws, "sentences", "fr")
    record_pull(ws, SERVER, [_said(1, "sentences", pair, "reject", comment="say it plainly", sentences=SentenceEdit(
        version=current["version"], draft_acceptable=current["acceptable"], draft_unacceptable=current["unacceptable"]))])
    held = cli("publish", "--dry-run", "--bump", "minor", "--lang", "fr", *cli.here, ok=False)
    command = re.search(r"a curator rejected the sentences \(say it plainly\)[^`]*`([^`]+)`", held).group(1)
    assert shlex.split(command)[:4] == ["builder", "review", "repropose", "--stage"] and command.endswith(" fr")
    server.lexicon.sentences[("fr", PROP, "kettle")] = {"sentence": "Rien.", "concept_span": "Rien", "concept_form": "Rien",
                                                        "property_span": "Rien"}
    out = cli(*shlex.split(command)[1:], *cli.here)
    assert "0 pair(s) written again, 1 flagged (still rejected)" in out
    # Before, the failed rewrite replaced the rejected sentences, and no command took the pair up again.
    assert reviews.rejected_pairs(ws, "fr") == {pair: "say it plainly"}
    assert reviews.current_pairs(ws, "fr")[pair]["version"] == current["version"]
    for run in range(2, RUNS + 1):
        out = follow(cli, out, "1 rejected pair(s) the LLM could not write again: asked again, with the reason")
        assert flags(ws) == {("regenerate", "fr", pair): run}
    assert any(EARLIER in m and "say it plainly" in m for m in asked(ws))
    assert step(cli("status", *cli.here), f"1 rejected pair(s) the LLM could not write again in {RUNS} runs") == \
        shlex.join(["builder", "review", "pull", *cli.here])
    del server.lexicon.sentences[("fr", PROP, "kettle")]
    done = follow(cli, out, "or ask the LLM again for those 1 anyway")
    assert "1 pair(s) written again, 0 flagged" in done and flags(ws) == {} and reviews.rejected_pairs(ws, "fr") == {}
    assert step(done, "1 rewritten for curators to review") == \
        shlex.join(["builder", "review", "push", "--lang", "fr", "--stage", "sentences", *cli.here])


def test_a_rejected_word_the_llm_cannot_propose_again_is_asked_again_then_written_by_hand(sample_ws, server, cli, tmp_path):
    ws = sample_ws
    cli("translate", "--lang", "fr", "--properties", PROP, *cli.here)
    kettle = concept_id("kettle")
    proposal = reviews.latest_proposals(ws, "fr")[kettle]
    _project(ws, "translation", "fr")
    record_pull(ws, SERVER, [_said(1, "translation", kettle, "reject", comment="the appliance",
                                   translation=TranslationEdit(proposal_id=proposal["id"]))])
    assert step(cli("status", *cli.here), "1 item(s) curators rejected or marked ambiguous") == \
        shlex.join(["builder", "review", "repropose", "--lang", "fr", *cli.here])
    server.faults = Faults(rate=1.0, kinds=("schema",))  # every reply breaks the schema
    out = cli("review", "repropose", "--lang", "fr", *cli.here)
    assert "0 new revision(s)" in out and flags(ws) == {("repropose", "fr", kettle): 1}
    for run in range(2, RUNS + 1):
        out = follow(cli, out, "1 rejected item(s) the LLM could not translate again: asked again, with the reason")
        assert flags(ws) == {("repropose", "fr", kettle): run}
    assert any(f"{EARLIER}:\n- {kettle}: failed validation: " in m for m in asked(ws))
    server.faults = Faults()
    done = follow(cli, out, "or ask the LLM again for those 1 anyway")
    assert "1 new revision(s)" in done and flags(ws) == {}
    assert reviews.latest_proposals(ws, "fr")[kettle]["revision"] == proposal["revision"] + 1
    assert step(done, "1 rewritten for curators to review") == shlex.join(["builder", "review", "push", "--lang", "fr", *cli.here])

    # Written by hand instead: an expert's seed word settles a rejected item and its flags.
    cress = next(i for i in reviews.latest_proposals(ws, "fr") if i != kettle)
    record_pull(ws, SERVER, [_said(2, "translation", cress, "reject", translation=TranslationEdit(
        proposal_id=reviews.latest_proposals(ws, "fr")[cress]["id"]))])
    server.faults = Faults(rate=1.0, kinds=("schema",))
    out = cli("review", "repropose", "--lang", "fr", "--reask-flagged", *cli.here)
    for _ in range(1, RUNS):
        out = follow(cli, out, "1 rejected item(s) the LLM could not translate again: asked again")
    seed = tmp_path / "hand.csv"
    seed.write_text(f"language,item_id,text,translator\nfr,{cress},mot,ana\n", encoding="utf-8")
    follow(cli, out, f"1 rejected item(s) the LLM could not translate again in {RUNS} runs: write each word",
           **{"FILE.csv": seed})
    assert flags(ws) == {} and reviews.rejected_items(ws, "fr") == {}
    assert "nothing rejected" in cli("review", "repropose", "--lang", "fr", *cli.here)


def test_template_fills_ask_flagged_lemmas_again_then_take_a_unimorph_file(ws, server, cli, tmp_path):
    root = _templates(tmp_path)
    server.lexicon.inflections[("de", "Bett", "SG.DAT")] = "  "  # never valid
    out = cli("templates", "fill", "--lang", "de", "--templates", str(root), *cli.here)
    bett = next(n.id for n in needs(ws, "de", root) if n.lemma == "Bett")
    assert flags(ws) == {("fill", "de", bett): 1}
    for run in range(2, RUNS + 1):
        out = follow(cli, out, "1 lemma(s) the LLM could not inflect: asked again, with the reason")
        assert flags(ws) == {("fill", "de", bett): run}
    assert any(EARLIER in m and bett in m for m in asked(ws))
    calls = server.stats.calls
    out = follow(cli, out, "or ask the LLM again for those 1 anyway")
    assert server.stats.calls > calls and flags(ws) == {("fill", "de", bett): RUNS + 1}
    table = tmp_path / "bett.tsv"
    table.write_text("Bett\tBett\tN;DAT;SG\nBett\tBetten\tN;DAT;PL\n", encoding="utf-8")
    follow(cli, out, f"1 lemma(s) the LLM could not inflect in {RUNS} runs: write the forms in a UniMorph file",
           **{"FILE.tsv": table})
    assert flags(ws) == {} and needs(ws, "de", root) == []


def _ls_tasks(ws, conn, stage, lang="fr"):
    from annotation.review import client

    project = ws.rows(select(t.review_projects.c.project_id).where(t.review_projects.c.stage == stage,
                                                                   t.review_projects.c.lang == lang))[0]["project_id"]
    listed = sorted(client(conn).tasks.list(project=project, fields="all", page_size=1000), key=lambda tk: tk.id)
    return {tk.data["item_id"]: tk for tk in listed if "superseded_by" not in tk.data}  # each item's current task


def _ls_say(conn, task, reviewer, decision, to_name, **texts):
    """A curator's annotation through Label Studio's API: the decision and any texts (field name -> text)."""
    from annotation.autoreview import reviewer_account
    from annotation.review import client

    result = [{"from_name": "decision", "to_name": to_name, "type": "choices", "value": {"choices": [decision]}}]
    result += [{"from_name": name, "to_name": name.removesuffix("_fixed") if name.endswith("_fixed") else to_name,
                "type": "textarea", "value": {"text": [text]}} for name, text in texts.items()]
    return client(conn).annotations.create(id=task.id, result=result, completed_by=reviewer_account(conn, reviewer),
                                           lead_time=3.0)


def test_each_review_step_names_the_push_or_pull_that_moves_its_items(sample_ws, server, cli, label_studio, monkeypatch):
    from annotation.review import client

    ws, conn = sample_ws, label_studio
    monkeypatch.setenv("LABEL_STUDIO_URL", conn.url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", conn.token)
    microwave = concept_id("microwave")
    server.lexicon.judgements[("fr", "wren (fr) is used for heating food (fr).")] = "Wrens warm their food."
    cli("translate", "--lang", "fr", "--properties", PROP, *cli.here)
    # Proposals wait for curators: the step pushes them.
    out = cli("status", *cli.here)
    follow(cli, out, "10 translation item(s) wait for curators")
    tasks = _ls_tasks(ws, conn, "translation")
    assert len(tasks) == 10
    blender = concept_id("blender")
    for item, task in tasks.items():
        _ls_say(conn, task, "ana", "reject" if item == blender else "accept", "english", comment="the kitchen one")
    _ls_say(conn, tasks[microwave], "bo", "corrected", "english", translation="four")
    # Their decisions come in with the pull the steps name; the disagreement goes to an adjudicator with the push named.
    pulled = follow(cli, cli("review", "status", *cli.here), "curators' decisions in Label Studio come into the workspace")
    assert len(ws.rows(select(t.verified_words).where(t.verified_words.c.lang == "fr"))) == 8  # not blender, not microwave
    follow(cli, pulled, "1 translation item(s) whose curators disagree wait for an adjudicator")
    assert set(_ls_tasks(ws, conn, "adjudication")) == {microwave}
    # A rejected word goes back to the LLM, and its rewrite to its task, with the commands named.
    rewritten = follow(cli, pulled, "1 item(s) curators rejected or marked ambiguous")
    assert "1 new revision(s)" in rewritten
    # The rewrite is a new revision: a new task, the old one closed with the rejection on it.
    assert "created 1 (1 for items asked again" in follow(cli, rewritten, "1 rewritten for curators to review")
    assert _ls_tasks(ws, conn, "translation")[blender].data["draft"].endswith("(fr, revised)")

    # A pair the LLM gave up on RUNS times goes to curators with the push the steps name; a curator's fix settles it.
    server.lexicon.sentences[("fr", PROP, "kettle")] = {"sentence": "Rien.", "concept_span": "Rien", "concept_form": "Rien",
                                                        "property_span": "Rien"}
    out = cli("generate", "--lang", "fr", *cli.here)
    for _ in range(1, RUNS):
        out = follow(cli, out, "1 pair(s) the LLM could not write: asked again")
    out = follow(cli, out, f"1 pair(s) the LLM could not write in {RUNS} runs: a curator writes the sentences in Label Studio")
    pair = pair_id(PROP, "toaster", "kettle")
    sentences = _ls_tasks(ws, conn, "sentences")
    assert pair in sentences
    fridge = pair_id(PROP, "toaster", "refrigerator")
    # Two curators who disagree on a pair: the release holds it and names the push that takes it to an adjudicator.
    _ls_say(conn, sentences[fridge], "ana", "accept", "acceptable")
    _ls_say(conn, sentences[fridge], "bo", "fix", "acceptable", unacceptable_fixed="Un frigo chauffe les aliments.")
    cli("review", "pull", *cli.here)
    held = cli("publish", "--dry-run", "--bump", "minor", "--lang", "fr", *cli.here, ok=False)
    command = re.search(r"an adjudicator decides them \(`([^`]+)`\)", held).group(1)
    cli(*shlex.split(command)[1:], *cli.here)
    assert set(_ls_tasks(ws, conn, "adjudicate-pairs")) == {fridge}

    # The curator writes the flagged pair by hand.
    _ls_say(conn, sentences[pair], "ana", "fix", "acceptable", acceptable_fixed="Un grille-pain chauffe les aliments.",
            unacceptable_fixed="Une bouilloire chauffe les aliments.")
    # The judge's verdict waits for curators too: the step pushes it.
    follow(cli, cli("status", *cli.here), "1 judge item(s) wait for curators")
    assert set(_ls_tasks(ws, conn, "judge")) == {pair_id(PROP, "toaster", "wren")}

    # A rejected pair the LLM cannot write again in RUNS runs: a curator writes it in its task, and the pull named
    # takes it in.
    coffee = pair_id(PROP, "toaster", "coffee maker")
    rejection = _ls_say(conn, sentences[coffee], "ana", "reject", "acceptable", comment="odd")
    out = cli("review", "pull", *cli.here)
    assert reviews.sentence_decisions(ws, "fr")[pair].decision == "fix"
    assert not [s for s in steps(out) if "could not write" in s[0]]  # the curator took the flagged pair up
    server.lexicon.sentences[("fr", PROP, "coffee maker")] = server.lexicon.sentences[("fr", PROP, "kettle")]
    out = follow(cli, out, "1 pair(s) curators rejected")
    for _ in range(1, RUNS):
        out = follow(cli, out, "1 rejected pair(s) the LLM could not write again: asked again")
    client(conn).annotations.update(id=rejection.id, result=[
        {"from_name": "decision", "to_name": "acceptable", "type": "choices", "value": {"choices": ["fix"]}},
        {"from_name": "unacceptable_fixed", "to_name": "unacceptable", "type": "textarea",
         "value": {"text": ["Une cafetière chauffe les aliments."]}}])
    out = follow(cli, out, f"1 rejected pair(s) the LLM could not write again in {RUNS} runs")
    assert reviews.sentence_decisions(ws, "fr")[coffee].decision == "fix" and reviews.rejected_pairs(ws, "fr") == {}
    assert not [s for s in steps(out) if "could not write" in s[0] or "rejected" in s[0]]


def test_english_sentences_are_a_step_and_a_language_with_nothing_pending_is_published_by_the_step(sample_ws, cli):
    ws = sample_ws
    out = cli("status", *cli.here)
    assert {w for w, _ in steps(out) if "pair(s) whose words are verified" in w} == {
        f"{lang}: 423 pair(s) whose words are verified: sentences to write" for lang in ("en English", "de German", "zh Chinese")}
    follow(cli, out, "en English: 423 pair(s) whose words are verified")
    assert ws.scalar(select(func.count()).select_from(t.sentence_pairs).where(t.sentence_pairs.c.lang == "en")) == 423
    out = cli("status", *cli.here)
    assert not [w for w, _ in steps(out) if w.startswith("en English:")]
    published = follow(cli, out, "nothing pending in en: publish a release")
    assert "published 0.1.0 (first release)" in published and "en 423" in published


def test_a_batch_is_collected_by_the_command_its_message_names(sample_ws, server, cli):
    first = cli("translate", "--lang", "fr", "--properties", PROP, "--batch", *cli.here)
    assert re.search(r"submitted batch \S+ \(\d+ requests\); run the same command again to collect", first)
    assert reviews.latest_proposals(sample_ws, "fr") == {}
    again = cli("translate", "--lang", "fr", "--properties", PROP, "--batch", *cli.here)
    assert "completed" in again and len(reviews.latest_proposals(sample_ws, "fr")) == 10


def test_templates_waiting_for_forms_name_the_fill_that_proposes_them(ws, server, cli, tmp_path):
    root = _templates(tmp_path)
    out = cli("templates", "render", "--lang", "de", "--templates", str(root), *cli.here)
    command = re.search(r"\(run `([^`]+)` with the templates rendered here, then verify the forms\)", out).group(1)
    assert command == "builder templates fill --lang de"
    out = cli(*shlex.split(command)[1:], "--templates", str(root), *cli.here)
    assert needs(ws, "de", root) == [] and ws.count(t.lexicon_forms) == 6  # proposed, for curators to verify
    # the fill, and `builder status` after it, name the push that takes the three tables to curators
    push = shlex.join(["builder", "review", "push", "--stage", "inflections", "--lang", "de", *cli.here])
    for said in (out, cli("status", *cli.here)):
        assert step(said, "3 inflections item(s) wait for curators") == push
