"""Take the screenshots of the four review screens for docs/curators.md (a documentation tool, not a test).

Runs the demo in a scratch workspace (its scripted curator accepts every task), then prepares one open
task per screen: the scripted curator's annotation is removed from a translation (Russian *baseball bat*),
a sentence pair (Russian) and an inflection table (German); a second curator corrects Russian *kettle*,
which the scripted curator had verified: the word is withdrawn, and an adjudication task offers both
versions. Headless Chromium logs in and saves each labeling screen, `docs/img/<stage>-review.png`, and
each project's instructions as Label Studio shows them, `docs/img/<stage>-instructions.png`.

    python -m venv /tmp/pw && /tmp/pw/bin/pip install playwright     # the driver only: never a browser
    apt-get install chromium fonts-noto-cjk                           # the browser (/usr/bin/chromium), CJK glyphs
    PYTHONPATH=.:/tmp/pw/lib/python3.11/site-packages .venv/bin/python docs/screenshot_review.py docs/img
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from rich.console import Console

from annotation import server as ls_server
from annotation.review import client, pull, push
from builder.demo import run_demo
from builder.reviews import review_project
from builder.workspace.store import open_workspace

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"]
SCREENS = {"translation": ("ru", {"english": "baseball bat"}), "adjudication": ("ru", {"english": "kettle"}),
           "sentences": ("ru", {}), "inflections": ("de", {})}
HEIGHT = {"translation": 1000, "adjudication": 1060, "sentences": 1080, "inflections": 1040}


def open_task(ls, project_id: int, match: dict) -> int:
    """The first task of the project whose data has `match`, with its annotations removed (the draft stays)."""
    task = next(tk for tk in ls.tasks.list(project=project_id, fields="all", page_size=1000)
                if all(tk.data.get(k) == v for k, v in match.items()))
    for ann in ls.annotations.list(id=task.id):
        ls.annotations.delete(id=ann.id)
    return task.id


def disagree(ws, conn, item_english: str) -> None:
    """A second curator corrects what the scripted curator accepted (and the pull verified), so the item waits for adjudication."""
    ls = client(conn)
    project = review_project(ws, "translation", "ru", conn.server)
    task = next(tk for tk in ls.tasks.list(project=project.project_id, include="id,data", page_size=1000)
                if tk.data["english"] == item_english)
    user = ls.users.create(username="curator-b", email="curator-b@builder.local", password="screenshot-only-1")
    ls.annotations.create(id=task.id, completed_by=user.id, result=[
        {"from_name": "decision", "to_name": "english", "type": "choices", "value": {"choices": ["corrected"]}},
        {"from_name": "translation", "to_name": "english", "type": "textarea", "value": {"text": ["электрочайник"]}}])
    pull(ws, conn)
    assert push(ws, conn, "ru", stage="adjudication").created == 1


def main(out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        ws_dir = Path(tmp) / "ws"
        try:
            run_demo(ws_dir, Console(stderr=True, quiet=True), auto_review=True, evaluate=False)
            ws = open_workspace(ws_dir)
            conn = ls_server.serve(ws_dir, log=lambda *a: None)
            disagree(ws, conn, "kettle")
            ls = client(conn)
            tasks = {}
            for stage, (lang, match) in SCREENS.items():
                pid = review_project(ws, stage, lang, conn.server).project_id
                tasks[stage] = pid, open_task(ls, pid, match)
            password = (ls_server.state_dir(ws_dir) / "password").read_text().strip()
            out.mkdir(parents=True, exist_ok=True)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
                page = browser.new_page(viewport={"width": 1280, "height": 1000})
                page.goto(f"{conn.url}/user/login/")
                page.fill("input[name=email]", ls_server.ADMIN_USER)
                page.fill("input[name=password]", password)
                page.click("button[type=submit]")
                page.wait_for_load_state("networkidle")
                for stage, (pid, task_id) in tasks.items():
                    page.set_viewport_size({"width": 1280, "height": HEIGHT[stage]})
                    page.goto(f"{conn.url}/projects/{pid}/data?task={task_id}")
                    page.wait_for_selector("text=Decision", timeout=30_000)
                    page.wait_for_timeout(1500)
                    page.screenshot(path=str(out / f"{stage}-review.png"))
                    page.get_by_role("button", name="Instructions").click()
                    modal = page.locator("[class*=modal-ls__content]").filter(has_text="Check").first
                    modal.wait_for(timeout=10_000)
                    page.wait_for_timeout(500)
                    modal.screenshot(path=str(out / f"{stage}-instructions.png"))
                browser.close()
            ws.close()
        finally:
            ls_server.stop(ws_dir)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img"))
