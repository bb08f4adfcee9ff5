"""Label Studio labeling configurations, generated per review stage and language.

Every piece of LLM output is shown with the `Text` tag, which renders plain text: a proposal can
never inject HTML into a curator's screen. Every screen ends with the same two parts: a "Decision"
header over the choices, each choice labelled with what it means, and the labelled comment box
(`annotation.instructions` holds the wording). Each stage's adjudication screen is the stage's own
screen with what each curator said shown beside the item.

A screen is data (`Screen`: its heading, the facts beside the item, the texts and boxes, the decisions);
one Jinja2 template with XML autoescaping renders every screen, so a language named
`Serbo-Croatian & Bosnian` or a decision's meaning holding `<` reaches Label Studio as written.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from jinja2 import Environment, StrictUndefined

from annotation.instructions import STAGES
from builder.records import Language
from builder.reviews import (
    ADJUDICATION,
    JUDGE_DECISIONS,
    REVIEW_STAGES,
    SENTENCE_DECISIONS,
    TRANSLATION_DECISIONS,
    base_stage,
)

# Over the boxes of an adjudication: what they start with.
_VERSIONS = ("one curator's version to start with; each curator's is a tab at the top, named by the curator, whose ⋮ "
             "menu has Duplicate Annotation to start from it")


@dataclass(frozen=True)
class Text:
    """An item's text under its own header, in the language's direction (a sentence)."""

    label: str
    name: str


@dataclass(frozen=True)
class Box:
    """An editable box the curator's text goes in, for the control `to`."""

    name: str
    to: str
    rows: int = 1


@dataclass(frozen=True)
class Screen:
    """One stage's screen: `{what} {language}` and its `detail` as the heading; `facts` (label, data column) beside
    the item; a `note` over the `body` (texts and boxes, in the language's direction); the decisions on `to`."""

    what: str
    facts: tuple[tuple[str, str], ...]
    body: tuple[Text | Box, ...]
    to: str
    decisions: tuple[str, ...]
    detail: str = ""
    note: str = ""
    note_size: int = 5
    versions_note: str = ""  # the note of an adjudication (where the boxes start from)


_TEMPLATE = Environment(autoescape=True, undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True).from_string(
    """<View>
  <Header value="{{ heading }}"/>
  <View style="color: #666"><Text name="task" value="$task"/></View>
  <View style="display:grid; grid-template-columns: 9em 1fr; gap: 4px 12px">
{% for label, name in screen.facts %}
    <Header size="6" value="{{ label }}"/><Text name="{{ name }}" value="${{ name }}"/>
{% endfor %}
{% if adjudication %}
    <Header size="6" value="Curators said"/><Text name="opinions" value="$opinions"/>
{% endif %}
  </View>
{% if note %}
  <Header size="{{ screen.note_size }}" value="{{ note }}"/>
{% endif %}
  <View style="direction: {{ direction }}">
{% for part in screen.body %}
{% if part.to is defined %}
    <TextArea name="{{ part.name }}" toName="{{ part.to }}" editable="true" maxSubmissions="1" rows="{{ part.rows }}" transcription="true"/>
{% else %}
    <Header size="5" value="{{ part.label }}"/><Text name="{{ part.name }}" value="${{ part.name }}"/>
{% endif %}
{% endfor %}
  </View>
  <Header size="5" value="Decision"/>
  <Choices name="decision" toName="{{ screen.to }}" choice="single-radio" required="true">
{% for value, meaning in choices %}
    <Choice value="{{ value }}" html="{{ '<b>' ~ value ~ '</b> — ' ~ meaning }}"/>
{% endfor %}
  </Choices>
  <Header size="5" value="{{ comment }}"/>
  <TextArea name="comment" toName="{{ screen.to }}" editable="true" maxSubmissions="1" rows="2" transcription="true"/>
</View>""")

_PAIR = (("Property", "property"), ("Acceptable concept", "acceptable_word"), ("Unacceptable concept", "unacceptable_word"),
         ("English", "english"))
SCREENS = {
    "translation": Screen(
        what="Translation into", detail=": $kind", to="english", decisions=TRANSLATION_DECISIONS,
        facts=(("English", "english"), ("German seed", "seed_de"), ("Chinese seed", "seed_zh"), ("Category", "category"),
               ("LLM alternatives", "alternatives"), ("LLM note", "note"), ("Script check", "flag")),
        note="Translation (the LLM's proposal; edit it if you correct it)", versions_note=f"Translation ({_VERSIONS})",
        body=(Box("translation", "english"),)),
    "sentences": Screen(
        what="Sentence pair in", detail=": $negative_type negative", to="acceptable", decisions=SENTENCE_DECISIONS,
        facts=(*_PAIR, ("Generator's flag", "flag")), note_size=6,
        note="The concept's span is marked ⟦like this⟧; fix a sentence by editing the box under it.",
        versions_note=f"The concept's span is marked ⟦like this⟧; fix a sentence by editing the box under it; {_VERSIONS}.",
        body=(Text("Acceptable sentence", "acceptable"), Box("acceptable_fixed", "acceptable"),
              Text("Unacceptable sentence", "unacceptable"), Box("unacceptable_fixed", "unacceptable"))),
    "inflections": Screen(
        what="Inflection table in", to="lemma", decisions=SENTENCE_DECISIONS,
        facts=(("Lemma", "lemma"), ("Feature bundles", "bundles")),
        note="One line per bundle: FEATURES, a tab, the form",
        versions_note=f"One line per bundle: FEATURES, a tab, the form ({_VERSIONS})",
        body=(Box("forms", "lemma", rows=8),)),
    "judge": Screen(
        what="Judge's verdict in", detail=": may the $negative_type negative have the property?", to="unacceptable",
        decisions=JUDGE_DECISIONS, facts=(*_PAIR, ("The judge's reason", "reason")),
        body=(Text("Acceptable sentence", "acceptable"), Text("Unacceptable sentence", "unacceptable"))),
}


def screen_config(base: str, lang: Language, adjudication: bool = False) -> str:
    """The labeling config of a stage's screen (or of its adjudication) in `lang`."""
    screen = SCREENS[base]
    stage = ADJUDICATION[base] if adjudication else base
    what = f"Adjudication: {screen.what[0].lower()}{screen.what[1:]}" if adjudication else screen.what
    return _TEMPLATE.render(
        screen=screen, adjudication=adjudication, heading=f"{what} {lang.name} ({lang.code}){screen.detail}",
        note=screen.versions_note if adjudication else screen.note, direction="rtl" if lang.direction == "rtl" else "ltr",
        choices=[(v, STAGES[stage].decisions[v]) for v in screen.decisions], comment=STAGES[stage].comment)


CONFIGS = {stage: partial(screen_config, base_stage(stage), adjudication=stage != base_stage(stage)) for stage in REVIEW_STAGES}
