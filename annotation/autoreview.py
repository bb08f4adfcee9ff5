"""A scripted curator for the demo: accepts every open task's draft through the Label Studio API.

It goes through the same server, projects, annotations and pull as a human curator, under its own
named account, so the workspace records exactly who decided (never a real curator's name).
"""

from __future__ import annotations

import secrets
from concurrent.futures import ThreadPoolExecutor

from annotation.review import client
from annotation.server import Connection
from builder.review_stages import review_stage
from builder.reviews import review_project
from builder.workspace.store import Workspace


def reviewer_account(conn: Connection, name: str) -> int:
    """The Label Studio user id for `name`, created (with a random password) if missing."""
    ls = client(conn)
    email = f"{name}@builder.local"
    for user in ls.users.list():
        if user.email == email:
            return user.id
    return ls.users.create(username=name, email=email, password=secrets.token_urlsafe(16)).id


def accept_open_tasks(ws: Workspace, conn: Connection, stage: str, lang: str, reviewer: str, workers: int = 4) -> int:
    """Annotate every task of (stage, lang) that has no annotation yet: decision accept, text = the draft."""
    project = review_project(ws, stage, lang, conn.server)
    if project is None:
        return 0
    ls = client(conn)
    user_id = reviewer_account(conn, reviewer)
    todo = [task for task in ls.tasks.list(project=project.project_id, fields="all", page_size=1000)
            if not task.total_annotations and not task.cancelled_annotations]
    decision = {"from_name": "decision", "to_name": review_stage(stage).screen.to, "type": "choices",
                "value": {"choices": ["accept"]}}

    def annotate(task) -> None:
        draft = task.predictions[-1].result if task.predictions else []
        ls.annotations.create(id=task.id, result=[decision, *draft], completed_by=user_id, lead_time=0.0)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(annotate, todo))
    return len(todo)
