"""`builder publish` and reading releases: round trip, versions, diff, checks, card and manifest."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
from collections import Counter

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import settings_for
from huggingface_hub import DatasetCard
from jinja2 import Template
from sqlalchemy import select
from typer.testing import CliRunner

import builder.releases as releases
from builder.cli import app
from builder.errors import InputError
from builder.generate import generate
from builder.languages import registry
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient
from builder.paths import sample_dir
from builder.records import NEGATIVE_TYPES, english_key
from builder.releases.checks import ReleaseCheckError
from builder.releases.declarations import UndeclaredLanguageError, from_manifest, released
from builder.releases.diff import diff, diff_tables
from builder.releases.features import PAIR_FEATURES
from builder.releases.lmeval import export_lm_eval
from builder.releases.publish import PublishRequest, publish
from builder.releases.store import ReleaseStore, sha256
from builder.releases.verify import verify
from builder.releases.versions import VersionError
from builder.releases.waivers import list_waivers, waive
from builder.selection import Scope
from builder.testing.parity import ensure_environment
from builder.workspace import schema as t
from builder.workspace.store import now

pytest_plugins = ["release_fixtures"]

runner = CliRunner()


def demo_properties() -> set[str]:
    return {english_key(p) for p in (sample_dir() / "demo" / "properties.txt").read_text().splitlines() if p.strip()}


def property_outside_demo(ws) -> str:
    """A property whose pairs the demo did not generate."""
    inside = demo_properties()
    return sorted(r["id"] for r in ws.rows(select(t.properties)) if english_key(r["english"]) not in inside)[0]


def generate_with_standin(ws, server, lang: str, property_ids: set[str]) -> None:
    """Stage 4 for more pairs, answered by the OpenAI-compatible stand-in server."""
    client = LLMClient(LLMCache.of_workspace(ws), settings_for(server))

    async def go():
        try:
            return await generate(ws, client, [registry(ws)[lang]], scope=Scope(frozenset(property_ids)))
        finally:
            await client.aclose()

    return asyncio.run(go())


def cli(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def expected_rows(ws, lang: str) -> dict[str, dict]:
    """The workspace's verified data for one language, read straight from the tables (not via the release code)."""
    concepts = {r["id"]: r for r in ws.rows(select(t.concepts))}
    props = {r["id"]: r for r in ws.rows(select(t.properties))}
    pairs = {r["id"]: r for r in ws.rows(select(t.pairs))}
    words = {r["item_id"]: r["text"] for r in ws.rows(select(t.verified_words).where(t.verified_words.c.lang == lang))}
    out = {}
    for s in ws.rows(select(t.sentence_pairs).where(t.sentence_pairs.c.lang == lang, t.sentence_pairs.c.status == "generated")):
        p = pairs[s["pair_id"]]
        out[s["pair_id"]] = {
            "pair_id": s["pair_id"], "lang": lang, "property_id": p["property_id"], "property": words[p["property_id"]],
            "property_en": props[p["property_id"]]["english"], "acceptable_concept": words[p["acceptable_id"]],
            "unacceptable_concept": words[p["unacceptable_id"]],
            "acceptable_concept_en": concepts[p["acceptable_id"]]["english"],
            "unacceptable_concept_en": concepts[p["unacceptable_id"]]["english"],
            "category": concepts[p["acceptable_id"]]["category"],
            "negative_type": NEGATIVE_TYPES.index(p["negative_type"]), "similarity": p["similarity"],
            "acceptable_sentence": s["acceptable"], "unacceptable_sentence": s["unacceptable"],
            "property_span": list(s["spans"]["acceptable_property"]),
            "acceptable_concept_span": list(s["spans"]["acceptable_concept"]),
            "unacceptable_concept_span": list(s["spans"]["unacceptable_concept"]),
            "review_status": "source" if lang == "en" else "verified", "n_reviewers": 0 if lang == "en" else 1,
            "corrected": False, "sentence_origin": "comps" if lang == "en" else "llm", "sentence_review": None,
        }
    return out


