"""Seed import: the bundled sample's quality, and bad input that names file, line and field."""

import csv
import json
from collections import defaultdict

import pytest
from sqlalchemy import select

from builder.paths import sample_dir
from builder.seeds import SeedImportError, import_seeds
from builder.workspace import schema as t

pytestmark = pytest.mark.both_databases

SEEDS = sample_dir() / "seeds"


def _comps():
    return [json.loads(line) for line in (SEEDS / "comps.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]


def test_sample_meets_the_size_and_quality_bar(sample_ws):
    ws = sample_ws
    categories = {r["category"] for r in ws.rows(select(t.concepts.c.category))}
    assert ws.count(t.concepts) >= 60 and len(categories) >= 8
    assert ws.count(t.properties) >= 40 and ws.count(t.pairs) >= 300
    assert None not in categories  # every concept has a category
    # German and Chinese seeds for every concept and property, and they are verified words.
    for lang in ("de", "zh"):
        n = len(ws.rows(select(t.verified_words).where(t.verified_words.c.lang == lang, t.verified_words.c.origin == "seed")))
        assert n == ws.count(t.concepts) + ws.count(t.properties)


def test_sample_negatives_are_linguistically_sound():
    rows = _comps()
    cat = {r["concept"]: r["category"] for r in csv.DictReader((SEEDS / "concepts.csv").open(encoding="utf-8"))}
    positives = defaultdict(set)
    types = defaultdict(set)
    for r in rows:
        positives[r["property"]].add(r["acceptable_concept"])
        types[(r["property"], r["acceptable_concept"])].add(r["negative_sample_type"])
    for r in rows:
        # A negative never has the property: it is never a positive of the same property.
        assert r["unacceptable_concept"] not in positives[r["property"]], r
        if r["negative_sample_type"] == "taxonomic":  # a sibling in the same category
            assert cat[r["unacceptable_concept"]] == cat[r["acceptable_concept"]], r
    complete = sum(1 for v in types.values() if v == {"taxonomic", "overlap", "co-occurrence", "random"})
    assert complete >= 0.95 * len(types)
    toaster = {r["unacceptable_concept"]: r["negative_sample_type"] for r in rows
               if r["property"] == "is used for heating food" and r["acceptable_concept"] == "toaster"}
    assert toaster == {"coffee maker": "taxonomic", "refrigerator": "overlap", "kettle": "co-occurrence", "wren": "random"}


def test_reimport_is_idempotent(sample_ws):
    before = {tbl.name: sample_ws.count(tbl) for tbl in (t.concepts, t.properties, t.pairs, t.seed_translations)}
    s = import_seeds(sample_ws, SEEDS)
    assert (s.concepts, s.properties, s.pairs, s.seed_translations) == (0, 0, 0, 0)
    assert before == {tbl.name: sample_ws.count(tbl) for tbl in (t.concepts, t.properties, t.pairs, t.seed_translations)}


GOOD = {"property": "can fly", "acceptable_concept": "robin", "unacceptable_concept": "penguin",
        "negative_sample_type": "taxonomic", "prefix_acceptable": "a robin", "prefix_unacceptable": "a penguin",
        "property_phrase": "can fly.", "similarity": 0.7, "extra_field": "ignored"}


def _write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "bad_row, expected",
    [
        ({k: v for k, v in GOOD.items() if k != "prefix_unacceptable"}, ":2: field 'prefix_unacceptable': missing"),
        ({**GOOD, "unacceptable_concept": "emu", "negative_sample_type": "semantic"},
         ":2: field 'negative_sample_type': unknown negative type 'semantic'"),
        ({**GOOD, "negative_sample_type": "overlap"}, ":2: duplicate pair id"),
        ({**GOOD, "unacceptable_concept": "emu", "similarity": "high"}, ":2: field 'similarity': expected a number"),
    ],
)
def test_bad_comps_rows_name_file_line_field_and_write_nothing(ws, tmp_path, bad_row, expected):
    path = _write_jsonl(tmp_path / "pairs.jsonl", [GOOD, bad_row])
    with pytest.raises(SeedImportError) as err:
        import_seeds(ws, path)
    assert f"{path}{expected}" in str(err.value)
    assert "nothing was written" in str(err.value)
    assert ws.count(t.pairs) == 0 and ws.count(t.concepts) == 0


def test_bad_encoding_names_the_line(ws, tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + b'{"property": "caf\xe9"}\n')
    with pytest.raises(SeedImportError, match=r"pairs.jsonl:2: not valid UTF-8"):
        import_seeds(ws, path)
    assert ws.count(t.pairs) == 0


def test_seed_translation_with_unknown_language_lists_known_codes(ws, tmp_path):
    pairs = _write_jsonl(tmp_path / "pairs.jsonl", [GOOD])
    seeds = tmp_path / "seeds.csv"
    seeds.write_text("english,language,text,translator\nrobin,de,Rotkehlchen,a\npenguin,xx,Pinguin,a\n", encoding="utf-8")
    with pytest.raises(SeedImportError) as err:
        import_seeds(ws, pairs, seeds)
    msg = str(err.value)
    assert f"{seeds}:3: field 'language': unknown language code 'xx'; known: ar, ca, de" in msg
    assert ws.count(t.pairs) == 0 and ws.count(t.seed_translations) == 0  # the good pairs file is not written either


def test_seed_translations_by_english_text_or_item_id(ws, tmp_path):
    from builder.records import concept_id

    pairs = _write_jsonl(tmp_path / "pairs.jsonl", [GOOD])
    seeds = tmp_path / "seeds.jsonl"
    _write_jsonl(seeds, [
        {"english": "can fly", "language": "de", "text": "kann fliegen", "translator": "x"},
        {"item_id": concept_id("penguin"), "language": "zh", "text": "企鹅", "translator": "y"},
        {"english": "ostrich", "language": "de", "text": "Strauß", "translator": "x"},
    ])
    with pytest.raises(SeedImportError, match=r"seeds.jsonl:3: field 'english': no concept or property"):
        import_seeds(ws, pairs, seeds)
    _write_jsonl(seeds, [
        {"english": "can fly", "language": "de", "text": "kann fliegen", "translator": "x"},
        {"item_id": concept_id("penguin"), "language": "zh", "text": "企鹅", "translator": "y"},
    ])
    import_seeds(ws, pairs, seeds)
    rows = {(r["lang"], r["kind"], r["text"]) for r in ws.rows(select(t.verified_words).where(t.verified_words.c.origin == "seed"))}
    assert rows == {("de", "property", "kann fliegen"), ("zh", "concept", "企鹅")}
