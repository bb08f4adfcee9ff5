"""What to do next: for each language, what is pending and the one command that moves it.

`builder status`, `builder review status` and `builder review pull` end with these steps, and each LLM
stage with those for its own flags. Every step names a command that, run as printed, moves its items:
an LLM stage asks its flagged items again (`builder.flags.Retries`) until they wait for a person, who
then writes them by hand (a seed file, Label Studio, a UniMorph file) or asks the stage again anyway
(`--reask-flagged`). A command that needs a file says so with FILE in its place.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection
from functools import cached_property

from pydantic import BaseModel
from sqlalchemy import and_, func, select

from builder import languages as languages_mod
from builder import reviews
from builder.flags import RUNS, Flag, Retries, list_flags
from builder.generate import Rewrites, rewrites
from builder.review_stages import ReviewStage, review_stage, stage_names, stages
from builder.workspace import schema as t
from builder.workspace.store import Workspace, default_dir


class Step(BaseModel):
    lang: str  # a language code; "" for every language
    stage: str  # where the items are: an LLM stage (whose flags they are), a review stage, or "publish"
    what: str  # the items, in words
    command: str  # the command that moves them, as a user runs it


def command(ws: Workspace, *args: str) -> str:
    """A `builder` command line for this workspace, quoted for a shell, with `-w` unless the workspace is the default."""
    here = [] if ws.directory.resolve() == default_dir().resolve() else ["-w", str(ws.directory)]
    return shlex.join(["builder", *args, *here])


# Per LLM stage: what its items are, the command that asks them again, and how a person writes them by hand.
_ITEMS = {"translate": "item(s) the LLM could not translate", "repropose": "rejected item(s) the LLM could not translate again",
          "generate": "pair(s) the LLM could not write", "regenerate": "rejected pair(s) the LLM could not write again",
          "fill": "lemma(s) the LLM could not inflect"}
_ASK = {"translate": ("translate",), "repropose": ("review", "repropose"), "generate": ("generate",),
        "regenerate": ("review", "repropose", "--stage", "sentences"), "fill": ("templates", "fill")}
_SEED_FILE = ("write each word in a CSV file with the columns language,item_id,text,translator (the ids: builder status "
              "--flags --stage {stage} --lang {lang}), then import it", ("seeds", "import", "FILE.csv"))
_BY_HAND = {
    "translate": _SEED_FILE,
    "repropose": _SEED_FILE,
    "generate": ("a curator writes the sentences in Label Studio (decision fix)", ("review", "push", "--stage", "sentences",
                                                                                 "--lang", "{lang}")),
    "regenerate": ("a curator writes the sentences in the pair's Label Studio task (decision fix), then they are pulled",
                   ("review", "pull")),
    "fill": ("write the forms in a UniMorph file (lemma<TAB>form<TAB>features), then import it",
             ("lexicon", "import-unimorph", "FILE.tsv", "--lang", "{lang}")),
}
LLM_STAGES = tuple(_ASK)


def flag_steps(ws: Workspace, stage: str, lang: str, flagged: Retries, options: tuple[str, ...] = ()) -> list[Step]:
    """The way out of a stage's flags in `lang`: the stage asks again those it may (with `options`: the scope or
    templates folder the run read); a person writes the others by hand, or has the stage ask them again anyway."""
    again = sum(flagged.asks(i) for i in flagged.flags)
    waiting = len(flagged.flags) - again
    ask = [*_ASK[stage], "--lang", lang, *options]
    out = []
    where = " (add --templates DIR for templates other than the shipped ones)" if stage == "fill" and not options else ""
    if again:
        out.append(Step(lang=lang, stage=stage, what=f"{again} {_ITEMS[stage]}: asked again, with the reason{where}",
                        command=command(ws, *ask)))
    if waiting:
        how, args = _BY_HAND[stage]
        out.append(Step(lang=lang, stage=stage, what=f"{waiting} {_ITEMS[stage]} in {RUNS} runs: "
                        + how.format(stage=stage, lang=lang), command=command(ws, *(a.format(lang=lang) for a in args))))
        out.append(Step(lang=lang, stage=stage, what=f"or ask the LLM again for those {waiting} anyway{where}",
                        command=command(ws, *ask, "--reask-flagged")))
    return out


class _Reads:
    """What the steps of one language read from the workspace, each read once."""

    def __init__(self, ws: Workspace, lang: str) -> None:
        self.ws, self.lang = ws, lang

    @cached_property
    def flags(self) -> dict[str, dict[str, Flag]]:
        """stage -> item -> its flag in this language."""
        out: dict[str, dict[str, Flag]] = {}
        for f in list_flags(self.ws, langs=[self.lang]):
            out.setdefault(f.stage, {})[f.item_id] = f
        return out

    @cached_property
    def rejected_items(self) -> dict[str, dict]:
        return reviews.rejected_items(self.ws, self.lang)

    @cached_property
    def rejected_pairs(self) -> dict[str, str]:
        return reviews.rejected_pairs(self.ws, self.lang)

    @cached_property
    def rewrites(self) -> Rewrites:
        return rewrites(self.ws, self.lang)

    @cached_property
    def proposed(self) -> set[str]:
        return set(self.ws.column(select(t.proposals.c.item_id).where(t.proposals.c.lang == self.lang).distinct()))

    @cached_property
    def verified(self) -> set[str]:
        return set(self.ws.column(select(t.verified_words.c.item_id).where(t.verified_words.c.lang == self.lang)))


def stage_flags(ws: Workspace, stage: str, lang: str, reads: _Reads | None = None) -> Retries:
    """A stage's flags in `lang` that still stand in its way: not those a curator has taken up since."""
    reads = reads or _Reads(ws, lang)
    if stage == "generate":
        return reads.rewrites.flagged
    flags = reads.flags.get(stage, {})
    if stage in ("repropose", "regenerate") and flags:  # the item waits only while it stays rejected
        rejected = reads.rejected_items if stage == "repropose" else reads.rejected_pairs
        flags = {i: f for i, f in flags.items() if i in rejected}
    return Retries(flags)