@pytest.mark.both_databases
def test_round_trip_load_dataset_offline_equals_the_workspace_for_every_config(demo_ws, tmp_path):
    target = tmp_path / "releases"
    res = cli("publish", "--version", "1.0.0", "--to", target, "-w", demo_ws.directory, "-m", "first cut")
    assert res.exit_code == 0, res.output
    assert "published 1.0.0 (first release)" in res.output
    langs = ["ar", "de", "en", "ja", "ru", "vi", "zh"]
    assert releases.configs(target, "1.0.0") == langs
    for lang in langs:
        ds = datasets.load_dataset(str(target), lang, split="test")
        assert ds.features == PAIR_FEATURES
        assert ds.features["negative_type"].names == list(NEGATIVE_TYPES)
        got = {r["pair_id"]: r for r in ds}
        want = expected_rows(demo_ws, lang)
        assert len(got) == len(want) == 104
        assert got == want, lang
        assert releases.load(target, "1.0.0", lang).to_list() == ds.to_list()
    # Pair ids are shared by all languages.
    assert len({frozenset(expected_rows(demo_ws, lang)) for lang in langs}) == 1


def test_a_release_published_before_releases_carried_languages_reads_them_from_the_built_in_registry():
    older = from_manifest({"version": "0.9.0", "configs": ["de", "m2c_de", "xx"]})
    assert older.languages == (registry()["de"],)
    assert "0.9.0 was published before releases carried their languages" in older.note
    assert "de are described by the built-in registry; xx by nothing" in older.note


def test_only_declared_languages_are_released():
    assert released(registry(), ["zh", "de"]) == [registry()["de"], registry()["zh"]]
    with pytest.raises(UndeclaredLanguageError, match="no declaration for language.s. xx .* `builder language add`"):
        released(registry(), ["de", "xx"])


def test_card_manifest_and_croissant_describe_the_release(demo_ws, tmp_path):
    target = tmp_path / "releases"
    publish(demo_ws, PublishRequest(target=target, version="1.0.0", notes="first cut"))
    files = {str(p.relative_to(target)): p.read_bytes() for p in target.rglob("*") if p.is_file() and ".git" not in p.parts}
    man = releases.manifest(target, "latest")
    assert json.loads(files["release.json"]) == man
    assert man["version"] == "1.0.0" and man["parent"] is None and man["created_at"]
    assert man["files"] == {p: sha256(b) for p, b in files.items() if p != "release.json"}
    assert man["counts"] == {lang: 104 for lang in ("ar", "de", "en", "ja", "ru", "vi", "zh")}
    assert man["models"] == [{"model": "sample-recording", "calls": {"generate": 156, "translate": 40}}]
    assert man["code_version"].startswith("0.1.0")
    assert all(p.startswith("data/") and "/test-" in p for p in man["files"] if p.endswith(".parquet"))
    declared = registry(demo_ws)
    assert man["languages"] == [declared[c].model_dump() for c in ("ar", "de", "en", "ja", "ru", "vi", "zh")]
    carried = releases.languages(target, "1.0.0")
    assert carried.note is None and carried.by_code()["ja"] == declared["ja"] and carried.by_code()["ja"].typology == "agglutinative"
    ja = carried.by_code()["ja"]  # the release carries both meta prompts
    assert (ja.prompt("paper"), ja.prompt("corrected")) == (declared["ja"].meta_prompt, declared["ja"].corrected_meta_prompt)

    card = DatasetCard.load(target / "README.md")
    data = card.data.to_dict()
    assert data["license"] == "cc-by-4.0" and data["pretty_name"] == "XCOMPS"
    assert data["language"] == ["ar", "de", "en", "ja", "ru", "vi", "zh"] and data["multilinguality"] == "multilingual"
    assert data["size_categories"] == ["n<1K"] and "text-classification" in data["task_categories"]
    assert set(data["annotations_creators"]) == {"expert-generated", "machine-generated"}
    assert {c["config_name"] for c in data["configs"]} == set(man["configs"])
    info = {i["config_name"]: i for i in data["dataset_info"]}
    assert info["ja"]["splits"] == [{"name": "test", "num_bytes": len(files[next(p for p in man["files"] if p.startswith("data/ja/"))]),
                                     "num_examples": 104}]
    negative = next(f for f in info["ja"]["features"] if f["name"] == "negative_type")
    assert negative["dtype"]["class_label"]["names"] == {"0": "taxonomic", "1": "overlap", "2": "co-occurrence", "3": "random"}
    body = card.text
    ja = Counter(r["negative_type"] for r in releases.load(target, "1.0.0", "ja"))
    assert f"| ja | {ja[0]} | {ja[1]} | {ja[2]} | {ja[3]} | 104 |" in body
    assert "| ja | 104 | 104 | 0 | 0 | 0 | 1 | 1 |\n" in body
    assert "No curator reviewed an item of this release in Label Studio." in body
    assert "`sample-recording`: generate 156 call(s), translate 40 call(s)" in body
    assert "| ja | Japanese | 日本語 | agglutinative | Isolate | Jpan | ltr | no |" in body
    assert (f"- **ja**: meta prompt `{declared['ja'].meta_prompt}` (corrected: `{declared['ja'].corrected_meta_prompt}`); "
            f"generation notes: {declared['ja'].generation_notes}") in body
    for cite in ("misra2023comps", "he2025xcomps", "hlavnova2023m2c", "ohmer2023multisense"):
        assert cite in body
    assert "### 1.0.0" in body and "first cut" in body

    cr = json.loads(files["croissant.json"])
    assert cr["version"] == "1.0.0" and cr["conformsTo"] == "http://mlcommons.org/croissant/1.0"
    assert {d["contentUrl"]: d["sha256"] for d in cr["distribution"]} == {p: h for p, h in man["files"].items() if p.endswith(".parquet")}
    assert [f["name"] for f in next(r for r in cr["recordSet"] if r["name"] == "de")["field"]] == list(PAIR_FEATURES)
    assert cr["rai:dataAnnotationAnalysis"].startswith("100.0% of translated rows verified")
    assert "sample-recording" in cr["rai:machineAnnotationTools"]
    assert all(cr[k] for k in ("rai:dataCollection", "rai:dataBiases", "rai:dataLimitations", "rai:dataUseCases",
                               "rai:personalSensitiveInformation", "rai:annotationsPerItem"))


