from pathlib import Path

import pytest
from pydantic import ValidationError

from builder.languages import registry
from builder.records import Language, concept_id, group_id, pair_id, property_id


def test_ids_are_deterministic_and_normalised():
    # Fixed values: the same seed data must give the same ids on any machine and in any run.
    assert concept_id("toaster") == concept_id("  Toaster ")
    assert concept_id("toaster") == "c_" + __import__("hashlib").blake2b(b"concept\x1ftoaster", digest_size=6).hexdigest()
    assert property_id("is used for heating food") != concept_id("is used for heating food")
    p = pair_id("is used for heating food", "toaster", "kettle")
    assert p == pair_id("Is used for  heating food", "TOASTER", "kettle")
    assert p != pair_id("is used for heating food", "kettle", "toaster")
    assert group_id("is used for heating food", "toaster").startswith("g_")


def test_corrected_meta_prompts_sit_beside_the_papers_and_old_declarations_load():
    paper = Path("/work/shared/papers/xcomps.txt")
    langs = registry()
    corrected = {code for code, lang in langs.items() if lang.corrected_meta_prompt}
    assert corrected == {"ja", "he", "el", "ar", "fa"}
    for code, lang in langs.items():
        assert lang.prompt("paper") == lang.meta_prompt
        assert lang.prompt("corrected") == (lang.corrected_meta_prompt if code in corrected else lang.meta_prompt)
        assert code not in corrected or lang.corrected_meta_prompt != lang.meta_prompt
    if paper.is_file():  # the paper's prompts stay byte for byte as Figure 8 prints them
        text = paper.read_text(encoding="utf-8")
        assert all(f"{code}: {lang.meta_prompt}" in text for code, lang in langs.items() if code in corrected)
    # Script-native punctuation where the paper used Latin; ja asks which, not whether.
    assert all("?" not in langs[c].corrected_meta_prompt and "؟" in langs[c].corrected_meta_prompt for c in ("ar", "fa"))
    assert "?" not in langs["el"].corrected_meta_prompt and "«{word1}» ή «{word2}»;" in langs["el"].corrected_meta_prompt
    assert "どちら" in langs["ja"].corrected_meta_prompt and "מהי" not in langs["he"].corrected_meta_prompt
    # A declaration from a release made before corrected prompts existed still loads; its corrected variant is the paper's.
    old = {k: v for k, v in langs["ja"].model_dump().items() if k != "corrected_meta_prompt"}
    assert Language.model_validate(old).prompt("corrected") == langs["ja"].meta_prompt
    with pytest.raises(ValidationError, match="corrected_meta_prompt lacks placeholder"):
        Language.model_validate({**old, "corrected_meta_prompt": "{property} {word1}"})


def test_language_requires_meta_prompt_placeholders():
    with pytest.raises(ValidationError, match="word2"):
        Language(code="sw", name="Swahili", typology="agglutinative", family="Niger-Congo", script="Latn",
                 meta_prompt="{property} {word1}")
    with pytest.raises(ValidationError):
        Language(code="sw", name="Swahili", typology="fusional", family="Niger-Congo", script="Latn")
