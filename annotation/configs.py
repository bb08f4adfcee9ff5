"""Label Studio labeling configurations, generated per review stage and language.

Every piece of LLM output is shown with the `Text` tag, which renders plain text: a proposal can
never inject HTML into a curator's screen. Every screen ends with the same two parts: a "Decision"
header over the choices, each choice labelled with what it means, and the labelled comment box
(the stage's record holds the wording). Each stage's adjudication screen is the stage's own
screen with what each curator said shown beside the item.

A screen is data, each stage's `Screen` on its record (`builder.review_stages`: its heading, the facts beside
the item, the texts and boxes), with the decisions the record names; one Jinja2 template with XML
autoescaping renders every screen, so a language named
`Serbo-Croatian & Bosnian` or a decision's meaning holding `<` reaches Label Studio as written.
"""

from __future__ import annotations

from jinja2 import Environment, StrictUndefined

from builder.records import Language
from builder.review_stages import Box, review_stage

_ENVIRONMENT = Environment(autoescape=True, undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
_ENVIRONMENT.tests["box"] = lambda part: isinstance(part, Box)
_TEMPLATE = _ENVIRONMENT.from_string(
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
{% if part is box %}
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

def config(stage: str, lang: Language) -> str:
    """The labeling config of a stage's screen (or of its adjudication's) in `lang`."""
    record = review_stage(stage)
    screen, adjudication = record.screen, stage != record.name
    what = f"Adjudication: {screen.what[0].lower()}{screen.what[1:]}" if adjudication else screen.what
    return _TEMPLATE.render(
        screen=screen, adjudication=adjudication, heading=f"{what} {lang.name} ({lang.code}){screen.detail}",
        note=screen.versions_note if adjudication else screen.note, direction="rtl" if lang.direction == "rtl" else "ltr",
        choices=list(record.decisions.items()), comment=record.instructions.comment)
