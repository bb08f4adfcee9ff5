"""Label Studio labeling configurations, generated per review stage and language.

Every piece of LLM output is shown with the `Text` tag, which renders plain text: a proposal can
never inject HTML into a curator's screen. Every screen ends with the same two parts: a "Decision"
header over the choices, each choice labelled with what it means, and the labelled comment box
(`annotation.instructions` holds the wording). Each stage's adjudication screen is the stage's own
screen with what each curator said shown beside the item.
"""

from __future__ import annotations

from functools import partial
from xml.sax.saxutils import quoteattr

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


def _dir(lang: Language) -> str:
    return "rtl" if lang.direction == "rtl" else "ltr"


def _decision(stage: str, to: str, values: tuple[str, ...]) -> str:
    """The "Decision" header, one radio choice per decision labelled with its meaning, and the comment box."""
    s = STAGES[stage]
    inner = "".join(f"<Choice value={quoteattr(v)} html={quoteattr(f'<b>{v}</b> — {s.decisions[v]}')}/>" for v in values)
    return f"""<Header size="5" value="Decision"/>
  <Choices name="decision" toName="{to}" choice="single-radio" required="true">{inner}</Choices>
  <Header size="5" value={quoteattr(s.comment)}/>
  <TextArea name="comment" toName="{to}" editable="true" maxSubmissions="1" rows="2" transcription="true"/>"""


_OPINIONS = '<Header size="6" value="Curators said"/><Text name="opinions" value="$opinions"/>'
# The task's row (`task` in its data): the first data column, so the task list beside the screen tells rows apart.
_TASK = '<View style="color: #666"><Text name="task" value="$task"/></View>'
# Over the boxes of an adjudication: what they start with.
_VERSIONS = ("one curator's version to start with; each curator's is a tab at the top, named by the curator, whose ⋮ "
             "menu has Duplicate Annotation to start from it")


def _heading(what: str, adjudication: bool) -> str:
    return f"Adjudication: {what[0].lower()}{what[1:]}" if adjudication else what


def translation_config(lang: Language, adjudication: bool = False) -> str:
    """English source, German and Chinese seeds, category, the script check, the LLM draft (editable) and the decision.

    The adjudication variant (as every stage's) adds what each curator decided, for the adjudicator to settle.
    """
    return f"""<View>
  <Header value="{'Adjudication' if adjudication else 'Translation'} into {lang.name} ({lang.code}): $kind"/>
  {_TASK}
  <View style="display:grid; grid-template-columns: 9em 1fr; gap: 4px 12px">
    <Header size="6" value="English"/><Text name="english" value="$english"/>
    <Header size="6" value="German seed"/><Text name="seed_de" value="$seed_de"/>
    <Header size="6" value="Chinese seed"/><Text name="seed_zh" value="$seed_zh"/>
    <Header size="6" value="Category"/><Text name="category" value="$category"/>
    <Header size="6" value="LLM alternatives"/><Text name="alternatives" value="$alternatives"/>
    <Header size="6" value="LLM note"/><Text name="note" value="$note"/>
    <Header size="6" value="Script check"/><Text name="flag" value="$flag"/>
    {_OPINIONS if adjudication else ""}
  </View>
  <Header size="5" value="{f'Translation ({_VERSIONS})' if adjudication else "Translation (the LLM's proposal; edit it if you correct it)"}"/>
  <View style="direction: {_dir(lang)}">
    <TextArea name="translation" toName="english" editable="true" maxSubmissions="1" rows="1" transcription="true"/>
  </View>
  {_decision(ADJUDICATION["translation"] if adjudication else "translation", "english", TRANSLATION_DECISIONS)}
</View>"""


