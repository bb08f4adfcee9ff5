"""M2C in the workspace: UniMorph import, LLM-proposed fills, verification, rendering into m2c_tests."""

import asyncio
from pathlib import Path

import pytest
from conftest import settings_for
from sqlalchemy import select
from typer.testing import CliRunner

from builder.cli import app
from builder.languages import declare, registry
from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient
from builder.m2c.fills import needs, propose_forms
from builder.m2c.lexicon import LexiconImportError, import_unimorph, verify_fills
from builder.m2c.render import render_tests
from builder.workspace import schema as t

UNIMORPH = """# a small German table
Tisch\tTisch\tN;DAT;SG
Tisch\tTischen\tN;DAT;PL
Tisch\tTische\tN;NOM;PL
Lampe\tLampe\tN;DAT;SG
Lampe\tLampen\tN;PL;DAT
Lampe\tLampen\tN;DAT;PL
"""

TEMPLATE = """capability: spatial
placeholders:
  place:
    lexicon:
      bundles: [DAT.SG, DAT.PL]
      lemmas: {Tisch: MASC, Lampe: FEM, Bett: NEUT}
  prep: [unter, neben]
templates:
  - context: "Das Buch liegt {prep} {ART.DEF.DAT.<place.NUMBER.GENDER>} {place.DAT}."
    question: "Wo liegt das Buch?"
    answer: "{prep} {ART.DEF.DAT.<place.NUMBER.GENDER>} {place.DAT}."
    n: -1
"""


def _table(tmp_path: Path, text: str = UNIMORPH) -> Path:
    path = tmp_path / "deu.tsv"
    path.write_text(text, encoding="utf-8")
    return path


def _templates(tmp_path: Path) -> Path:
    root = tmp_path / "templates"
    (root / "de").mkdir(parents=True)
    (root / "de" / "spatial.yaml").write_text(TEMPLATE, encoding="utf-8")
    return root


def _forms(ws):
    return {(r["lemma"], r["features"]): r for r in ws.rows(select(t.lexicon_forms))}


def test_unimorph_import_maps_features_to_dimensions_and_is_idempotent(ws, tmp_path):
    s = import_unimorph(ws, _table(tmp_path), "de")
    assert (s.lines, s.new, s.variants) == (6, 5, 1)
    forms = _forms(ws)
    assert {k: v["form"] for k, v in forms.items()} == {
        ("Tisch", "SG.DAT"): "Tisch", ("Tisch", "PL.DAT"): "Tischen", ("Tisch", "PL.NOM"): "Tische",
        ("Lampe", "SG.DAT"): "Lampe", ("Lampe", "PL.DAT"): "Lampen"}
    assert all(r["pos"] == "N" and r["status"] == "verified" and r["source"].startswith("unimorph:deu.tsv:") for r in forms.values())
    again = import_unimorph(ws, _table(tmp_path), "de")
    assert (again.new, again.existing) == (0, 5) and ws.count(t.lexicon_forms) == 5


def test_finnish_unimorph_local_cases_are_mapped(ws, tmp_path):
    path = _table(tmp_path, "talo\ttalossa\tN;IN+ESS;SG\ntalo\ttalolla\tN;AT+ESS;SG\n")
    import_unimorph(ws, path, "fi")
    assert set(_forms(ws)) == {("talo", "SG.INE"), ("talo", "SG.ADE")}


# Lines in the shape of UniMorph's own Hebrew (heb) and Swahili (swc) tables.
HEBREW = """\
ארץ\tארץ\tN;SG;NDEF
ארץ\tהארץ\tN;SG;DEF
ארץ\tארצות\tN;PL;NDEF
ארץ\tארצותיה\tN;PL;PSSD;PSS3S;FEM
אמר\tאמרה\tV;3;SG;PST;FEM
אמר\tלאמור\tV;NFIN
"""
SWAHILI = """\
fika\tkufika\tV;FIN
fika\tninafika\tV;DEF;FIN;IND;SG;1;PRS
fika\tnilifika\tV;FIN;IND;SG;1;PST
fika\tningefika\tV;FIN;COND;SG;1;PRS
"""


