"""End-to-end journeys with a real Label Studio and the OpenAI-compatible test server.

The other journeys live beside the parts they exercise most: the curator's loop in
test_review_label_studio.py, the maintainer's two releases and their diff in test_releases.py, the
release gate failing on a planted regression in test_eval_cli.py, and the main job in test_cli.py.
"""

import json

import pandas as pd
from sqlalchemy import select
from test_generate import stage
from typer.testing import CliRunner

from annotation.autoreview import accept_open_tasks
from annotation.review import pull, push
from builder import releases
from builder.cli import app
from builder.generate import generate
from builder.languages import builtin_languages, registry
from builder.releases.publish import PublishRequest, publish
from builder.reviews import review_status
from builder.selection import Scope
from builder.status import status
from builder.translate import translate
from builder.workspace import schema as t
from evaluate.data import load_release_pairs
from evaluate.scoring import Scorer
from evaluate.toy import judgement_corpus, train_toy

PROPS = "can fly,has feathers"
SWAHILI = ["sw", "--name", "Swahili", "--native-name", "Kiswahili", "--typology", "agglutinative",
           "--family", "Niger-Congo (Bantu)", "--script", "Latn",
           "--meta-prompt", 'Ni kipi kati ya hivi kina sifa hii: "{property}", "{word1}" au "{word2}"? Jibu: "']
TOY_STEPS = 60  # the toy need not be good: the journey checks what reaches the model and the report


def test_a_new_language_declared_once_goes_through_every_stage_into_a_release_and_its_evaluation(
        sample_ws, server, label_studio, tmp_path, monkeypatch):
    ws, conn, cli = sample_ws, label_studio, CliRunner()
    assert "sw" not in {lang.code for lang in builtin_languages()}
    added = cli.invoke(app, ["language", "add", *SWAHILI, "-w", str(ws.directory)])
    assert added.exit_code == 0, added.output
    declared = registry(ws)["sw"]
    assert declared.meta_prompt == SWAHILI[-1] and not declared.builtin
    proposed = stage(ws, server, translate, ["sw"], PROPS).proposed["sw"]
    assert proposed > 0
    # Curators review the proposals in Label Studio (scripted through its API), and the pull verifies them.
    assert push(ws, conn, "sw").created == proposed
    assert accept_open_tasks(ws, conn, "translation", "sw", "curator-sw") == proposed
    assert pull(ws, conn).verified == proposed
    n_pairs = len(Scope.parse(ws, PROPS).pairs(ws))
    generated = stage(ws, server, generate, ["en", "sw"], PROPS).generated
    assert generated == {"en": n_pairs, "sw": n_pairs}
    assert push(ws, conn, "sw", stage="sentences").created == n_pairs
    accept_open_tasks(ws, conn, "sentences", "sw", "curator-sw")
    pull(ws, conn)
    rows = {(r["stage"], r["lang"]): r for r in review_status(ws)}
    assert rows[("sentences", "sw")]["accept"] == n_pairs and rows[("translation", "sw")]["pending"] == 0
    sw = next(r for r in status(ws, ["sw"]) if r.lang == "sw")
    assert sw.generate.generated == n_pairs
    # The release includes the new language as its own config, joined to English by pair id, and carries its declaration.
    target = ws.directory / "releases"
    publish(ws, PublishRequest(target=target, version="0.1.0", langs=["en", "sw"]))
    assert set(releases.configs(target, "0.1.0")) == {"en", "sw"}
    swahili = releases.load(target, "0.1.0", "sw")
    english = releases.load(target, "0.1.0", "en")
    assert len(swahili) == n_pairs and set(swahili["pair_id"]) == set(english["pair_id"])
    assert set(swahili["review_status"]) == {"verified"} and set(swahili["lang"]) == {"sw"}
    words = ws.rows(select(t.verified_words).where(t.verified_words.c.lang == "sw"))
    assert {w["reviewer"] for w in words} == {"curator-sw@builder.local"}
    carried = releases.languages(target, "0.1.0")
    assert carried.by_code()["sw"] == declared and carried.note is None
    assert "| sw | Swahili | Kiswahili | agglutinative | Niger-Congo (Bantu) | Latn | ltr | yes |" in (target / "README.md").read_text()

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
    # Meta asked the model the declaration's question, in both orders, for every Swahili pair.
    sw_pairs = pairs[pairs["lang"] == "sw"]
    asked = {(declared.meta_prompt.format(property=r.property, word1=a, word2=b), a)
             for r in sw_pairs.itertuples() for a, b in ((r.acceptable_concept, r.unacceptable_concept),
                                                         (r.unacceptable_concept, r.acceptable_concept))}
    assert len(asked) == 2 * n_pairs and asked <= scored
    summary = json.loads((out / "summary.json").read_text())
    assert {d["code"]: d for d in summary["config"]["dataset"]["languages"]}["sw"] == declared.model_dump()
    # The report names the language and places it by its typology, in the text and in every figure.
    report = (out / "report.md").read_text()
    assert "| sw | Swahili | Kiswahili | agglutinative | Niger-Congo (Bantu) | Latn |" in report
    typology = pd.read_csv(out / "plots" / "fig4_typology.csv")
    assert set(zip(typology["typology"], typology["langs"])) == {("agglutinative", "sw")}
    assert set(pd.read_csv(out / "plots" / "fig6_peak_layer.csv")["typology"]) == {"agglutinative"}
    for figure in ("fig2_heatmaps", "fig5_layers"):
        assert set(pd.read_csv(out / "plots" / f"{figure}.csv")["lang"]) == {"en", "sw"}, figure
    # A negative type with too few concepts for nested cross-validation is left out of neuro, with the reason.
    left_out = pd.read_parquet(out / "probes_left_out.parquet")
    assert len(left_out) > 0  # the two-language release is that small
    probed = {(s["lang"], s["negative_type"]) for s in summary["scores"] if s["method"] == "neuro" and s["negative_type"] != "all"}
    assert not set(zip(left_out["lang"], left_out["negative_type"])) & probed
    for r in left_out.itertuples():
        assert f"| {r.lang} | {r.negative_type} | {r.n_pairs} | " in report and "nested cross-validation needs at least 3" in r.reason
