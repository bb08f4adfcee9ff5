"""Take the translation-review screenshot for docs/curators.md (a documentation tool, not a test).

Starts Label Studio for a scratch workspace, pushes a few demo proposals (Russian, from the bundled
recording), logs in with headless Chromium and saves the labeling screen of one task.

    .venv/bin/pip install playwright && apt-get install chromium
    .venv/bin/python docs/screenshot_review.py docs/img/translation-review.png
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from rich.console import Console

from annotation import server as ls_server
from annotation.review import client, push
from builder.cli.demo import run_demo
from builder.workspace.store import open_workspace


def main(out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        ws_dir = Path(tmp) / "ws"
        run_demo(ws_dir, Console(stderr=True, quiet=True))
        ws = open_workspace(ws_dir)
        with ws.transaction() as conn:  # undo the demo's automatic acceptance, so there is something to review
            from builder.workspace import schema as t

            conn.execute(t.verified_words.delete().where(t.verified_words.c.lang == "ru", t.verified_words.c.origin == "review"))
        conn = ls_server.serve(ws_dir, log=lambda *a: None)
        try:
            push(ws, conn, "ru")
            ls = client(conn)
            pid = next(iter(ls.projects.list())).id
            task = next(tk for tk in ls.tasks.list(project=pid, include="id,data") if tk.data["english"] == "bat")
            password = (ls_server.state_dir(ws_dir) / "password").read_text().strip()
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=[
                    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(f"{conn.url}/user/login/")
                page.fill("input[name=email]", ls_server.ADMIN_USER)
                page.fill("input[name=password]", password)
                page.click("button[type=submit]")
                page.wait_for_load_state("networkidle")
                page.goto(f"{conn.url}/projects/{pid}/data?task={task.id}")
                page.wait_for_selector("text=Decision", timeout=30_000)
                page.wait_for_timeout(1500)
                out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(out), full_page=True)
                browser.close()
        finally:
            ls_server.stop(ws_dir)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img/translation-review.png"))
