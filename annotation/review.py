"""Push review tasks to Label Studio and pull curators' annotations back as typed records, for every stage alike:
what a stage asks, shows and reads is its record (`builder.review_stages`).

Projects are remembered under the server's identity (`annotation.server`), found again by our key (`[stage:lang]`
at the head of the title and the workspace's mark at its end, `title`), so that workspaces sharing a server each
keep their own, and tasks by our item key in `task.data`, listed from the server
before every push: a push repeated after a crash or a server restart skips what is there, updates
a changed task in place while no annotation is on it (or the item's revision is the same), gives an
item asked again after annotations a new task and closes the old one, and imports only what is
missing. Each push also brings a project's labeling config and curator instructions up to date in
place. Pulling parses every exported annotation into a `builder.reviews.Annotation` and hands them to
`builder.reviews.record_pull` with the projects exported (an annotation missing from its project's
export was deleted in Label Studio), which records them with their lineage and turns the decisions
into verified words and forms; this package writes no workspace table itself. A push to a project
holds the workspace's lock for it (`Workspace.exclusive`), so two at once (a cron and a person, two
workers of one PostgreSQL workspace) run one after the other and the second imports nothing twice.
Duplicate tasks of an item (from pushes at once before that lock) are reduced to the oldest: a push
removes the copies no curator has annotated, and a pull counts the annotations on copies as the oldest's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from label_studio_sdk import LabelStudio
from label_studio_sdk.core.api_error import ApiError

from annotation.configs import config
from annotation.instructions import instructions
from annotation.server import Connection
from annotation.tasks import one_task_per_item, parse_annotation, revision, task_hash, textarea
from builder import reviews
from builder.inputs import without_refused
from builder.languages import registry
from builder.records import Language
from builder.review_stages import EDIT_FIELD, ReviewStage, Task, Version, review_stage
from builder.reviews import Annotation, Opinion, PullSummary, ReviewProject
from builder.workspace.store import Workspace

CHUNK = 500


@dataclass
class PushSummary:
    created: int = 0  # new tasks, `revised` of them for a new revision of an item already annotated
    updated: int = 0
    unchanged: int = 0
    revised: int = 0
    duplicates_removed: int = 0  # copies of a task no curator annotated (`existing_tasks`)


def client(conn: Connection) -> LabelStudio:
    return conn.client()


TITLE_LENGTH = 50  # what Label Studio keeps of a title
_MARK = re.compile(r" \(ws ([0-9a-f]{8})\)$")


def _mark(workspace: str) -> str:
    """How a title names the workspace whose project it is: the first 8 digits of its identity (`Workspace.identity`)."""
    return f" (ws {workspace[:8]})"


def title(stage: str, lang: Language, workspace: str) -> str:
    """The project's key, `[stage:code]` and the workspace's mark (`… (ws 1a2b3c4d)`), with the language's name
    between, as curators read it in the project list. Label Studio keeps 50 characters, and strips the space a cut
    may leave (which would make the title differ every push): the name is cut, never the key."""
    mark = _mark(workspace)
    return f"[{stage}:{lang.code}] {lang.name} review"[: TITLE_LENGTH - len(mark)].rstrip() + mark


def _theirs(project_title: str | None, workspace: str) -> bool:
    """Whether a project's title marks it as another workspace's (a title without a mark, an earlier version's,
    marks it as no one's)."""
    found = _MARK.search(project_title or "")
    return found is not None and found.group(1) != workspace[:8]


def _unless_missing(get, **kw):
    """`get(**kw)`, or None when the server answers 404."""
    try:
        return get(**kw)
    except ApiError as exc:
        if exc.status_code != 404:
            raise
        return None


def ensure_project(ws: Workspace, ls: LabelStudio, conn: Connection, stage: str, lang: str) -> int:
    """This workspace's project for (stage, lang): remembered, else found by our key on the server, else created.

    Our key is `[stage:lang]` with this workspace's mark (`title`): another workspace pushing the same stage and
    language to the server has a project of its own, and neither finds the other's. A project remembered here is
    kept even without the mark (an earlier version made it), unless another workspace's mark is on it now: two
    workspaces of an earlier version that took one project both remember it, and the first to push since claims it.
    Its title, labeling config and instructions are brought up to date in place when they differ: a project
    made by an earlier version gets the current ones (a declared language's name and the mark in the title),
    and its annotations stay.
    """
    lang_rec = registry(ws)[lang]
    wanted = {"title": title(stage, lang_rec, ws.identity), "label_config": config(stage, lang_rec),
              "expert_instruction": instructions(stage, lang_rec), "show_instruction": True}
    known = reviews.review_project(ws, stage, lang, conn.server)
    project = _unless_missing(ls.projects.get, id=known.project_id) if known else None
    if project is not None and _theirs(project.title, ws.identity):
        project = None
    if project is None:
        key, mark = f"[{stage}:{lang}]", _mark(ws.identity)
        project = min((p for p in ls.projects.list() if (p.title or "").startswith(key) and (p.title or "").endswith(mark)),
                      key=lambda p: p.id, default=None)
    if project is None:
        pid = ls.projects.create(description=f"builder review project [{stage}:{lang}] of workspace {ws.identity}",
                                 **wanted).id
    else:
        pid = project.id
        changed = {k: v for k, v in wanted.items() if getattr(project, k, None) != v}
        if changed:
            ls.projects.update(id=pid, **changed)
    reviews.remember_project(ws, ReviewProject(stage=stage, lang=lang, project_id=pid, title=wanted["title"],
                                               server=conn.server))
    return pid


# -- tasks -------------------------------------------------------------------------------------------------


def _opinion(stage: ReviewStage, a: Opinion) -> str:
    """What one curator said, for the adjudicator: the decision, the text it keeps, the comment."""
    text = f" '{a.final_text.replace(chr(10), ' / ')}'" if stage.leaves_text(a.decision) else ""
    return f"{a.reviewer}: {a.decision}{text}" + (f" ({a.comment})" if a.comment else "")


def _versions(stage: ReviewStage, anns: list[Opinion]) -> tuple[Version, ...]:
    """Each curator's version of a disputed item, named after whoever left it ("name (decision)", curators who left
    the same text together): the adjudicator's boxes start with the first, and each is there to take. Decisions
    that keep no text (a rejection, a judge's verdict) offer none."""
    by_text: dict[str | None, list[Opinion]] = {}
    for a in sorted(anns, key=lambda a: a.reviewer):
        if stage.versions is not None and stage.leaves_text(a.decision):
            by_text.setdefault(a.final_text, []).append(a)
    return tuple(Version(model_version=", ".join(f"{a.reviewer} ({a.decision})" for a in same),
                         drafts=stage.versions(same[0])) for same in by_text.values())


def adjudication_tasks(ws: Workspace, lang: str, stage: ReviewStage) -> list[Task]:
    """A task per disagreement on `stage`'s items: the stage's own task plus what each curator said, its boxes
    pre-filled with each curator's version (or, where none keeps a text, with the stage's draft)."""
    base = {task.item_id: task for task in stage.tasks(ws, lang)}
    tasks = []
    for item, anns in sorted(reviews.disagreements(ws, lang, stage.name).items()):
        if item not in base:
            continue
        data = {**base[item].data, "item_key": f"{stage.adjudication}:{lang}:{item}",
                "opinions": "\n".join(_opinion(stage, a) for a in anns)}
        tasks.append(base[item].model_copy(update={"data": data, "versions": _versions(stage, anns)}))
    return tasks


def predictions(stage: str, task: Task) -> list[dict]:
    """What pre-fills a task's boxes: its versions (an adjudication's), else the stage's drafts under its model's name."""
    screen = review_stage(stage).screen
    return [{"model_version": version.model_version,
             "result": [textarea(box, screen.box(box).to, text) for box, text in version.drafts.items()]}
            for version in task.versions or (Version(model_version=task.model, drafts=task.drafts),)]


def task_data(task: Task) -> dict:
    """A task's data as pushed: what it shows, and its fingerprint (`hash`), which tells a changed task."""
    return {**task.data, "hash": task_hash(task.data)}


class Existing(NamedTuple):
    """A task on the server that asks for an item now."""

    id: int
    data: dict
    annotated: bool  # it holds annotations (skips included)


def existing_tasks(ls: LabelStudio, project_id: int) -> tuple[dict[str, Existing], list[int]]:
    """item key -> the task that asks for it now (a task superseded by a newer revision left out; of copies of one task,
    the oldest), and the ids of the other copies that no curator annotated or skipped (what two pushes at once left
    before pushes were locked), to remove."""
    copies: dict[str, list[Existing]] = {}
    for task in ls.tasks.list(project=project_id, include="id,data,total_annotations,cancelled_annotations",
                              page_size=1000):  # 5x faster than all fields
        data = task.data or {}
        if "item_key" in data and "superseded_by" not in data:
            copies.setdefault(data["item_key"], []).append(
                Existing(task.id, data, bool(task.total_annotations or task.cancelled_annotations)))
    have, spare = {}, []
    for key, tasks in copies.items():
        first, *others = sorted(tasks, key=lambda task: task.id)
        have[key] = first
        spare += [task.id for task in others if not task.annotated]
    return have, spare


def stage_tasks(ws: Workspace, lang: str, stage: str) -> list[Task]:
    """The tasks a stage (or its adjudication) wants reviewed now, each keyed by its `item_key`."""
    record = review_stage(stage)
    return record.tasks(ws, lang) if stage == record.name else adjudication_tasks(ws, lang, record)


def _supersede(ls: LabelStudio, old: Existing, new_id: int) -> None:
    """Close a task whose item is asked again in task `new_id`: its annotations stay with it, as they were made
    on what it showed; its row says it is superseded, and the labeling stream no longer offers it."""
    label = f"{old.data.get('task', old.data['item_key'])} (superseded by task {new_id})"
    ls.tasks.update(id=str(old.id), data={**old.data, "task": label, "superseded_by": new_id}, is_labeled=True)


def push(ws: Workspace, conn: Connection, lang: str, *, stage: str = "translation", limit: int | None = None,
         chunk: int = CHUNK, overlap: int = 1, overlap_share: float = 0.0) -> PushSummary:
    """Push review tasks; `overlap_share` of them go to `overlap` curators each (Label Studio's overlap).

    A task whose item changed is updated in place, its drafts replaced, while nothing is annotated on it, or on
    the same revision (a new draft of a task nobody answered, an adjudication task with one more opinion). An item asked again
    after annotations (a word proposed again, a pair written again) is a new revision: it gets a new task,
    and the old one is closed with its annotations (`_supersede`), so that nobody sees them as current."""
    tasks = stage_tasks(ws, lang, stage)[: limit or None]
    ls = client(conn)
    with ws.exclusive(f"review push to {conn.server} [{stage}:{lang}]"):
        return _push(ws, ls, conn, lang, stage, tasks, chunk, overlap, overlap_share)


def _push(ws: Workspace, ls: LabelStudio, conn: Connection, lang: str, stage: str, tasks: list[Task], chunk: int,
          overlap: int, overlap_share: float) -> PushSummary:
    pid = ensure_project(ws, ls, conn, stage, lang)
    if overlap > 1:
        ls.projects.update(id=pid, maximum_annotations=overlap, overlap_cohort_percentage=round(overlap_share * 100))
    have, spare = existing_tasks(ls, pid)
    summary = PushSummary(duplicates_removed=len(spare))
    for task_id in spare:
        ls.tasks.delete(id=str(task_id))
    new, superseded = [], []
    for task in tasks:
        data = task_data(task)
        old = have.get(task.item_key)
        if old is None:
            new.append(task)
        elif old.data.get("hash") == data["hash"]:
            summary.unchanged += 1
        elif old.annotated and revision(old.data) != revision(data):
            new.append(task)
            superseded.append(old)
        else:  # its drafts are replaced: Label Studio pre-fills a new annotation with the first
            ls.tasks.update(id=str(old.id), data=data)
            for p in ls.predictions.list(task=old.id):
                ls.predictions.delete(id=p.id)
            for p in predictions(stage, task):
                ls.predictions.create(task=old.id, result=p["result"], model_version=p["model_version"])
            summary.updated += 1
    ids: dict[str, int] = {}
    for i in range(0, len(new), chunk):
        batch = new[i : i + chunk]
        made = ls.projects.import_tasks(id=pid, request=[{"data": task_data(x), "predictions": predictions(stage, x)}
                                                         for x in batch], return_task_ids=True)
        ids |= {x.item_key: task_id for x, task_id in zip(batch, made.task_ids, strict=True)}
        summary.created += len(batch)
    for old in superseded:
        _supersede(ls, old, ids[old.data["item_key"]])
    summary.revised = len(superseded)
    return summary


# -- pulling -----------------------------------------------------------------------------------------


def annotation_record(project: ReviewProject, task: dict, ann: dict, users: dict[int, str],
                      removed: list[str] | None = None) -> Annotation:
    """One exported annotation of `task` as the typed record the review owner takes. What a curator typed is taken
    less the control characters no text may hold (a paste can bring them); each removal is told in `removed`."""
    reviewer = users.get(ann.get("completed_by"), str(ann.get("completed_by")))
    fields = {}
    for name, value in parse_annotation(ann).items():
        fields[name], chars = without_refused(value)
        if chars and removed is not None:
            removed.append(f"{project.stage} {project.lang}, task {task['id']} ({reviewer}): {name} held "
                           f"{', '.join(chars)}, removed")
    cancelled = bool(ann.get("was_cancelled"))
    stage = review_stage(project.stage)
    return Annotation(
        stage=project.stage, lang=project.lang, item_id=task["data"]["item_id"], annotation_id=ann["id"], server=project.server,
        task_id=task["id"], decision=None if cancelled else fields.get("decision"), comment=fields.get("comment", ""),
        reviewer=reviewer, cancelled=cancelled,
        lead_time_s=ann.get("lead_time"), created_at=ann["created_at"], updated_at=ann.get("updated_at") or ann["created_at"],
        **{EDIT_FIELD[stage.made_on]: stage.edit(task["data"], fields)},
    )


def _asked_by(project: ReviewProject, data: dict) -> bool:
    """Whether a task's data is what the project's stage asks in its language (`item_key` is `stage:lang:item`): a task
    made by hand in Label Studio, or moved from another project, is not."""
    return data.get("item_key") == f"{project.stage}:{project.lang}:{data.get('item_id')}"


def pull(ws: Workspace, conn: Connection) -> PullSummary:
    """Export every project remembered on this server and hand its annotations to the review owner, with the
    projects exported whole: an annotation recorded before and missing now was deleted in Label Studio.

    A task this workspace did not push is counted in the summary's `ignored` and nothing of it is recorded: one
    its project's stage does not ask here, or (the review owner finds) one made on what this workspace does not have."""
    ls = client(conn)
    users = {u.id: (u.email or u.username or str(u.id)) for u in ls.users.list()}
    projects = reviews.review_projects(ws, conn.server)
    removed: list[str] = []
    records, unasked = [], {}
    for project in projects:
        for task, ann in one_task_per_item(ls.projects.exports.as_json(project.project_id)):
            if _asked_by(project, task.get("data") or {}):
                records.append(annotation_record(project, task, ann, users, removed))
            else:
                unasked.setdefault((project.stage, project.lang), set()).add(task["id"])
    summary = reviews.record_pull(ws, conn.server, records, exported=[(p.stage, p.lang) for p in projects])
    for key, tasks in unasked.items():
        summary.ignored[key] = summary.ignored.get(key, 0) + len(tasks)
    summary.removed = removed
    return summary
