"""Sentence-pair review: generated pairs go to curators, who accept, fix or reject them.

A task shows both sentences with the verified words marked, the words themselves and the English
pair; the two sentences are pre-filled as editable drafts. The review owner records decisions against
the version of the pair the curator saw (`builder.reviews`), so a regenerated pair is reviewed
afresh, and rejected pairs go back to generation with the curator's comment.
"""

from __future__ import annotations

from sqlalchemy import func, select

from builder import reviews
from builder.languages import SOURCE_LANGUAGE, registry
from builder.review_stages import VERSIONS_NOTE, Box, Instructions, ReviewStage, Screen, Task, Text, call_models, register
from builder.reviews import SentenceEdit, current_pairs, sentence_decisions
from builder.selection import verified
from builder.workspace import schema as t
from builder.workspace.store import Workspace

MARK = ("⟦", "⟧")  # around the verified word's span; plain text, so nothing can render as markup
PAIR_FACTS = (("Property", "property"), ("Acceptable concept", "acceptable_word"),
              ("Unacceptable concept", "unacceptable_word"), ("English", "english"))


def mark(sentence: str, span: list[int] | tuple[int, int] | None) -> str:
    if not span:
        return sentence
    start, end = span
    return f"{sentence[:start]}{MARK[0]}{sentence[start:end]}{MARK[1]}{sentence[end:]}"


def sentence_tasks(ws: Workspace, lang: str) -> list[Task]:
    """One task per generated pair in `lang` whose current sentences no curator has decided on."""
    if lang == SOURCE_LANGUAGE:
        return []  # English comes from COMPS itself
    decided = sentence_decisions(ws, lang)
    pairs = {r["id"]: r for r in ws.rows(select(t.pairs))}
    english = current_pairs(ws, SOURCE_LANGUAGE)
    words = {item: w["text"] for item, w in verified(ws, lang).items()}
    models = call_models(ws, lang)
    name = registry(ws)[lang].name
    tasks = []
    for pair_id, sp in sorted(current_pairs(ws, lang).items()):
        if pair_id in decided:
            continue
        pair = pairs[pair_id]
        en = english.get(pair_id)
        spans = sp["spans"]
        data = {
            **pair_fields(pair, words, sp["version"], name),
            "item_key": f"sentences:{lang}:{pair_id}", "item_id": pair_id,
            "english": f"{en['acceptable']} / {en['unacceptable']}" if en else "—",
            "acceptable": mark(sp["acceptable"], spans.get("acceptable_concept")),
            "unacceptable": mark(sp["unacceptable"], spans.get("unacceptable_concept")),
            "flag": sp["reason"] or "—", "version": sp["version"],
            "draft_acceptable": sp["acceptable"], "draft_unacceptable": sp["unacceptable"],
        }
        tasks.append(Task(data=data, model=models.get(sp["llm_call_id"], "llm"),
                          drafts={"acceptable_fixed": sp["acceptable"], "unacceptable_fixed": sp["unacceptable"]}))
    return tasks


def pair_fields(pair: dict, words: dict[str, str], version: str, lang_name: str) -> dict:
    """What a task about a pair shows of it: its words, and the row that tells it apart in the task list
    (the concepts, the property, the language, the pair and the version of its sentences)."""
    shown = {"negative_type": pair["negative_type"], "property": words.get(pair["property_id"], "—"),
             "acceptable_word": words.get(pair["acceptable_id"], "—"),
             "unacceptable_word": words.get(pair["unacceptable_id"], "—")}
    task = (f"{shown['acceptable_word']} / {shown['unacceptable_word']}: {shown['property']} · {lang_name} · "
            f"pair {pair['id']} · version {version[:6]}")
    return {"task": task, **shown}


def edit(data: dict, fields: dict) -> SentenceEdit:
    """A sentence-pair annotation's part: the version and drafts its task showed, the sentences the curator fixed."""
    return SentenceEdit(version=data["version"], draft_acceptable=data["draft_acceptable"],
                        draft_unacceptable=data["draft_unacceptable"], acceptable=fields.get("acceptable_fixed") or None,
                        unacceptable=fields.get("unacceptable_fixed") or None)


def pending(ws: Workspace, lang: str, settled: int) -> int:
    """Pairs with sentences in `lang` and no settled decision."""
    return ws.scalar(select(func.count()).select_from(t.sentence_pairs).where(t.sentence_pairs.c.lang == lang)) - settled


register(ReviewStage(
    name="sentences", adjudication="adjudicate-pairs", made_on="pair", tasks=sentence_tasks, edit=edit, pending=pending,
    released_in="pairs", decide=reviews.settle_pair_flags, textual=("accept", "fix"),
    versions=lambda opinion: {"acceptable_fixed": opinion.acceptable, "unacceptable_fixed": opinion.unacceptable},
    decisions={
        "accept": "both sentences are fluent and identical outside the concept span",
        "fix": "you edited the drafts under the sentences; your text is what gets released",
        "reject": "the pair is wrong; say why in the comment, and the LLM rewrites it",
    },
    screen=Screen(
        what="Sentence pair in", detail=": $negative_type negative", to="acceptable",
        facts=(*PAIR_FACTS, ("Generator's flag", "flag")), note_size=6,
        note="The concept's span is marked ⟦like this⟧; fix a sentence by editing the box under it.",
        versions_note=f"The concept's span is marked ⟦like this⟧; fix a sentence by editing the box under it; {VERSIONS_NOTE}.",
        body=(Text("Acceptable sentence", "acceptable"), Box("acceptable_fixed", "acceptable"),
              Text("Unacceptable sentence", "unacceptable"), Box("unacceptable_fixed", "unacceptable"))),
    instructions=Instructions(
        heading="Sentence pairs in {lang}", adjudicated="sentence pairs in {lang}",
        intro="Each task is a minimal pair: an acceptable and an unacceptable sentence that differ only in the concept, "
              "whose span is marked ⟦like this⟧. Under each sentence is an editable draft.",
        check="both sentences are fluent {lang}; they are identical outside the concept span; the property is true of "
              "the acceptable concept and false of the unacceptable one; each concept is the verified word, in the "
              "form the sentence needs; a flag the generator raised is resolved.",
        comment="Comment (sent back to the LLM with a rejected pair)"),
))
