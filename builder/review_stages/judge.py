"""Review of the judge's verdicts: is a negative the LLM judge says may have the property a false negative?

One task per pair the judge flagged (stage "judge" in `flags`) whose current sentences no curator has
decided on: both sentences with their concepts marked, the words, the English pair and the judge's
reason. The curator confirms the false negative or keeps the pair; `builder.reviews` records the
decision against the version of the pair the task showed and settles the flag.
"""

from __future__ import annotations

from sqlalchemy import select

from builder import reviews
from builder.languages import SOURCE_LANGUAGE, registry
from builder.review_stages import Instructions, ReviewStage, Screen, Task, Text, register
from builder.review_stages.sentences import PAIR_FACTS, mark, pair_fields
from builder.reviews import SentenceEdit, current_pairs, judge_pending
from builder.selection import verified
from builder.workspace import schema as t
from builder.workspace.store import Workspace


def judge_tasks(ws: Workspace, lang: str) -> list[Task]:
    """One task per pair flagged by the judge in `lang` whose current sentences no curator has decided on."""
    flagged = judge_pending(ws, lang)
    if not flagged:
        return []
    pairs = {r["id"]: r for r in ws.rows(select(t.pairs).where(t.pairs.c.id.in_(sorted(flagged))))}
    current = current_pairs(ws, lang)
    english = current_pairs(ws, SOURCE_LANGUAGE)
    words = {item: w["text"] for item, w in verified(ws, lang).items()}
    name = registry(ws)[lang].name
    tasks = []
    for pair_id, reason in sorted(flagged.items()):
        sp, pair, en = current.get(pair_id), pairs[pair_id], english.get(pair_id)
        if sp is None:
            continue
        spans = sp["spans"]
        data = {
            **pair_fields(pair, words, sp["version"], name),
            "item_key": f"judge:{lang}:{pair_id}", "item_id": pair_id,
            "english": f"{en['acceptable']} / {en['unacceptable']}" if en else "—", "reason": reason,
            "acceptable": mark(sp["acceptable"], spans.get("acceptable_concept")),
            "unacceptable": mark(sp["unacceptable"], spans.get("unacceptable_concept")),
            "version": sp["version"], "draft_acceptable": sp["acceptable"], "draft_unacceptable": sp["unacceptable"],
        }
        tasks.append(Task(data=data, model="judge"))  # no draft: the curator decides from scratch
    return tasks


def edit(data: dict, fields: dict) -> SentenceEdit:
    """A judge annotation's part: the version of the pair its task showed (the sentences are not edited here)."""
    return SentenceEdit(version=data["version"], draft_acceptable=data["draft_acceptable"],
                        draft_unacceptable=data["draft_unacceptable"])


register(ReviewStage(
    name="judge", adjudication="adjudicate-judge", made_on="pair", tasks=judge_tasks, edit=edit,
    pending=lambda ws, lang, settled: len(judge_pending(ws, lang)), waiting=judge_pending, released_in="pairs",
    decide=reviews.decide_judgements, every_pull=True,
    decisions={
        "false negative": "the unacceptable concept has the property: the pair must change before it is released",
        "keep": "the unacceptable concept lacks the property: the pair stays as it is",
    },
    screen=Screen(
        what="Judge's verdict in", detail=": may the $negative_type negative have the property?", to="unacceptable",
        facts=(*PAIR_FACTS, ("The judge's reason", "reason")),
        body=(Text("Acceptable sentence", "acceptable"), Text("Unacceptable sentence", "unacceptable"))),
    instructions=Instructions(
        heading="The LLM judge's verdicts in {lang}", adjudicated="the LLM judge's verdicts in {lang}",
        intro="Each task is a minimal pair whose unacceptable sentence an LLM, asked as a judge, thinks may be true: "
              "its reason is shown beside the pair. Nothing is dropped on the judge's word; your decision settles it.",
        check="whether the unacceptable concept really has the property in {lang} as the sentence says it (a banana "
              "<i>is</i> used for making smoothies); a word sense of the {lang} concept can make it true (a word for "
              "<i>keys</i> that also means tuning pegs).",
        comment="Comment (kept with your verdict: say why)"),
))