def test_hebrew_imports_from_unimorph_labels_alone_without_a_language_file(ws, tmp_path):
    path = tmp_path / "heb"
    path.write_text(HEBREW, encoding="utf-8")
    s = import_unimorph(ws, path, "he")
    assert (s.lines, s.new) == (6, 6)
    forms = {(r["lemma"], r["pos"], r["features"]): r["form"] for r in ws.rows(select(t.lexicon_forms))}
    # UniMorph's canonical order: definiteness before gender, number, person, possession, tense
    assert forms[("ארץ", "N", "FEM.PL.PSSD.PSS3S")] == "ארצותיה"
    assert forms[("אמר", "V", "FEM.SG.3.PST")] == "אמרה" and forms[("אמר", "V", "NFIN")] == "לאמור"
    assert forms[("ארץ", "N", "DEF.SG")] == "הארץ"
    r = CliRunner().invoke(app, ["lexicon", "import-unimorph", str(path), "--lang", "he", "-w", str(ws.directory)])
    assert r.exit_code == 0 and "6 already there" in r.output


def test_swahili_imports_labels_its_language_file_does_not_declare(ws, tmp_path):
    declare(ws, code="sw", name="Swahili", typology="agglutinative", family="Niger-Congo (Bantu)", script="Latn")
    path = tmp_path / "swc"
    path.write_text(SWAHILI, encoding="utf-8")
    assert import_unimorph(ws, path, "sw").new == 4
    # the file's own dimensions (NUMBER, PERSON, TENSE) first, then UniMorph's for DEF, FIN, IND, COND
    assert {r["features"]: r["form"] for r in ws.rows(select(t.lexicon_forms))} == {
        "FIN": "kufika", "SG.1.PRS.DEF.FIN.IND": "ninafika", "SG.1.PST.FIN.IND": "nilifika",
        "SG.1.PRS.FIN.COND": "ningefika"}


def test_a_label_outside_the_schema_is_kept_apart_and_refused_with_strict(ws, tmp_path):
    path = tmp_path / "heb"
    path.write_text(HEBREW + "ארץ\tארצי\tN;SG;N;SGDEF;PSS1S\n", encoding="utf-8")  # as found in UniMorph's heb
    with pytest.raises(LexiconImportError) as info:
        import_unimorph(ws, path, "he", strict=True)
    assert f"{path}:7: field 3" in str(info.value) and "'SGDEF' is not a dimension of Hebrew" in str(info.value)
    assert "without --strict" in str(info.value) and ws.count(t.lexicon_forms) == 0
    s = import_unimorph(ws, path, "he")
    assert (s.lines, s.new, dict(s.kept)) == (7, 7, {"SGDEF": 1})  # N twice is one part of speech
    forms = {(r["lemma"], r["features"]): r["form"] for r in ws.rows(select(t.lexicon_forms))}
    assert forms[("ארץ", "SG.PSS1S|SGDEF")] == "ארצי"


# Lines as UniMorph's real Swahili table (swc) writes them: labels outside the schema (SUBJ, INDF3), several
# language-specific ones on a line (LGSPEC10 and LGSPEC2), two moods (IND;COND), PRES for PRS. Forms that differ
# only in such labels stay apart.
SWC = """fua\tamefua\tV;FIN;IND;PST;PRF;3;SG;LGSPEC1
fua\tukifua\tV;FIN;SUBJ;COM;PST;3;SG;LGSPEC2
fua\tukafue\tV;FIN;SUBJ;LGSPEC10;3;SG;LGSPEC2
fua\tinafua\tV;FIN;IND;PRES;3;PL;LGSPEC2
fua\twafua\tV;FIN;INDF3;PL;LGSPEC1
fua\tkifua\tV;FIN;INDF3;SG;LGSPEC4
fua\tangefua\tV;FIN;IND;COND;PRS;3;SG;LGSPEC1
fua\tkingefua\tV;FIN;IND;COND;PRS;3;SG;LGSPEC4
fua\tnilifua\tV;FIN;IND;PST;1;SG
fua\tnifue\tV;FIN;IND;PST;1;SG
"""


