"""Translation review: curators accept, correct, reject or mark ambiguous each item's latest proposal; an accepted
or corrected one becomes a verified word (`builder.reviews.decide_translations`)."""

from __future__ import annotations

from sqlalchemy import distinct, func, select

from builder import reviews
from builder.flags import list_flags
from builder.languages import SEED_LANGUAGES, registry
from builder.review_stages import VERSIONS_NOTE, Box, Instructions, ReviewStage, Screen, Task, call_models, register
from builder.reviews import TranslationEdit
from builder.selection import seeds, verified
from builder.workspace import schema as t
from builder.workspace.store import Workspace


def translation_tasks(ws: Workspace, lang: str) -> list[Task]:
    """One task per item whose latest proposal is not verified yet, with the script audit's flag on it (a Latin
    "bus" among Devanagari) for the curator to see."""
    latest = reviews.latest_proposals(ws, lang)
    script = {f.item_id: f.reason for f in list_flags(ws, stage="script", langs=[lang])}
    done = verified(ws, lang)
    name = registry(ws)[lang].name
    english = {r["id"]: (r["english"], r.get("category")) for r in ws.rows(select(t.concepts))}
    english |= {r["id"]: (r["english"], None) for r in ws.rows(select(t.properties))}
    seed = seeds(ws, SEED_LANGUAGES)
    models = call_models(ws, lang)
    tasks = []
    for item_id, p in sorted(latest.items()):
        if item_id in done:
            continue
        en, cat = english[item_id]
        data = {
            "task": f"{en} ({p['kind']} {item_id}) · {name} · revision {p['revision']}",
            "item_key": f"translation:{lang}:{item_id}", "item_id": item_id, "kind": p["kind"], "english": en,
            "seed_de": seed.get((item_id, "de"), "—"), "seed_zh": seed.get((item_id, "zh"), "—"),
            "category": cat or "—", "alternatives": "; ".join(p["alternatives"]) or "—", "note": p["note"] or "—",
            "flag": script.get(item_id, "—"), "proposal_id": p["id"], "revision": p["revision"], "draft": p["text"],
        }
        tasks.append(Task(data=data, model=models.get(p["llm_call_id"], "llm"), drafts={"translation": p["text"]}))
    return tasks


def edit(data: dict, fields: dict) -> TranslationEdit:
    """A translation annotation's part: the proposal its task showed, the translation as the curator left it."""
    return TranslationEdit(proposal_id=data["proposal_id"], text=fields.get("translation") or None)


def pending(ws: Workspace, lang: str, settled: int) -> int:
    """Items with a proposal in `lang` and no settled decision."""
    return ws.scalar(select(func.count(distinct(t.proposals.c.item_id))).where(t.proposals.c.lang == lang)) - settled


def waiting(ws: Workspace, lang: str) -> set[str]:
    """Items proposed in `lang` that are neither verified nor rejected (or marked ambiguous): a push asks them."""
    proposed = set(ws.column(select(t.proposals.c.item_id).where(t.proposals.c.lang == lang).distinct()))
    return proposed - set(verified(ws, lang)) - set(reviews.rejected_items(ws, lang))


register(ReviewStage(
    name="translation", adjudication="adjudication", made_on="proposal", tasks=translation_tasks, edit=edit,
    pending=pending, waiting=waiting, released_in="pairs", decide=reviews.decide_translations, every_pull=True, textual=("accept", "corrected"),
    versions=lambda opinion: {"translation": opinion.final_text},
    decisions={
        "accept": "the draft is right as it stands; do not edit it",
        "corrected": "you fixed the draft: the Translation box holds the final form",
        "reject": "the draft is wrong; the LLM tries again with your comment",
        "ambiguous": "the seeds do not settle the sense, or the language has no single good word; say why in the comment",
    },
    screen=Screen(
        what="Translation into", detail=": $kind", to="english",
        facts=(("English", "english"), ("German seed", "seed_de"), ("Chinese seed", "seed_zh"), ("Category", "category"),
               ("LLM alternatives", "alternatives"), ("LLM note", "note"), ("Script check", "flag")),
        note="Translation (the LLM's proposal; edit it if you correct it)", versions_note=f"Translation ({VERSIONS_NOTE})",
        body=(Box("translation", "english"),)),
    instructions=Instructions(
        heading="Translation into {lang}", adjudicated="translations into {lang}",
        intro="Each task is one English concept (a noun such as <i>bat</i>) or property (a predicate such as <i>is used "
              "for hitting a ball</i>). The LLM's proposal is already in the <b>Translation</b> box as an editable draft.",
        check="the sense is the one the German and Chinese seeds fix (<i>bat</i> with <i>Schläger</i> / <i>球拍</i> is the "
              "sports equipment, not the animal); a concept is in its citation form (singular, no article unless {lang} "
              "always writes one); a property is a predicate phrase, without words that agree with the concept where "
              "{lang} allows.",
        comment="Comment (sent back to the LLM when you reject or mark ambiguous)"),
))