def stage_steps(ws: Workspace, stage: str, langs: Collection[str], options: tuple[str, ...] = ()) -> list[Step]:
    """The way out of one LLM stage's flags, in these languages: what a run of the stage ends with."""
    return [step for lang in langs for step in flag_steps(ws, stage, lang, stage_flags(ws, stage, lang), options)]


def next_steps(ws: Workspace, langs: Collection[str] | None = None) -> list[Step]:
    """Every step, language by language (those with work under way), then the review pull and publishing."""
    codes = [c for c in languages_mod.registry(ws) if langs is None or c in langs]
    projects = {(p["stage"], p["lang"]): p for p in reviews.review_status(ws)}
    writable = _writable(ws)
    begun = {lang for _, lang in projects} | {lang for table in (t.proposals, t.sentence_pairs, t.flags, t.lexicon_forms)
                                                for lang in ws.column(select(table.c.lang).distinct())}
    steps: list[Step] = []
    ready = []
    for lang in codes:
        n = writable.get(lang, 0)
        own = _language_steps(ws, lang, projects, n) if lang in begun else _writing(ws, lang, (), n)
        steps += own
        if not own and _generated(ws, lang):
            ready.append(lang)
    if any(step.stage in stage_names() and (step.stage, step.lang) in projects for step in steps):
        steps.append(Step(lang="", stage="review", what="curators' decisions in Label Studio come into the workspace",
                          command=command(ws, "review", "pull")))
    if ready:
        steps.append(Step(lang="", stage="publish", what=f"nothing pending in {', '.join(ready)}: publish a release "
                          "(with --dry-run first to see it)", command=command(ws, "publish", "--bump", "minor")))
    return steps


def _language_steps(ws: Workspace, lang: str, projects: dict, writable: int) -> list[Step]:
    steps: list[Step] = []
    reads = _Reads(ws, lang)
    flags = {stage: stage_flags(ws, stage, lang, reads) for stage in LLM_STAGES}
    for stage, flagged in flags.items():
        steps += flag_steps(ws, stage, lang, flagged)
    untranslated = _untranslated(ws, reads, flags["translate"])
    if untranslated:
        steps.append(Step(lang=lang, stage="translate", what=f"{untranslated} item(s) not translated yet",
                          command=command(ws, "translate", "--lang", lang)))
    rejected = [i for i in reads.rejected_items if i not in flags["repropose"].flags]
    if rejected:
        steps.append(Step(lang=lang, stage="repropose", what=f"{len(rejected)} item(s) curators rejected or marked ambiguous",
                          command=command(ws, "review", "repropose", "--lang", lang)))
    rejected = [p for p in reads.rejected_pairs if p not in flags["regenerate"].flags]
    if rejected:
        steps.append(Step(lang=lang, stage="regenerate", what=f"{len(rejected)} pair(s) curators rejected",
                          command=command(ws, "review", "repropose", "--stage", "sentences", "--lang", lang)))
    return steps + _writing(ws, lang, reads.rewrites.stale, writable) + _review_steps(ws, reads, projects)