def test_real_swahili_unimorph_imports_with_a_report_of_what_became_of_each_label(ws, tmp_path):
    declare(ws, code="sw", name="Swahili", typology="agglutinative", family="Niger-Congo (Bantu)", script="Latn")
    path = tmp_path / "swc"
    path.write_text(SWC, encoding="utf-8")
    s = import_unimorph(ws, path, "sw")
    assert (s.lines, s.new, s.variants) == (10, 9, 1)  # nifue: UniMorph's own second form for nilifua's labels
    assert dict(s.mapped) == {"PRES -> PRS": 1}
    assert dict(s.kept) == {"LGSPEC1": 3, "LGSPEC2": 3, "LGSPEC4": 2, "SUBJ": 2, "LGSPEC10": 1, "INDF3": 2, "COND": 2}
    forms = {r["features"]: r["form"] for r in ws.rows(select(t.lexicon_forms))}
    assert forms["SG.3.PRS.FIN.IND|COND.LGSPEC1"] == "angefua" and forms["SG.3.PRS.FIN.IND|COND.LGSPEC4"] == "kingefua"
    assert forms["PL.3.PRS.FIN.IND|LGSPEC2"] == "inafua" and forms["SG.3.FIN|LGSPEC10.LGSPEC2.SUBJ"] == "ukafue"
    assert forms["SG.1.PST.FIN.IND"] == "nilifua" and len(set(forms.values())) == len(forms) == 9
    r = CliRunner().invoke(app, ["lexicon", "import-unimorph", str(path), "--lang", "sw", "--strict", "-w", str(ws.directory)])
    assert r.exit_code != 0 and f"{path}:1: field 3" in r.output and "LGSPEC1" in r.output
    r = CliRunner().invoke(app, ["lexicon", "import-unimorph", str(path), "--lang", "sw", "-w", str(ws.directory)])
    assert r.exit_code == 0, r.output
    assert "9 already there" in r.output and "mapped: PRES -> PRS (1 line(s))" in r.output
    assert "kept as the file's own features: LGSPEC1 (3 line(s))" in r.output


# UniMorph's Hebrew comes unvocalised (heb) and vocalised (heb_voc), and in UniMorph 4's layered notation (heb.args).
HEB_VOC = """אֱלוֹהַּ\tאֱלוֹהֲךָ\tN;SG;PSSD;PSS2S;MASC
אֱלוֹהַּ\tאֱלוֹהֵךְ\tN;SG;PSSD;PSS2S;FEM
אֱלוֹהַּ\tאֱלוֹהִים\tN;PL;NDEF
אלוה\tאלוהים\tN;PL;NDEF
אלוה\tאלוהיך\tN;SG;PSSD;PSS(2,SG,MASC)
אֱלוֹהַּ\tאֱלוֹהֵינוּ\tN;PL;PSSD;PSS(1,PL)
"""


def test_vocalised_and_unvocalised_hebrew_stay_two_lexemes_and_layered_labels_read_flat(ws, tmp_path):
    path = tmp_path / "heb_voc"
    path.write_text(HEB_VOC, encoding="utf-8")
    s = import_unimorph(ws, path, "he", strict=True)  # every label is UniMorph's, once PSS(2,SG,MASC) reads as PSS2SM
    assert (s.lines, s.new, s.variants) == (6, 6, 0)
    assert dict(s.mapped) == {"PSS(2,SG,MASC) -> PSS2SM": 1, "PSS(1,PL) -> PSS1P": 1}
    forms = {(r["lemma"], r["features"]): r["form"] for r in ws.rows(select(t.lexicon_forms))}
    assert forms[("אֱלוֹהַּ", "MASC.SG.PSSD.PSS2S")] == "אֱלוֹהֲךָ" and forms[("אֱלוֹהַּ", "FEM.SG.PSSD.PSS2S")] == "אֱלוֹהֵךְ"
    assert forms[("אלוה", "SG.PSSD.PSS2SM")] == "אלוהיך" and forms[("אֱלוֹהַּ", "PL.PSSD.PSS1P")] == "אֱלוֹהֵינוּ"
    assert forms[("אלוה", "NDEF.PL")] == "אלוהים" and forms[("אֱלוֹהַּ", "NDEF.PL")] == "אֱלוֹהִים"


def test_english_participles_and_layered_agreement_as_unimorph_4_writes_them(ws, tmp_path):
    path = tmp_path / "eng.args"
    path.write_text("walk\twalked\tV;PST\nwalk\twalked\tV;V.PTCP;PST\nwalk\twalks\tV;PRS;NOM(3,SG)\n", encoding="utf-8")
    s = import_unimorph(ws, path, "en")
    assert (s.lines, s.new, s.variants) == (3, 2, 1) and dict(s.ignored) == {"V.PTCP": 1}
    assert dict(s.mapped) == {"NOM(3,SG) -> NO3S": 1}
    assert {r["features"]: r["form"] for r in ws.rows(select(t.lexicon_forms))} == {"PST": "walked", "PRS.NO3S": "walks"}


def test_an_undeclared_language_is_refused_with_the_way_to_declare_it(ws, tmp_path):
    path = tmp_path / "xyz"
    path.write_text("a\tb\tN;SG\n", encoding="utf-8")
    with pytest.raises(LexiconImportError, match="unknown language 'qq'.*builder language add"):
        import_unimorph(ws, path, "qq")