def make_changes(ws, server):
    """A de sentence corrected, a ja pair flagged, de pairs added for a new property. Returns the ids."""
    de = ws.rows(select(t.sentence_pairs).where(t.sentence_pairs.c.lang == "de").order_by(t.sentence_pairs.c.pair_id))
    edited = de[0]
    new_acc = edited["acceptable"].rstrip(".") + " (korrigiert)."
    with ws.transaction() as conn:
        conn.execute(t.sentence_pairs.update().where(t.sentence_pairs.c.pair_id == edited["pair_id"], t.sentence_pairs.c.lang == "de")
                     .values(acceptable=new_acc, unacceptable=edited["unacceptable"].rstrip(".") + " (korrigiert)."))
        flagged = ws.rows(select(t.sentence_pairs.c.pair_id).where(t.sentence_pairs.c.lang == "ja").order_by(t.sentence_pairs.c.pair_id))[5]["pair_id"]
        conn.execute(t.sentence_pairs.update().where(t.sentence_pairs.c.pair_id == flagged, t.sentence_pairs.c.lang == "ja")
                     .values(status="flagged", reason="a curator found the sentence unnatural"))
    before = {r["pair_id"] for r in de}
    generate_with_standin(ws, server, "de", {property_outside_demo(ws)})
    added = {r["pair_id"] for r in ws.rows(select(t.sentence_pairs.c.pair_id).where(t.sentence_pairs.c.lang == "de"))} - before
    assert added
    return edited, new_acc, flagged, added


