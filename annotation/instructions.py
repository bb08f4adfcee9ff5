"""What curators read in Label Studio: the meaning of each decision, the comment box's label, and each
project's instructions (its `expert_instruction`, shown before labeling).

The wording follows the curator guide, docs/curators.md; a test keeps the two the same. Curators read
English; the instructions name the language under review and what to check for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from builder.records import Language
from builder.reviews import ADJUDICATION


@dataclass(frozen=True)
class Stage:
    heading: str  # "{lang}" stands for the language's name and code
    intro: str
    check: str
    decisions: dict[str, str]  # decision -> what choosing it means
    comment: str  # the comment box's label


_TRANSLATION_DECISIONS = {
    "accept": "the draft is right as it stands; do not edit it",
    "corrected": "you fixed the draft: the Translation box holds the final form",
    "reject": "the draft is wrong; the LLM tries again with your comment",
    "ambiguous": "the seeds do not settle the sense, or the language has no single good word; say why in the comment",
}
_TRANSLATION_CHECK = (
    "the sense is the one the German and Chinese seeds fix (<i>bat</i> with <i>Schläger</i> / <i>球拍</i> is the "
    "sports equipment, not the animal); a concept is in its citation form (singular, no article unless {lang} "
    "always writes one); a property is a predicate phrase, without words that agree with the concept where {lang} "
    "allows."
)
_TRANSLATION_COMMENT = "Comment (sent back to the LLM when you reject or mark ambiguous)"

_REVIEWED: dict[str, Stage] = {
    "translation": Stage(
        heading="Translation into {lang}",
        intro="Each task is one English concept (a noun such as <i>bat</i>) or property (a predicate such as <i>is used "
              "for hitting a ball</i>). The LLM's proposal is already in the <b>Translation</b> box as an editable draft.",
        check=_TRANSLATION_CHECK, decisions=_TRANSLATION_DECISIONS, comment=_TRANSLATION_COMMENT),
    "sentences": Stage(
        heading="Sentence pairs in {lang}",
        intro="Each task is a minimal pair: an acceptable and an unacceptable sentence that differ only in the concept, "
              "whose span is marked ⟦like this⟧. Under each sentence is an editable draft.",
        check="both sentences are fluent {lang}; they are identical outside the concept span; the property is true of "
              "the acceptable concept and false of the unacceptable one; each concept is the verified word, in the "
              "form the sentence needs; a flag the generator raised is resolved.",
        decisions={
            "accept": "both sentences are fluent and identical outside the concept span",
            "fix": "you edited the drafts under the sentences; your text is what gets released",
            "reject": "the pair is wrong; say why in the comment, and the LLM rewrites it",
        },
        comment="Comment (sent back to the LLM with a rejected pair)"),
    "inflections": Stage(
        heading="Inflection tables in {lang}",
        intro="Each task is one lemma and the forms the LLM proposed for the feature bundles an M2C template needs, "
              "one line per bundle: the bundle, a tab, the form.",
        check="each form is the {lang} form of the lemma for its bundle (<code>PL.DAT</code>: plural dative); keep one "
              "line per bundle and the bundle as written. Only forms you accept or fix ever reach a released test.",
        decisions={
            "accept": "every form in the table is right",
            "fix": "you corrected lines of the table; they are what gets verified",
            "reject": "the forms are wrong; say why in the comment",
        },
        comment="Comment (kept with the forms: say why you fix or reject)"),
    "judge": Stage(
        heading="The LLM judge's verdicts in {lang}",
        intro="Each task is a minimal pair whose unacceptable sentence an LLM, asked as a judge, thinks may be true: "
              "its reason is shown beside the pair. Nothing is dropped on the judge's word; your decision settles it.",
        check="whether the unacceptable concept really has the property in {lang} as the sentence says it (a banana "
              "<i>is</i> used for making smoothies); a word sense of the {lang} concept can make it true (a word for "
              "<i>keys</i> that also means tuning pegs).",
        decisions={
            "false negative": "the unacceptable concept has the property: the pair must change before it is released",
            "keep": "the unacceptable concept lacks the property: the pair stays as it is",
        },
        comment="Comment (kept with your verdict: say why)"),
}
# What each stage's adjudication is of, for its heading ("{lang}" as above).
_ADJUDICATED = {"translation": "translations into {lang}", "sentences": "sentence pairs in {lang}",
                "inflections": "inflection tables in {lang}", "judge": "the LLM judge's verdicts in {lang}"}


def _adjudication(stage: str) -> Stage:
    """A stage's adjudication: its check, decisions and comment, for the items its curators disagreed on."""
    s = _REVIEWED[stage]
    return Stage(heading=f"Adjudication of {_ADJUDICATED[stage]}",
                 intro="The curators of each item here disagreed (before or after it was verified: until you decide, "
                       "it is not); <b>Curators said</b> shows what each decided. The boxes start with one curator's "
                       "version, and each curator's version is a tab at the top of the task, named by the curator: "
                       "open one and choose <i>Duplicate Annotation</i> in its ⋮ menu to start from it, or edit the "
                       "boxes. Your decision settles the item, with the text you leave, and is recorded under your "
                       "name as the adjudicator.",
                 check=s.check, decisions=s.decisions, comment=s.comment)


STAGES: dict[str, Stage] = {name: stage for base, stage in _REVIEWED.items()
                            for name, stage in ((base, stage), (ADJUDICATION[base], _adjudication(base)))}


def heading(stage: str, lang: Language) -> str:
    return STAGES[stage].heading.format(lang=f"{lang.name} ({lang.code})")


def instructions(stage: str, lang: Language) -> str:
    """The project's instructions, as HTML: what the tasks are, what to check, what each decision means."""
    s = STAGES[stage]
    name = escape(lang.name)
    keys = f"keys 1–{len(s.decisions)}"
    parts = [
        f"<h3>{escape(heading(stage, lang))}</h3>",
        f"<p>{s.intro}</p>",
        f"<p><b>Check</b>: {s.check.format(lang=name)}</p>",
        f"<p><b>Decision</b> ({keys}), then <b>Submit</b> (Ctrl+Enter):</p>",
        *(f"<p>&nbsp;&nbsp;<b>{d}</b>: {escape(meaning)}</p>" for d, meaning in s.decisions.items()),
        "<p>Skip a task you cannot judge: it decides nothing and stays open for someone else. You may change your "
        "annotation later; its latest revision counts. A deleted annotation no longer counts.</p>",
        "<p>The first column of the task list names each task's item. An item asked again (a new proposal, a "
        "rewritten pair) comes as a new task; the old one keeps its annotations, marked superseded and closed.</p>",
    ]
    if lang.direction == "rtl":
        parts.append(f"<p>{name} is written right to left: its text is shown and edited right to left.</p>")
    return "\n".join(parts)
