"""The re-ask loop's reading of a batch reply: which items are good, and why each other one is not."""

import json

import pytest
from pydantic import BaseModel, Field

from builder.llm.items import ItemProblem, followup_message, item_list, read_items


class Item(BaseModel):
    id: str
    text: str = Field(min_length=1)


class Batch(BaseModel):
    items: list[Item]


ASKED = ["a", "b", "c"]


def read(reply, asked=ASKED, known=ASKED):
    return read_items(reply if isinstance(reply, str) else json.dumps(reply), Batch, asked, known)


def test_a_good_reply_has_no_problems():
    good, problems = read({"items": [{"id": i, "text": i.upper()} for i in ASKED]})
    assert {k: v.text for k, v in good.items()} == {"a": "A", "b": "B", "c": "C"} and problems == {}


def test_an_item_left_out_is_missing():
    good, problems = read({"items": [{"id": "a", "text": "A"}, {"id": "c", "text": "C"}]})
    assert set(good) == {"a", "c"}
    assert problems == {"b": ItemProblem("missing")} and problems["b"].reason == "missing from the reply"


def test_an_answer_under_an_id_never_asked_makes_the_absent_ones_wrong_ids():
    good, problems = read({"items": [{"id": "a", "text": "A"}, {"id": "x", "text": "B"}, {"text": "C"}]})
    assert set(good) == {"a"}
    assert set(problems) == {"b", "c"} and {p.kind for p in problems.values()} == {"wrong id"}
    assert problems["b"].reason == "wrong id: the reply answered x, item #3 without an id, which were not asked"


def test_an_id_asked_earlier_and_accepted_is_ignored_not_a_wrong_id():
    good, problems = read({"items": [{"id": "a", "text": "A"}, {"id": "b", "text": "B again"}]}, asked=["a", "c"])
    assert set(good) == {"a"} and problems == {"c": ItemProblem("missing")}


def test_an_item_that_fails_its_model_carries_the_validation_message():
    good, problems = read({"items": [{"id": "a", "text": ""}, {"id": "b", "text": "B"}, {"id": "c", "text": 3}]})
    assert set(good) == {"b"}
    assert problems["a"] == ItemProblem("invalid", "text: String should have at least 1 character")
    assert problems["c"].reason == "failed validation: text: Input should be a valid string"


def test_a_valid_duplicate_wins_over_an_invalid_one():
    good, problems = read({"items": [{"id": "a", "text": ""}, {"id": "a", "text": "A"}]}, asked=["a"])
    assert good["a"].text == "A" and problems == {}


@pytest.mark.parametrize("reply, detail", [
    ('{"items": [{"id": "a", "text": "A"}', "not valid JSON (Expecting ',' delimiter at column 36)"),
    ('["a", "b"]', "expected a JSON object with the field 'items'"),
    ('{"answers": []}', "expected a JSON object with the field 'items'"),
    ('{"items": {"a": "A"}}', "'items' is not a list"),
])
def test_a_reply_that_cannot_be_read_makes_every_asked_item_unreadable(reply, detail):
    good, problems = read(reply)
    assert good == {} and problems == dict.fromkeys(ASKED, ItemProblem("unreadable", detail))
    assert problems["a"].reason == f"unreadable reply: {detail}"


def test_the_followup_names_each_item_with_its_reason_and_the_field_to_reply_in():
    text = followup_message({"b": ItemProblem("missing"), "c": ItemProblem("invalid", "too long")}, "items", "Be brief.")
    assert text == ("These items were missing or invalid:\n- b: missing from the reply\n- c: failed validation: too long\n"
                    'Be brief. Reply again with a JSON object {"items": [...]} holding only those items.')


def test_a_schema_that_does_not_list_items_with_ids_is_refused():
    class NoIds(BaseModel):
        items: list[str]

    class TwoFields(BaseModel):
        items: list[Item]
        note: str

    assert item_list(Batch) == ("items", Item)
    for schema in (NoIds, TwoFields):
        with pytest.raises(TypeError, match="is not a batch schema"):
            item_list(schema)