@pytest.mark.parametrize("bad, where, message, strict", [
    ("Buch\tBuches\tN;GEN;SG;XYZ\n", ":8: field 3", "feature 'XYZ' is not a dimension of German", True),
    ("Buch\tBuches\tN;GEN;DAT;SG\n", ":8: field 3", "feature 'DAT' is a second feature of CASE", True),
    ("Buch\tBücher\n", ":8:", "expected lemma<TAB>form<TAB>features", False),
    ("Buch\t\tN;NOM;SG\n", ":8: field 2", "(form) is empty", False),
    ("Buch\tBuch\tN;V;NOM\n", ":8: field 3", "two parts of speech", False),
    ("Bu\x00ch\tBuch\tN;NOM;SG\n", ":8: field 1", "(lemma) holds U+0000 (a control character) at character 3", False),
    ("Buch\t" + "e" * 201 + "\tN;NOM;SG\n", ":8: field 2", "(form) is 201 characters long, more than the 200", False),
])
def test_bad_unimorph_line_fails_the_whole_file_and_writes_nothing(ws, tmp_path, bad, where, message, strict):
    path = _table(tmp_path, UNIMORPH + bad)
    with pytest.raises(LexiconImportError) as info:
        import_unimorph(ws, path, "de", strict=strict)
    assert f"{path}{where}" in str(info.value) and message in str(info.value)
    assert ws.count(t.lexicon_forms) == 0


def _fill(ws, server, root, **kw):
    async def go():
        client = LLMClient(LLMCache.of_workspace(ws), settings_for(server, **kw))
        try:
            return await propose_forms(ws, client, registry(ws)["de"], needs(ws, "de", root))
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_llm_proposes_only_the_missing_forms_and_a_rerun_asks_nothing(ws, server, tmp_path):
    import_unimorph(ws, _table(tmp_path), "de")
    root = _templates(tmp_path)
    assert [(n.lemma, n.bundles, n.features) for n in needs(ws, "de", root)] == [("Bett", ("SG.DAT", "PL.DAT"), "NEUT")]
    server.lexicon.inflections[("de", "Bett", "PL.DAT")] = "Betten"
    server.lexicon.inflections[("de", "Bett", "SG.DAT")] = "Bett"
    summary = _fill(ws, server, root)
    assert (summary.lemmas, summary.proposed, summary.flagged) == (1, 2, {})
    forms = _forms(ws)
    assert forms[("Bett", "PL.DAT")]["form"] == "Betten" and forms[("Bett", "PL.DAT")]["status"] == "proposed"
    assert forms[("Bett", "PL.DAT")]["llm_call_id"] in {r["id"] for r in ws.rows(select(t.llm_calls.c.id))}
    calls = server.stats.calls
    assert needs(ws, "de", root) == [] and _fill(ws, server, root).proposed == 0 and server.stats.calls == calls


@pytest.mark.both_databases
def test_two_workers_filling_one_language_send_side_by_side_and_no_request_twice(ws, server, tmp_path):
    """A worker that comes to a chunk another worker is sending goes on to the next one, and waits for the other's
    reply only once no chunk is left: two workers of two requests each keep four in flight, not two."""
    root = tmp_path / "templates"
    (root / "de").mkdir(parents=True)
    lemmas = ", ".join(f"Raum{i:02d}: {('MASC', 'FEM', 'NEUT')[i % 3]}" for i in range(40))  # four requests' worth
    (root / "de" / "spatial.yaml").write_text(TEMPLATE.replace("{Tisch: MASC, Lampe: FEM, Bett: NEUT}", f"{{{lemmas}}}"))
    LLMCache.of_workspace(ws).record_mode(server.base_url, "standin-translator", "json_schema", {})
    server.latency_s = 0.5  # each reply takes long enough for both workers to be sending before the first comes
    todo = needs(ws, "de", root)

    async def go():
        clients = [LLMClient(LLMCache.of_workspace(ws), settings_for(server, concurrency=2)) for _ in range(2)]
        try:
            await asyncio.gather(*(propose_forms(ws, c, registry(ws)["de"], todo) for c in clients))
        finally:
            for c in clients:
                await c.aclose()
        return clients

    clients = asyncio.run(go())
    assert [c.stats.sent for c in clients] == [2, 2] and server.stats.peak_in_flight == 4
    assert set(server.stats.prompts.values()) == {1} and set(server.stats.requested.values()) == {1}
    assert len(_forms(ws)) == 2 * 40 and ws.count(t.llm_claims) == 0