@pytest.mark.both_databases
def test_two_versions_load_their_own_rows_and_diff_reports_exactly_the_changes(demo_ws, server, tmp_path):
    target = tmp_path / "releases"
    publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    v1 = {lang: releases.load(target, "1.0.0", lang).to_list() for lang in ("de", "ja")}
    # Fill the datasets cache with version 1.0.0 as a user loading the folder would.
    assert datasets.load_dataset(str(target), "de", split="test").num_rows == 104
    edited, new_acc, flagged, added = make_changes(demo_ws, server)
    res = cli("publish", "--bump", "minor", "--to", target, "-w", demo_ws.directory)
    assert res.exit_code == 0, res.output
    assert f"de: +{len(added)} -0 ~1" in res.output and "ja: +0 -1 ~0" in res.output

    assert releases.manifest(target, "latest")["version"] == "1.1.0"
    assert releases.load(target, "1.0.0", "de").to_list() == v1["de"]
    assert releases.load(target, "1.0.0", "ja").to_list() == v1["ja"]
    de2 = releases.load(target, "1.1.0", "de")
    assert de2.num_rows == 104 + len(added)
    assert {r["pair_id"]: r for r in de2}[edited["pair_id"]]["acceptable_sentence"] == new_acc
    assert releases.load(target, "latest", "ja").num_rows == 103
    # The same folder, loaded through the same cache, now gives the new version (no stale cache).
    assert datasets.load_dataset(str(target), "de", split="test").num_rows == 104 + len(added)
    assert releases.load(target, "1.0.0", "de").num_rows == 104

    d = diff(target, "1.0.0", "1.1.0")
    # Generating German for a new property writes its English sentences too (the pairs' source in the release).
    assert {c.config: c.counts() for c in d.configs} == {"de": {"added": len(added), "removed": 0, "changed": 1},
                                                          "en": {"added": len(added), "removed": 0, "changed": 0},
                                                          "ja": {"added": 0, "removed": 1, "changed": 0}}
    assert {r["pair_id"] for r in next(c for c in d.configs if c.config == "en").added} == added
    de_diff = next(c for c in d.configs if c.config == "de")
    assert {r["pair_id"] for r in de_diff.added} == added
    assert de_diff.changed[0].id == edited["pair_id"]
    assert de_diff.changed[0].fields == {"acceptable_sentence": (edited["acceptable"], new_acc),
                                         "unacceptable_sentence": (edited["unacceptable"], edited["unacceptable"].rstrip(".") + " (korrigiert).")}
    assert [r["pair_id"] for r in next(c for c in d.configs if c.config == "ja").removed] == [flagged]
    shown = cli("releases", "diff", "1.0.0", "1.1.0", "--from", target).output
    assert f"~ {edited['pair_id']} acceptable_sentence: {edited['acceptable']!r} → {new_acc!r}" in shown
    assert f"- {flagged}:" in shown
    assert json.loads(cli("releases", "diff", "1.0.0", "1.1.0", "--from", target, "--json").output)["after"] == "1.1.0"
    listed = json.loads(cli("releases", "list", "--from", target, "--json").output)
    assert [(e["version"], e["parent"]) for e in listed] == [("1.1.0", "1.0.0"), ("1.0.0", None)]
    body = DatasetCard.load(target / "README.md").text
    assert f"`de`: {len(added)} added, 0 removed, 1 changed" in body and "### 1.0.0" in body


def test_a_column_added_since_the_previous_version_changes_no_item():
    before = pa.table({"pair_id": ["x_1", "x_2"], "acceptable_sentence": ["A.", "B."]})
    after = pa.table({"pair_id": ["x_1", "x_2"], "acceptable_sentence": ["A.", "B!"], "sentence_origin": ["llm", "curator"]})
    (d,) = diff_tables({"de": before}, {"de": after})
    assert d.counts() == {"added": 0, "removed": 0, "changed": 1}
    assert d.changed[0].id == "x_2" and d.changed[0].fields == {"acceptable_sentence": ("B.", "B!")}


