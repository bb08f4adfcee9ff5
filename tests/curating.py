"""What a person does with what the tool prints and shows: follows the printed next steps, and annotates
tasks in Label Studio as its editor sends them. Shared by the tests that drive the loop that way."""

from __future__ import annotations

import shlex

from annotation.review import client
from builder.reviews import review_project


def steps(output: str) -> list[tuple[str, str]]:
    """The printed next steps: (what, command)."""
    lines = output.split("what to do next:\n", 1)[1].splitlines() if "what to do next:" in output else []
    return [(what.strip(), cmd.strip()) for what, cmd in zip(lines[::2], lines[1::2], strict=False) if cmd.startswith("    builder ")]


def step(output: str, what: str) -> str:
    """The command of the one printed step whose description has `what`."""
    found = [cmd for w, cmd in steps(output) if what in w]
    assert len(found) == 1, (what, steps(output))
    return found[0]


def follow(cli, output: str, what: str, **files) -> str:
    """Run the command of a printed step as printed (with FILE placeholders replaced by `files`)."""
    args = shlex.split(step(output, what))
    assert args[0] == "builder"
    return cli(*(str(files.get(a, a)) for a in args[1:]))


def current_tasks(conn, ws, stage, lang) -> dict:
    """item id -> the task that asks for it now (a task superseded by a newer revision left out)."""
    pid = review_project(ws, stage, lang, conn.server).project_id
    return {tk.data["item_id"]: tk for tk in client(conn).tasks.list(project=pid, fields="all", page_size=1000)
            if "superseded_by" not in tk.data}


def say(conn, task, user, to, decision, *, results=(), comment="", **texts):
    """A curator's annotation as Label Studio's editor sends it: the decision, `results` (e.g. a version an
    adjudicator takes), the texts typed into the named boxes, and a comment."""
    result = [{"from_name": "decision", "to_name": to, "type": "choices", "value": {"choices": [decision]}}, *results]
    result += [{"from_name": name, "to_name": to, "type": "textarea", "value": {"text": [text]}} for name, text in texts.items()]
    if comment:
        result.append({"from_name": "comment", "to_name": to, "type": "textarea", "value": {"text": [comment]}})
    return client(conn).annotations.create(id=task.id, result=result, completed_by=user)


def versions(task) -> dict[str, list[str]]:
    """An adjudication task's prefilled versions: whose they are (the prediction's name) -> their texts."""
    return {p.model_version: [r["value"]["text"][0] for r in p.result] for p in task.predictions}
