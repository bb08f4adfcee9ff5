"""End-to-end journeys with a real Label Studio and the OpenAI-compatible test server.

The other journeys live beside the parts they exercise most: the curator's loop in
test_review_label_studio.py, the maintainer's two releases and their diff in test_releases.py, the
release gate failing on a planted regression in test_eval_cli.py, and the main job in test_cli.py.
"""

import json
import re

import pandas as pd
from sqlalchemy import select
from test_languages import HINDI, META, PROPS, hindi_lexicon
from typer.testing import CliRunner

from annotation.autoreview import accept_open_tasks, reviewer_account
from annotation.review import client
from annotation.server import connect
from builder import releases
from builder.cli import app
from builder.languages import builtin_languages, registry
from builder.records import concept_id
from builder.reviews import review_status
from builder.selection import Scope
from builder.status import status
from builder.workspace import schema as t
from evaluate.data import load_release_pairs
from evaluate.scoring import Scorer
from evaluate.toy import judgement_corpus, train_toy

TOY_STEPS = 60  # the toy need not be good: the journey checks what reaches the model and the report
NOTES = "Sentences end with the danda (।); the verb agrees with the concept's gender, so keep the property neutral."


def test_a_language_not_shipped_declared_once_goes_through_every_stage_into_a_release_and_its_evaluation(
        sample_ws, server, label_studio, tmp_path, monkeypatch):
    """Hindi, in Devanagari, as a person adds it: every step through `builder`, the curators in a real Label Studio."""
    ws, cli = sample_ws, CliRunner()
    for var, value in {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k", "BUILDER_LLM_MODEL": "standin-translator",
                       "LABEL_STUDIO_URL": label_studio.url, "LABEL_STUDIO_API_KEY": label_studio.token}.items():
        monkeypatch.setenv(var, value)

    def builder(*args, ok=True) -> str:
        res = cli.invoke(app, [*args, "-w", str(ws.directory)], catch_exceptions=False)
        assert (res.exit_code == 0) == ok, res.output
        return res.output

    assert "hi" not in {lang.code for lang in builtin_languages()}
    builder("language", "add", *HINDI)
    assert "already declared in this workspace: give --update" in builder("language", "add", *HINDI, ok=False)
    assert builder("language", "add", "hi", "--update", "--notes", NOTES).startswith("updated hi (Hindi): 1 field(s) changed")
    declared = registry(ws)["hi"]
    assert declared.meta_prompt == META and declared.generation_notes == NOTES and not declared.builtin

    # The LLM proposes the words (the stand-in writes "bus" in Latin letters, as SmolLM2 did); the proposal is flagged.
    hindi_lexicon(server.lexicon)
    translated = builder("translate", "--lang", "hi", "--properties", PROPS)
    proposed = int(re.search(r"proposed hi (\d+)", translated).group(1))
    assert proposed > 0 and "not in the declared script, flagged for curators: hi Hindi 1" in translated

    def script_flags() -> dict[str, str]:
        return {f["item_id"]: f["reason"] for f in json.loads(builder("status", "--flags", "--stage", "script", "--json"))}

    bus = concept_id("bus")
    assert script_flags() == {bus: "the proposal 'bus' (Latin) is not in Devanagari (Deva), the script declared for Hindi"}
    # Curators review in Label Studio, whose projects carry the language's name (a project an earlier version titled
    # with the code alone is found by its key and retitled): one corrects "bus", the rest is accepted.
    conn = connect(ws.directory)
    ls = client(conn)
    earlier = ls.projects.create(title="[translation:hi] hi review").id
    assert f"translation hi: created {proposed}" in builder("review", "push", "--lang", "hi")
    titles = {p.title: p.id for p in ls.projects.list()}
    assert titles["[translation:hi] Hindi review"] == earlier and "[translation:hi] hi review" not in titles
    task = next(tk for tk in ls.tasks.list(project=titles["[translation:hi] Hindi review"], fields="all")
                if tk.data["item_id"] == bus)
    ls.annotations.create(id=task.id, completed_by=reviewer_account(conn, "curator-hi"), lead_time=9.0, result=[
        {"from_name": "decision", "to_name": "english", "type": "choices", "value": {"choices": ["corrected"]}},
        {"from_name": "translation", "to_name": "english", "type": "textarea", "value": {"text": ["बस"]}}])
    assert accept_open_tasks(ws, conn, "translation", "hi", "curator-hi") == proposed - 1
    assert f"newly verified {proposed}" in builder("review", "pull")
    assert script_flags() == {}  # the corrected word is in Devanagari: its flag is cleared
    # Generating Hindi writes the English pairs it is reviewed beside.
    n_pairs = len(Scope.parse(ws, PROPS).pairs(ws))
    assert f"generated en {n_pairs}, hi {n_pairs}" in builder("generate", "--lang", "hi", "--properties", PROPS)
    assert f"sentences hi: created {n_pairs}" in builder("review", "push", "--stage", "sentences", "--lang", "hi")
    titles = {p.title: p.id for p in ls.projects.list()}
    shown = [tk.data for tk in ls.tasks.list(project=titles["[sentences:hi] Hindi review"], fields="all")]
    assert len(shown) == n_pairs and all(d["english"] != "—" for d in shown)
    accept_open_tasks(ws, conn, "sentences", "hi", "curator-hi")
    builder("review", "pull")
    rows = {(r["stage"], r["lang"]): r for r in review_status(ws)}
    assert rows[("sentences", "hi")]["accept"] == n_pairs and rows[("translation", "hi")]["pending"] == 0
    hi = next(r for r in status(ws, ["hi"]) if r.lang == "hi")
    assert hi.generate.generated == n_pairs and script_flags() == {}
    # The release includes the new language as its own config, joined to English by pair id, and carries its declaration.
    target = ws.directory / "releases"
    builder("publish", "--version", "0.1.0", "--lang", "en,hi")
    assert set(releases.configs(target, "0.1.0")) == {"en", "hi"}
    hindi = releases.load(target, "0.1.0", "hi")
    english = releases.load(target, "0.1.0", "en")
    assert len(hindi) == n_pairs and set(hindi["pair_id"]) == set(english["pair_id"])
    assert set(hindi["review_status"]) == {"verified"} and set(hindi["lang"]) == {"hi"}
    assert dict(zip(hindi["unacceptable_concept_en"], hindi["unacceptable_concept"]))["bus"] == "बस"  # the curator's word
    words = ws.rows(select(t.verified_words).where(t.verified_words.c.lang == "hi"))
    assert {w["reviewer"] for w in words} == {"curator-hi@builder.local"}
    carried = releases.languages(target, "0.1.0")
    assert carried.by_code()["hi"] == declared and carried.note is None
    card = (target / "README.md").read_text()
    assert "| hi | Hindi | हिन्दी | inflectional | Indo-European (Indo-Aryan) | Deva | ltr | yes |" in card

    # `builder eval run` on the release with a toy trained on its sentences; the scorer is watched, not replaced.
    pairs, _ = load_release_pairs(target, "0.1.0")
    toy = train_toy(judgement_corpus(pairs), tmp_path / "toy", steps=TOY_STEPS)
    scored: set[tuple[str, str]] = set()
    score = Scorer.score

    def watched(self, requests, progress=None):
        got = score(self, requests, progress)
        scored.update(got)
        return got

    monkeypatch.setattr(Scorer, "score", watched)
    out = tmp_path / "eval"
    run = cli.invoke(app, ["eval", "run", "--release", str(target), "--version", "0.1.0", "--model", str(toy),
                           "--methods", "direct,meta,neuro", "--batch-size", "16", "--out", str(out)])
    assert run.exit_code == 0, run.output
    # Meta asked the model the declaration's question, in both orders, for every Hindi pair.
    hi_pairs = pairs[pairs["lang"] == "hi"]
    asked = {(declared.meta_prompt.format(property=r.property, word1=a, word2=b), a)
             for r in hi_pairs.itertuples() for a, b in ((r.acceptable_concept, r.unacceptable_concept),
                                                         (r.unacceptable_concept, r.acceptable_concept))}
    assert len(asked) == 2 * n_pairs and asked <= scored
    summary = json.loads((out / "summary.json").read_text())
    assert {d["code"]: d for d in summary["config"]["dataset"]["languages"]}["hi"] == declared.model_dump()
    # The report names the language and places it by its typology, in the text and in every figure.
    report = (out / "report.md").read_text()
    assert "| hi | Hindi | हिन्दी | inflectional | Indo-European (Indo-Aryan) | Deva |" in report
    typology = pd.read_csv(out / "plots" / "fig4_typology.csv")
    assert set(zip(typology["typology"], typology["langs"])) == {("inflectional", "hi")}
    assert set(pd.read_csv(out / "plots" / "fig6_peak_layer.csv")["typology"]) == {"inflectional"}
    for figure in ("fig2_heatmaps", "fig5_layers"):
        assert set(pd.read_csv(out / "plots" / f"{figure}.csv")["lang"]) == {"en", "hi"}, figure
    # A negative type with too few concepts for nested cross-validation is left out of neuro, with the reason.
    left_out = pd.read_parquet(out / "probes_left_out.parquet")
    assert len(left_out) > 0  # the two-language release is that small
    probed = {(s["lang"], s["negative_type"]) for s in summary["scores"] if s["method"] == "neuro" and s["negative_type"] != "all"}
    assert not set(zip(left_out["lang"], left_out["negative_type"])) & probed
    for r in left_out.itertuples():
        assert f"| {r.lang} | {r.negative_type} | {r.n_pairs} | " in report and "nested cross-validation needs at least 3" in r.reason