def test_versions_are_immutable_and_bad_versions_write_nothing(demo_ws, tmp_path):
    target = tmp_path / "releases"
    for bad in ("1.0", "v1.0.0", "01.0.0", "1.0.0-rc1", "latest"):
        res = cli("publish", "--version", bad, "--to", target, "-w", demo_ws.directory)
        assert res.exit_code == 1 and f"bad version {bad!r}" in res.output
    assert not target.exists()
    assert "give exactly one of" in cli("publish", "--to", target, "-w", demo_ws.directory).output
    publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    store = ReleaseStore(target)
    head = subprocess.run(["git", "-C", str(target), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    snapshot = {p: p.read_bytes() for p in target.rglob("*") if p.is_file() and ".git" not in p.parts}
    with pytest.raises(VersionError, match="1.0.0 is already published"):
        publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    res = cli("publish", "--version", "0.9.0", "--to", target, "-w", demo_ws.directory)
    assert res.exit_code == 1 and "older than the latest release 1.0.0" in res.output
    assert store.versions() == ["1.0.0"]
    assert subprocess.run(["git", "-C", str(target), "rev-parse", "HEAD"], capture_output=True, text=True).stdout == head
    assert {p: p.read_bytes() for p in target.rglob("*") if p.is_file() and ".git" not in p.parts} == snapshot
    # A dry run checks and reports but writes nothing.
    res = cli("publish", "--bump", "major", "--to", target, "-w", demo_ws.directory, "--dry-run")
    assert res.exit_code == 0 and "dry run: would publish 2.0.0 (after 1.0.0)" in res.output
    assert store.versions() == ["1.0.0"]
    # A dry run needs no version: it checks as the next patch would be, and says so.
    res = cli("publish", "--dry-run", "--to", target, "-w", demo_ws.directory)
    assert res.exit_code == 0, res.output
    assert "dry run: would publish 1.0.1 (after 1.0.0)" in res.output and "the next patch" in res.output
    assert store.versions() == ["1.0.0"]


def correct_word_after_generation(ws, lang: str, item_id: str) -> None:
    """A curator corrects an already verified word after its sentences were written (as `review pull` records it)."""
    with ws.transaction() as conn:
        conn.execute(t.verified_words.update().where(t.verified_words.c.item_id == item_id, t.verified_words.c.lang == lang)
                     .values(text="korrigiert", verified_at=now()))


@pytest.mark.both_databases
def test_failing_checks_report_every_problem_and_write_nothing(demo_ws, tmp_path):
    target = tmp_path / "releases"
    ar = demo_ws.rows(select(t.sentence_pairs.c.pair_id, t.pairs.c.property_id)
                                      .join(t.pairs, t.pairs.c.id == t.sentence_pairs.c.pair_id)
                                      .where(t.sentence_pairs.c.lang == "ar"))
    prop = ar[0]["property_id"]
    stale = {r["pair_id"] for r in ar if r["property_id"] == prop}
    correct_word_after_generation(demo_ws, "ar", prop)
    broken = demo_ws.rows(select(t.sentence_pairs).where(t.sentence_pairs.c.lang == "ru").order_by(t.sentence_pairs.c.pair_id))[3]
    with demo_ws.transaction() as conn:
        conn.execute(t.sentence_pairs.update().where(t.sentence_pairs.c.pair_id == broken["pair_id"], t.sentence_pairs.c.lang == "ru")
                     .values(unacceptable=broken["unacceptable"] + " Ещё."))
    res = cli("publish", "--version", "1.0.0", "--to", target, "-w", demo_ws.directory)
    assert res.exit_code == 1
    assert "release checks failed (verified, integrity); nothing was written" in res.output
    assert f"{len(stale)} item(s) neither verified by a curator nor waived" in res.output
    assert f"ar {sorted(stale)[0]}: property {prop} was re-verified after the sentence was written" in res.output
    assert f"ru {broken['pair_id']}: sentences differ outside the concept" in res.output
    assert not target.exists()
    # Waivers record a reason; waived rows are released and marked as such. The broken pair is excluded.
    for pid in stale:
        waive(demo_ws, "pair", pid, "ar", reason="wording checked by the Arabic lead", by="maintainer")
    with pytest.raises(ValueError, match="needs a reason"):
        waive(demo_ws, "pair", broken["pair_id"], "ru", reason=" ", by="maintainer")
    with demo_ws.transaction() as conn:
        conn.execute(t.sentence_pairs.update().where(t.sentence_pairs.c.pair_id == broken["pair_id"], t.sentence_pairs.c.lang == "ru")
                     .values(status="flagged"))
    with pytest.raises(ReleaseCheckError, match="coverage") as exc:
        publish(demo_ws, PublishRequest(target=target, version="1.0.0", require_complete=True))
    assert "ru lacks 1 of 104 pairs" in str(exc.value)
    res = publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    assert next(c for c in res.report.coverage if c.config == "ru").missing == 1
    ar_rows = {r["pair_id"]: r for r in releases.load(target, "1.0.0", "ar")}
    assert {p for p, r in ar_rows.items() if r["review_status"] == "waived"} == stale
    assert "| ar | 104 | " + str(104 - len(stale)) + " | " + str(len(stale)) + " |" in (target / "README.md").read_text()


def test_exclude_unverified_leaves_them_out(demo_ws, tmp_path):
    prop = demo_ws.rows(select(t.pairs.c.property_id).join(t.sentence_pairs, t.sentence_pairs.c.pair_id == t.pairs.c.id)
                        .where(t.sentence_pairs.c.lang == "vi"))[0]["property_id"]
    correct_word_after_generation(demo_ws, "vi", prop)
    res = publish(demo_ws, PublishRequest(target=tmp_path / "r", version="0.1.0", exclude_unverified=True))
    vi = releases.load(tmp_path / "r", "0.1.0", "vi")
    excluded = next(c for c in res.report.coverage if c.config == "vi").excluded
    assert excluded > 0 and vi.num_rows == 104 - excluded
    assert prop not in set(vi["property_id"]) and set(vi["review_status"]) == {"verified"}


def test_ids_that_change_meaning_fail_the_stable_id_check(demo_ws, tmp_path):
    target = tmp_path / "releases"
    publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    cid = demo_ws.rows(select(t.pairs.c.unacceptable_id).join(t.sentence_pairs, t.sentence_pairs.c.pair_id == t.pairs.c.id))[0]["unacceptable_id"]
    with demo_ws.transaction() as conn:
        conn.execute(t.concepts.update().where(t.concepts.c.id == cid).values(english="something else"))
    with pytest.raises(ReleaseCheckError, match="stable ids") as exc:
        publish(demo_ws, PublishRequest(target=target, bump="patch"))
    assert "changed meaning since 1.0.0" in str(exc.value) and "something else" in str(exc.value)
    assert ReleaseStore(target).versions() == ["1.0.0"]


def test_duplicate_items_under_two_ids_fail(demo_ws, tmp_path):
    a, b = demo_ws.rows(select(t.sentence_pairs).where(t.sentence_pairs.c.lang == "zh").order_by(t.sentence_pairs.c.pair_id))[:2]
    with demo_ws.transaction() as conn:
        conn.execute(t.sentence_pairs.update().where(t.sentence_pairs.c.pair_id == b["pair_id"], t.sentence_pairs.c.lang == "zh")
                     .values(acceptable=a["acceptable"], unacceptable=a["unacceptable"], spans=a["spans"]))
    with pytest.raises(ReleaseCheckError, match="unique ids") as exc:
        publish(demo_ws, PublishRequest(target=tmp_path / "r", version="1.0.0"))
    assert f"zh: {b['pair_id']} and {a['pair_id']} are the same item" in str(exc.value)


def test_tampered_files_fail_verify_and_load(demo_ws, tmp_path):
    target = tmp_path / "releases"
    publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    assert cli("releases", "verify", "--from", target).exit_code == 0
    parquet = next((target / "data" / "de").glob("*.parquet"))
    table = pq.read_table(parquet)
    rows = table.to_pylist()
    rows[0]["acceptable_sentence"] = "Manipuliert."
    pq.write_table(type(table).from_pylist(rows, schema=table.schema), parquet)
    res = cli("releases", "verify", "--from", target)
    assert res.exit_code == 1 and f"working tree: data/de/{parquet.name} does not match its checksum" in res.output
    # A tampered committed version (the tag moved to doctored data) fails too, and the loader refuses it.
    subprocess.run(["git", "-C", str(target), "commit", "-qam", "doctored"], check=True)
    subprocess.run(["git", "-C", str(target), "tag", "-f", "-a", "v1.0.0", "-m", "doctored"], check=True, capture_output=True)
    report = verify(target)
    assert f"version 1.0.0: data/de/{parquet.name} does not match its checksum" in " ".join(report.problems)
    with pytest.raises(Exception, match="does not match its checksum"):
        releases.load(target, "1.0.0", "de")


def test_unknown_versions_and_configs_are_clear_errors(demo_ws, tmp_path):
    target = tmp_path / "releases"
    with pytest.raises(Exception, match="no release store at"):
        releases.load(tmp_path / "nowhere", "1.0.0", "de")
    publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    with pytest.raises(Exception, match=r"version 2.0.0 is not published .*published: 1.0.0"):
        releases.load(target, "2.0.0", "de")
    with pytest.raises(Exception, match="has no config 'xx'; configs: ar, de, en"):
        releases.load(target, "1.0.0", "xx")


class TaskFileLoader(yaml.SafeLoader):
    """Reads lm-eval task files, keeping a `!function` reference as ("!function", "module.name")."""


TaskFileLoader.add_constructor("!function", lambda loader, node: ("!function", loader.construct_scalar(node)))


def test_export_lm_eval_writes_tasks_that_read_their_version_from_any_folder(demo_ws, server, tmp_path, monkeypatch):
    target = tmp_path / "releases"
    publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    make_changes(demo_ws, server)
    publish(demo_ws, PublishRequest(target=target, version="1.1.0"))
    out = tmp_path / "tasks"
    res = cli("releases", "export-lm-eval", "1.0.0", "--from", target, "--out", out)
    assert res.exit_code == 0, res.output
    group = yaml.safe_load((out / "_xcomps.yaml").read_text())
    assert group["group"] == "xcomps" and group["task"] == [f"xcomps_{c}" for c in releases.configs(target, "1.0.0")]
    template = yaml.load((out / "_xcomps_template_yaml").read_text(), Loader=TaskFileLoader)
    de = yaml.safe_load((out / "xcomps_de.yaml").read_text())
    assert de["include"] == "_xcomps_template_yaml" and de["task"] == "xcomps_de"
    task = template | de
    assert task["output_type"] == "multiple_choice" and task["doc_to_target"] == 0 and task["test_split"] == "test"
    assert task["doc_to_text"] == "" and task["target_delimiter"] == ""
    assert task["metadata"] == {"version": 1.0, "dataset_version": "1.0.0", "language": "de"}
    assert task["custom_dataset"] == ("!function", "xcomps_data.load")
    files = {p.name: p.read_text() for p in out.iterdir() if p.is_file()}
    assert not any(str(tmp_path) in t for t in files.values())  # no absolute path: the folder can move
    task_files = [yaml.load(t, Loader=TaskFileLoader) for name, t in files.items() if name.endswith("yaml")]
    assert len(task_files) == len(group["task"]) + 2 and not any("tag" in f for f in task_files)  # nothing shadows the group
    # Moved, and read from another working directory, the tasks still read exactly 1.0.0, not the newer checkout.
    moved = tmp_path / "elsewhere" / "tasks"
    moved.parent.mkdir()
    out.rename(moved)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    spec = importlib.util.spec_from_file_location("exported_loader", moved / "xcomps_data.py")
    loader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loader)
    rows = loader.load(**task["metadata"])["test"]
    v1 = releases.load(target, "1.0.0", "de")
    assert rows.to_list() == v1.to_list() != releases.load(target, "1.1.0", "de").to_list()
    first = rows[0]
    assert Template(task["doc_to_choice"]).render(**first) == str([first["acceptable_sentence"], first["unacceptable_sentence"]])


LM_EVAL_DOCS = """
import json, sys
from lm_eval.tasks import TaskManager
loaded = TaskManager(include_path=sys.argv[1], include_defaults=False).load(["xcomps"])
print(json.dumps({"groups": sorted(loaded["groups"]), "docs": {n: list(t.test_docs()) for n, t in loaded["tasks"].items()}}))
"""


def test_lm_eval_itself_runs_the_moved_export_from_another_folder(demo_ws, tmp_path):
    """The exported folder as lm-evaluation-harness reads it (in the reference scorers' own environment: lm-eval's
    dependency `evaluate` shadows ours): the group, and each task's test documents."""
    target = tmp_path / "releases"
    publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    export_lm_eval(target, "1.0.0", tmp_path / "tasks")
    moved = tmp_path / "moved"
    (tmp_path / "tasks").rename(moved)
    (tmp_path / "cwd").mkdir()
    done = subprocess.run([str(ensure_environment(log=lambda *a: None)), "-c", LM_EVAL_DOCS, str(moved)],
                          cwd=tmp_path / "cwd", capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "hf-cache"), "HF_DATASETS_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    langs = releases.configs(target, "1.0.0")
    assert got["groups"] == ["xcomps"] and set(got["docs"]) == {f"xcomps_{c}" for c in langs}
    for lang in langs:
        assert got["docs"][f"xcomps_{lang}"] == releases.load(target, "1.0.0", lang).to_list()


def add_m2c_tests(ws) -> list[dict]:
    """M2C tests as `builder templates render` writes them into the workspace's m2c_tests."""
    rows = [
        {"test_id": f"m_de_{i}", "lang": "de", "capability": cap, "template_id": f"de/{cap}#0", "context": ctx,
         "question": q, "answer": a, "alternatives": alts, "answer_forms": forms, "fills": {}, "verified": verified,
         "created_at": now()}
        for i, (cap, ctx, q, a, alts, forms, verified) in enumerate([
            ("negation", "Anna trinkt keinen Kaffee.", "Trinkt Anna Kaffee?", "nein", ["Nein"], [], True),
            ("numerals", "Ich habe drei Äpfel.", "Wie viele Äpfel habe ich?", "drei", ["3"], [], True),
            ("comparatives", "Der Hund ist größer als die Katze.", "Wer ist kleiner?", "die Katze", [],
             ["der Katze"], False),
        ])
    ]
    with ws.transaction() as conn:
        conn.execute(t.m2c_tests.insert(), rows)
    return rows


@pytest.mark.both_databases
def test_m2c_tests_are_released_per_language_when_verified_or_waived(demo_ws, tmp_path):
    target = tmp_path / "releases"
    tests = add_m2c_tests(demo_ws)
    with pytest.raises(ReleaseCheckError, match="uses fills no curator has verified") as exc:
        publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    assert "m2c_de m_de_2" in str(exc.value)
    waive(demo_ws, "m2c", "m_de_2", "de", reason="comparative checked by hand", by="maintainer")
    publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    assert "m2c_de" in releases.configs(target, "1.0.0")
    ds = datasets.load_dataset(str(target), "m2c_de", split="test")
    assert ds.to_list() == [{k: r[k] for k in ("test_id", "lang", "capability", "template_id", "context", "question",
                                                "answer", "alternatives", "answer_forms")} for r in tests]
    assert releases.load(target, "1.0.0", "m2c_de").to_list() == ds.to_list()
    card = (target / "README.md").read_text()
    assert "| m2c_de | comparatives: 1, negation: 1, numerals: 1 |" in card
    tasks = export_lm_eval(target, "1.0.0", tmp_path / "tasks")
    assert not any("m2c" in p.name for p in tasks)


@pytest.mark.both_databases
def test_review_provenance_counts_curators_and_corrections(demo_ws, tmp_path):
    """Two curators in Label Studio on every word of one Arabic pair; one word corrected from the LLM's draft."""
    pair = demo_ws.rows(select(t.pairs).join(t.sentence_pairs, t.sentence_pairs.c.pair_id == t.pairs.c.id)
                        .where(t.sentence_pairs.c.lang == "ar").order_by(t.pairs.c.id))[0]
    words = {r["item_id"]: r for r in demo_ws.rows(select(t.verified_words).where(
        t.verified_words.c.lang == "ar",
        t.verified_words.c.item_id.in_([pair["property_id"], pair["acceptable_id"], pair["unacceptable_id"]])))}
    ts = now()
    with demo_ws.transaction() as conn:
        for n, (item, w) in enumerate(sorted(words.items())):
            for k, (who, decision) in enumerate((("curator-a", "accept"), ("curator-b", "accept" if n else "corrected"))):
                conn.execute(t.review_annotations.insert().values(
                    annotation_id=10 * n + k, server="local:ls", stage="translation", lang="ar", item_id=item,
                    proposal_id=w["proposal_id"], task_id=n, decision=decision, final_text=w["text"], comment="",
                    reviewer=who, cancelled=False, lead_time_s=1.0, edit_distance=0, created_at=ts, updated_at=ts))
        acc = words[pair["acceptable_id"]]
        conn.execute(t.proposals.update().where(t.proposals.c.id == acc["proposal_id"]).values(text="مسودة"))
        conn.execute(t.reviews.update().where(t.reviews.c.id == acc["review_id"]).values(decision="corrected"))
    publish(demo_ws, PublishRequest(target=tmp_path / "r", version="1.0.0"))
    ar = {r["pair_id"]: r for r in releases.load(tmp_path / "r", "1.0.0", "ar")}
    assert ar[pair["id"]]["n_reviewers"] == 2 and ar[pair["id"]]["corrected"] is True
    uses_acc = {p for p, r in ar.items() if r["acceptable_concept"] == acc["text"] or r["unacceptable_concept"] == acc["text"]}
    assert {p for p, r in ar.items() if r["corrected"]} == uses_acc
    assert {r["n_reviewers"] for p, r in ar.items() if p != pair["id"]} == {1}
    card = (tmp_path / "r" / "README.md").read_text()
    row = next(line for line in card.splitlines() if line.startswith("| ar | 104 |"))
    assert row.endswith(f"| {len(uses_acc)} | 1 | 3 |")  # corrected rows, min curators, curators
    assert "| ar | translation | 3 | " in card and "| ar | sentences |" not in card  # agreement on 3 items, per stage
    cr = json.loads((tmp_path / "r" / "croissant.json").read_text())
    assert "ar translation: 3 items reviewed by two or more curators" in cr["rai:dataAnnotationAnalysis"]


def test_a_waiver_reason_or_name_with_a_control_character_is_refused(demo_ws):
    """The reason is released in the card and the report: text, not an escape sequence."""
    pid = demo_ws.rows(select(t.sentence_pairs.c.pair_id).where(t.sentence_pairs.c.lang == "de"))[0]["pair_id"]
    with pytest.raises(InputError, match=r"^--reason: holds U\+001B \(a control character\) at character 1: remove it$"):
        waive(demo_ws, "pair", pid, "de", reason="\x1b[31mfine", by="maintainer")
    with pytest.raises(InputError, match=r"^--by: holds the invisible character U\+200B"):
        waive(demo_ws, "pair", pid, "de", reason="a loanword", by="main\u200btainer")
    assert list_waivers(demo_ws) == []
