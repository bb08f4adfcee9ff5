"""A page as headless Chromium renders it: its DOM after load, and the tables in it, cell by cell.

Chromium is the system's (/usr/bin/chromium); a test that needs it is skipped where it is missing,
unless BUILDER_TEST_CHROMIUM=required (CI installs it and sets that).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run", "--disable-sync"]


def rendered(page: Path) -> str:
    """The page's DOM as Chromium serialises it once loaded (scripts run, markup parsed as a browser parses it)."""
    if CHROMIUM is None:
        if os.environ.get("BUILDER_TEST_CHROMIUM") == "required":  # CI installs it: a missing one fails there
            raise RuntimeError("no chromium on this machine (Debian: apt-get install -y chromium)")
        pytest.skip("no chromium on this machine")
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", Path(page).resolve().as_uri()],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "<html" in done.stdout, done.stderr[-2000:]
    return done.stdout


class Elements(HTMLParser):
    """Tables (rows of cells: text and attributes), links and every element's tag and attributes, from a DOM."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self.links: list[tuple[str, str]] = []
        self.tags: list[tuple[str, dict]] = []
        self._stack: list[dict] = []
        self._cell: dict | None = None
        self._link: list | None = None
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "table":
            self._stack.append({"attrs": attrs, "rows": []})
        elif tag == "tr" and self._stack:
            self._stack[-1]["rows"].append([])
        elif tag in ("td", "th") and self._stack:
            self._cell = {"text": "", "attrs": attrs, "small": ""}
            self._stack[-1]["rows"][-1].append(self._cell)
        elif tag == "a":
            self._link = [attrs.get("href", ""), ""]
        elif tag == "small" and self._cell is not None:
            self._cell["in_small"] = True

    def handle_endtag(self, tag):
        if tag == "table" and self._stack:
            self.tables.append(self._stack.pop())
        elif tag in ("td", "th"):
            self._cell = None
        elif tag == "a" and self._link is not None:
            self.links.append(tuple(self._link))
            self._link = None
        elif tag == "small" and self._cell is not None:
            self._cell["in_small"] = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["small" if self._cell.get("in_small") else "text"] += data
        if self._link is not None:
            self._link[1] += data

    def table(self, **attrs) -> dict:
        found = [t for t in self.tables if all(t["attrs"].get(k) == v for k, v in attrs.items())]
        assert len(found) == 1, (attrs, [t["attrs"] for t in self.tables])
        return found[0]


def grid(table: dict) -> dict[tuple[str, str], dict]:
    """A table with a header row and a first column of names: (row name, column name) -> cell."""
    head = [c["text"].strip() for c in table["rows"][0]]
    return {(row[0]["text"].strip(), head[j]): cell for row in table["rows"][1:] for j, cell in enumerate(row) if j}