def test_a_worker_that_starts_late_cuts_the_requests_the_first_one_sends_and_sends_none_twice(ws, server, tmp_path):
    """Requests are cut from a list that does not move as proposals are stored. A worker that starts once another has
    stored part of a language, unevenly (a lemma of the first request flagged), asks the second request as the other
    sent it (answered here from the cache, as a reply the other is still sending is waited for) and the flagged lemma
    alone: not those ten lemmas shifted into new requests."""
    root = tmp_path / "templates"
    (root / "de").mkdir(parents=True)
    lemmas = ", ".join(f"Raum{i:02d}: {('MASC', 'FEM', 'NEUT')[i % 3]}" for i in range(40))  # four requests of ten
    (root / "de" / "spatial.yaml").write_text(TEMPLATE.replace("{Tisch: MASC, Lampe: FEM, Bett: NEUT}", f"{{{lemmas}}}"))
    server.lexicon.inflections[("de", "Raum00", "SG.DAT")] = " "
    assert _fill(ws, server, root, max_reasks=0).flagged.keys() == {"Raum00"}
    second = [f"Raum{i:02d}" for i in range(10, 20)]
    with ws.transaction() as conn:  # the second request's reply not stored yet: the first worker is still sending it
        conn.execute(t.lexicon_forms.delete().where(t.lexicon_forms.c.lemma.in_(second)))
    server.lexicon.inflections[("de", "Raum00", "SG.DAT")] = "Raum00"
    todo = needs(ws, "de", root)
    assert [n.lemma for n in todo] == ["Raum00", *second]
    assert [n.lemma for n in needs(ws, "de", root, proposals_missing=True)] == [f"Raum{i:02d}" for i in range(40)]

    async def late():
        client = LLMClient(LLMCache.of_workspace(ws), settings_for(server, items_per_request=10))
        try:
            order = needs(ws, "de", root, proposals_missing=True)
            return client, await propose_forms(ws, client, registry(ws)["de"], todo, order=order)
        finally:
            await client.aclose()

    client, summary = asyncio.run(late())
    assert client.stats.sent == 1 and summary.flagged == {}  # the flagged lemma, asked again alone
    assert {n.lemma: server.stats.requested[("de", n.id)] for n in todo} == {"Raum00": 2, **dict.fromkeys(second, 1)}
    assert len(_forms(ws)) == 2 * 40


def test_a_blank_form_is_asked_again_then_flagged(ws, server, tmp_path):
    import_unimorph(ws, _table(tmp_path), "de")
    server.lexicon.inflections[("de", "Bett", "PL.DAT")] = " "
    summary = _fill(ws, server, _templates(tmp_path), max_reasks=2)
    assert summary.proposed == 0 and "form is blank" in summary.flagged["Bett"]
    assert server.stats.calls - server.stats.probes == 3 and ws.count(t.lexicon_forms) == 5


def test_a_lemma_given_up_on_is_flagged_for_status_until_its_forms_come(ws, server, tmp_path):
    from builder.status import flagged_items

    import_unimorph(ws, _table(tmp_path), "de")
    root = _templates(tmp_path)
    server.lexicon.inflections[("de", "Bett", "PL.DAT")] = " "
    _fill(ws, server, root, max_reasks=1)
    [flag] = flagged_items(ws)
    assert (flag.stage, flag.lang, flag.item_id) == ("fill", "de", needs(ws, "de", root)[0].id)
    assert flag.reason.startswith("failed validation: forms.") and "form is blank" in flag.reason
    # A re-run replays the cached replies, sends one more re-ask (answered well now) and clears the flag.
    server.lexicon.inflections[("de", "Bett", "PL.DAT")] = "Betten"
    calls = server.stats.calls
    assert _fill(ws, server, root, max_reasks=2).proposed == 2 and flagged_items(ws) == []
    assert server.stats.calls == calls + 1


def _rows(ws):
    return ws.rows(select(t.m2c_tests).order_by(t.m2c_tests.c.answer))


