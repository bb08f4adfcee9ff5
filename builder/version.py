"""Which code produced a release or a result: one answer for both, in PEP 440 form."""

from __future__ import annotations

import subprocess
from pathlib import Path

from builder import __version__
from builder.child_env import child_env

CHECKOUT = Path(__file__).resolve().parent.parent


def code_version(checkout: Path = CHECKOUT) -> str:
    """The package version; from a git checkout also its commit as a local version label
    (`0.1.0+g<sha12>`), and `.dirty` when tracked files have local edits (`0.1.0+g<sha12>.dirty`)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, check=True,
                              env=child_env()).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != checkout.resolve():
            return __version__  # installed inside some other repository: its commit says nothing about this code
        sha = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return __version__
    return f"{__version__}+g{sha}" + (".dirty" if dirty else "")