def _writing(ws: Workspace, lang: str, stale: Collection[str], writable: int) -> list[Step]:
    """Sentences `generate` writes: again for `stale` pairs, and for the `writable` ones, whose words are verified."""
    what = "; ".join(part for part in (f"{len(stale)} pair(s) written before a word of theirs was verified again" if stale
                                       else "", f"{writable} pair(s) whose words are verified" if writable else "") if part)
    return [Step(lang=lang, stage="generate", what=f"{what}: sentences to write",
                 command=command(ws, "generate", "--lang", lang))] if what else []


def review_steps(ws: Workspace, stage: str, langs: Collection[str]) -> list[Step]:
    """What waits for curators and adjudicators in one review stage, in these languages: what the LLM stage that
    proposes its items ends with."""
    projects = {(p["stage"], p["lang"]): p for p in reviews.review_status(ws)}
    return [s for lang in langs for s in _review_steps(ws, _Reads(ws, lang), projects, (review_stage(stage),))]


def _review_steps(ws: Workspace, reads: _Reads, projects: dict, records: Collection[ReviewStage] | None = None) -> list[Step]:
    """Items waiting for curators, stage by stage (those its record says wait, or else its project's pending
    ones), and disagreements waiting for an adjudicator. A disputed item waits for the adjudicator alone: the
    curators' push has nothing to send for it."""
    steps = []
    lang = reads.lang
    for record in records or stages():
        stage, adjudication = record.names()
        row = projects.get((stage, lang))
        disputed = set(reviews.disagreements(ws, lang, stage)) if row and row.get("disagreements") else set()
        pending = (len(set(record.waiting(ws, lang)) - disputed) if record.waiting
                   else row.get("pending", 0) if row else 0)  # the row's pending leaves the disputed out
        if pending:
            steps.append(Step(lang=lang, stage=stage, what=f"{pending} {stage} item(s) wait for curators (new and changed "
                              "ones go to Label Studio)", command=command(ws, "review", "push", "--stage", stage, "--lang", lang)))
        if row and row.get("disagreements"):
            steps.append(Step(lang=lang, stage=adjudication, what=f"{row['disagreements']} {stage} item(s) whose curators "
                              "disagree wait for an adjudicator",
                              command=command(ws, "review", "push", "--stage", adjudication, "--lang", lang)))
    return steps


def _untranslated(ws: Workspace, reads: _Reads, flagged: Retries) -> int:
    """In a language whose translation has begun (it has proposals): items neither verified, proposed nor flagged."""
    if not reads.proposed or reads.lang in (languages_mod.SOURCE_LANGUAGE, *languages_mod.SEED_LANGUAGES):
        return 0
    items = set(ws.column(select(t.concepts.c.id))) | set(ws.column(select(t.properties.c.id)))
    return len(items - reads.proposed - reads.verified - set(flagged.flags))


def _writable(ws: Workspace) -> dict[str, int]:
    """lang -> pairs whose three words are verified there and that have no sentences there yet: counted by the database."""
    p, sp = t.pairs, t.sentence_pairs
    wp, wa, wu = (t.verified_words.alias(name) for name in ("wp", "wa", "wu"))
    stmt = (select(wp.c.lang, func.count()).select_from(p)
            .join(wp, wp.c.item_id == p.c.property_id)
            .join(wa, and_(wa.c.item_id == p.c.acceptable_id, wa.c.lang == wp.c.lang))
            .join(wu, and_(wu.c.item_id == p.c.unacceptable_id, wu.c.lang == wp.c.lang))
            .outerjoin(sp, and_(sp.c.pair_id == p.c.id, sp.c.lang == wp.c.lang))
            .where(sp.c.pair_id.is_(None)).group_by(wp.c.lang))
    with ws.engine.connect() as conn:
        return dict(conn.execute(stmt).all())


def _generated(ws: Workspace, lang: str) -> bool:
    sp = t.sentence_pairs
    return bool(ws.rows(select(sp.c.pair_id).where(sp.c.lang == lang, sp.c.status == "generated").limit(1)))