def test_an_unverified_fill_never_reaches_a_released_test(ws, server, tmp_path):
    import_unimorph(ws, _table(tmp_path), "de")
    root = _templates(tmp_path)
    server.lexicon.inflections.update({("de", "Bett", "PL.DAT"): "Betten", ("de", "Bett", "SG.DAT"): "Bett"})
    _fill(ws, server, root)

    s = render_tests(ws, "de", root=root)  # Bett's forms are only proposed: Bett is left out
    rows = _rows(ws)
    assert s.tests == len(rows) == 8 and all(r["verified"] for r in rows)
    assert not any("Bett" in r["context"] + r["answer"] for r in rows)
    assert s.waiting_lemmas == {"de Bett": ["SG.DAT", "PL.DAT"]}
    assert {r["answer"] for r in rows} >= {"Unter dem Tisch.", "Neben den Tischen.", "Unter der Lampe.", "Neben den Lampen."}

    preview = render_tests(ws, "de", root=root, include_unverified=True)
    rows = _rows(ws)
    assert preview.tests == 12 and preview.unverified == 4
    assert {r["answer"] for r in rows if not r["verified"]} == {"Unter dem Bett.", "Neben dem Bett.", "Unter den Betten.", "Neben den Betten."}
    assert all(r["verified"] for r in rows if "Bett" not in r["answer"])

    again = render_tests(ws, "de", root=root)  # the preview's unverified tests do not linger
    assert again.removed == 4 and all(r["verified"] for r in _rows(ws)) and len(_rows(ws)) == 8

    v = verify_fills(ws, "de", "Bett", reviewer="curator@example.org", decision="fix", forms={"DAT.PL": "Betten"})
    assert (v.verified, v.corrected) == (2, 0)
    final = render_tests(ws, "de", root=root)
    rows = _rows(ws)
    assert final.new == 4 and len(rows) == 12 and all(r["verified"] for r in rows)
    bett = next(r for r in rows if r["answer"] == "Unter den Betten.")
    assert bett["fills"]["place"] == {"lemma": "Bett", "form": "Betten", "features": {"NUMBER": "PL", "GENDER": "NEUT", "CASE": "DAT"}}
    assert "Unter dem Betten." in bett["answer_forms"] and bett["template_id"] == "de/spatial#0"


def test_a_curator_correction_and_a_rejection(ws, server, tmp_path):
    root = _templates(tmp_path)
    _fill(ws, server, root)  # synthetic forms: "Tisch-sg.dat" ...
    v = verify_fills(ws, "de", "Tisch", reviewer="ann", decision="fix", forms={"SG.DAT": "Tisch", "PL.DAT": "Tischen"})
    assert v.corrected == 2
    forms = _forms(ws)
    assert forms[("Tisch", "PL.DAT")]["form"] == "Tischen" and forms[("Tisch", "PL.DAT")]["proposed_form"] == "Tisch-pl.dat"
    assert verify_fills(ws, "de", "Lampe", reviewer="ann", decision="reject", comment="wrong").rejected == 2
    assert [n.lemma for n in needs(ws, "de", root)] == ["Lampe"]  # rejected forms are asked again
    s = render_tests(ws, "de", root=root)
    assert s.tests == 4 and {r["fills"]["place"]["lemma"] for r in _rows(ws)} == {"Tisch"}


def test_cli_import_render_and_errors(ws, tmp_path):
    runner = CliRunner()
    w = str(ws.directory)
    r = runner.invoke(app, ["lexicon", "import-unimorph", str(_table(tmp_path)), "--lang", "de", "-w", w])
    assert r.exit_code == 0 and "5 new form(s)" in r.output
    bad = _table(tmp_path, "x\ty\tN;FOO\n")
    r = runner.invoke(app, ["lexicon", "import-unimorph", str(bad), "--lang", "de", "--strict", "-w", w])
    assert r.exit_code == 1 and f"{bad}:1: field 3" in r.output
    r = runner.invoke(app, ["templates", "render", "--lang", "de", "--templates", str(_templates(tmp_path)), "-w", w])
    assert r.exit_code == 0 and "8 test(s)" in r.output and "de Bett (SG.DAT, PL.DAT)" in r.output
    r = runner.invoke(app, ["templates", "render", "--lang", "de,zh", "-w", w, "--n", "5"])
    assert r.exit_code == 0
    langs = {row["lang"] for row in ws.rows(select(t.m2c_tests.c.lang))}
    # 10 German and 11 Chinese shipped templates; the custom template's 8 tests (de/spatial#0) stay, as no shipped
    # template has its id (the shipped ones are named by test type: de/spatial#prepositions)
    assert langs == {"de", "zh"} and ws.count(t.m2c_tests) == 5 * (10 + 11) + 8
    r = runner.invoke(app, ["templates", "render", "--lang", "xx", "-w", w])
    assert r.exit_code == 1 and "no M2C language data for xx" in r.output
