"""The command line's one error handler: what a user can fix is one line; a bug shows its traceback; --debug shows it always."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from builder.cli import app
from builder.errors import BuilderError
from builder.inputs import InputError
from builder.workspace.store import WorkspaceError, init_workspace

# The command line run as a user runs it, after replacing the library function `publish` with one that fails as a bug would.
BUGGY_PUBLISH = """
import sys
import builder.releases.publish

def publish(ws, request):
    return {}["no such key"]

builder.releases.publish.publish = publish
from builder.cli import app
app(sys.argv[1:], prog_name="builder")
"""


def _builder(*args: str, script: str | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", script, *args] if script else [sys.executable, "-m", "builder.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_the_errors_a_user_can_fix_are_builder_errors():
    assert issubclass(WorkspaceError, BuilderError) and issubclass(InputError, BuilderError)
    assert issubclass(InputError, ValueError)  # callers that catch a bad value still catch it


def test_a_user_error_is_one_red_line_and_exit_1(tmp_path):
    res = CliRunner().invoke(app, ["status", "-w", str(tmp_path / "none")])
    assert res.exit_code == 1
    assert res.output == f"error: no workspace at {tmp_path / 'none'} (run `builder init {tmp_path / 'none'}` first)\n"


def test_a_bug_shows_its_traceback(tmp_path):
    init_workspace(tmp_path / "ws").close()
    done = _builder("publish", "--bump", "minor", "-w", str(tmp_path / "ws"), script=BUGGY_PUBLISH)
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "KeyError" in done.stderr and "no such key" in done.stderr
    assert "error:" not in done.stderr


def test_debug_shows_the_traceback_of_a_user_error_too(tmp_path):
    plain = _builder("status", "-w", str(tmp_path / "none"))
    assert plain.returncode == 1 and plain.stderr.count("\n") == 1 and plain.stderr.startswith("error: no workspace at")
    debug = _builder("--debug", "status", "-w", str(tmp_path / "none"))
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr and "WorkspaceError" in debug.stderr and "no workspace at" in debug.stderr
