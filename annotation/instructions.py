"""What curators read in Label Studio before labeling: each project's instructions (its `expert_instruction`),
rendered from its stage's record (`builder.review_stages`: what a task is, what to check, what each decision means).

The wording follows the curator guide, docs/curators.md; a test keeps the two the same. Curators read
English; the instructions name the language under review and what to check for it.
"""

from __future__ import annotations

from html import escape

from builder.records import Language
from builder.review_stages import review_stage

# What an adjudicator reads instead of the stage's own introduction.
_ADJUDICATION_INTRO = (
    "The curators of each item here disagreed (before or after it was verified: until you decide, it is not); "
    "<b>Curators said</b> shows what each decided. The boxes start with one curator's version, and each curator's "
    "version is a tab at the top of the task, named by the curator: open one and choose <i>Duplicate Annotation</i> "
    "in its ⋮ menu to start from it, or edit the boxes. Your decision settles the item, with the text you leave, "
    "and is recorded under your name as the adjudicator.")


def heading(stage: str, lang: Language) -> str:
    record = review_stage(stage)
    text = record.instructions.heading if stage == record.name else f"Adjudication of {record.instructions.adjudicated}"
    return text.format(lang=f"{lang.name} ({lang.code})")


def instructions(stage: str, lang: Language) -> str:
    """The project's instructions, as HTML: what the tasks are, what to check, what each decision means."""
    record = review_stage(stage)
    s = record.instructions
    name = escape(lang.name)
    keys = f"keys 1–{len(record.decisions)}"
    parts = [
        f"<h3>{escape(heading(stage, lang))}</h3>",
        f"<p>{s.intro if stage == record.name else _ADJUDICATION_INTRO}</p>",
        f"<p><b>Check</b>: {s.check.format(lang=name)}</p>",
        f"<p><b>Decision</b> ({keys}), then <b>Submit</b> (Ctrl+Enter):</p>",
        *(f"<p>&nbsp;&nbsp;<b>{d}</b>: {escape(meaning)}</p>" for d, meaning in record.decisions.items()),
        "<p>Skip a task you cannot judge: it decides nothing and stays open for someone else. You may change your "
        "annotation later; its latest revision counts. A deleted annotation no longer counts.</p>",
        "<p>The first column of the task list names each task's item. An item asked again (a new proposal, a "
        "rewritten pair) comes as a new task; the old one keeps its annotations, marked superseded and closed.</p>",
    ]
    if lang.direction == "rtl":
        parts.append(f"<p>{name} is written right to left: its text is shown and edited right to left.</p>")
    return "\n".join(parts)