def sentence_config(lang: Language, adjudication: bool = False) -> str:
    """Both sentences with the verified words shown beside them; decision and corrected sentences."""
    return f"""<View>
  <Header value="{_heading('Sentence pair', adjudication)} in {lang.name} ({lang.code}): $negative_type negative"/>
  {_TASK}
  <View style="display:grid; grid-template-columns: 9em 1fr; gap: 4px 12px">
    <Header size="6" value="Property"/><Text name="property" value="$property"/>
    <Header size="6" value="Acceptable concept"/><Text name="acceptable_word" value="$acceptable_word"/>
    <Header size="6" value="Unacceptable concept"/><Text name="unacceptable_word" value="$unacceptable_word"/>
    <Header size="6" value="English"/><Text name="english" value="$english"/>
    <Header size="6" value="Generator's flag"/><Text name="flag" value="$flag"/>
    {_OPINIONS if adjudication else ""}
  </View>
  <Header size="6" value="The concept's span is marked ⟦like this⟧; fix a sentence by editing the box under it{f'; {_VERSIONS}' if adjudication else ''}."/>
  <View style="direction: {_dir(lang)}">
    <Header size="5" value="Acceptable sentence"/><Text name="acceptable" value="$acceptable"/>
    <TextArea name="acceptable_fixed" toName="acceptable" editable="true" maxSubmissions="1" rows="1" transcription="true"/>
    <Header size="5" value="Unacceptable sentence"/><Text name="unacceptable" value="$unacceptable"/>
    <TextArea name="unacceptable_fixed" toName="unacceptable" editable="true" maxSubmissions="1" rows="1" transcription="true"/>
  </View>
  {_decision(ADJUDICATION["sentences"] if adjudication else "sentences", "acceptable", SENTENCE_DECISIONS)}
</View>"""


def inflection_config(lang: Language, adjudication: bool = False) -> str:
    """A lemma, the feature bundles it needs, and the proposed form of each, all editable."""
    return f"""<View>
  <Header value="{_heading('Inflection table', adjudication)} in {lang.name} ({lang.code})"/>
  {_TASK}
  <View style="display:grid; grid-template-columns: 9em 1fr; gap: 4px 12px">
    <Header size="6" value="Lemma"/><Text name="lemma" value="$lemma"/>
    <Header size="6" value="Feature bundles"/><Text name="bundles" value="$bundles"/>
    {_OPINIONS if adjudication else ""}
  </View>
  <Header size="5" value="One line per bundle: FEATURES, a tab, the form{f' ({_VERSIONS})' if adjudication else ''}"/>
  <View style="direction: {_dir(lang)}">
    <TextArea name="forms" toName="lemma" editable="true" maxSubmissions="1" rows="8" transcription="true"/>
  </View>
  {_decision(ADJUDICATION["inflections"] if adjudication else "inflections", "lemma", SENTENCE_DECISIONS)}
</View>"""


def judge_config(lang: Language, adjudication: bool = False) -> str:
    """The pair, the LLM judge's reason, and the decision: confirm the false negative, or keep the pair."""
    return f"""<View>
  <Header value="{_heading("Judge's verdict", adjudication)} in {lang.name} ({lang.code}): may the $negative_type negative have the property?"/>
  {_TASK}
  <View style="display:grid; grid-template-columns: 9em 1fr; gap: 4px 12px">
    <Header size="6" value="Property"/><Text name="property" value="$property"/>
    <Header size="6" value="Acceptable concept"/><Text name="acceptable_word" value="$acceptable_word"/>
    <Header size="6" value="Unacceptable concept"/><Text name="unacceptable_word" value="$unacceptable_word"/>
    <Header size="6" value="English"/><Text name="english" value="$english"/>
    <Header size="6" value="The judge's reason"/><Text name="reason" value="$reason"/>
    {_OPINIONS if adjudication else ""}
  </View>
  <View style="direction: {_dir(lang)}">
    <Header size="5" value="Acceptable sentence"/><Text name="acceptable" value="$acceptable"/>
    <Header size="5" value="Unacceptable sentence"/><Text name="unacceptable" value="$unacceptable"/>
  </View>
  {_decision(ADJUDICATION["judge"] if adjudication else "judge", "unacceptable", JUDGE_DECISIONS)}
</View>"""


_SCREENS = {"translation": translation_config, "sentences": sentence_config, "inflections": inflection_config,
            "judge": judge_config}
CONFIGS = {stage: _SCREENS[stage] if stage in _SCREENS else partial(_SCREENS[base_stage(stage)], adjudication=True)
           for stage in REVIEW_STAGES}
