"""Lock files: an installed environment is checked against its lock line by line, and a tool's
environment is named for its locked version and the lock's digest, so two locks never share one."""

import sys
from pathlib import Path

import pytest

from builder import environments
from builder.environments import LockError, ToolEnvironment, check, freeze


def test_an_environment_that_differs_from_its_lock_is_named_line_by_line(tmp_path):
    python = Path(sys.executable)
    installed = freeze(python)
    lock = tmp_path / "project.lock"
    lock.write_text("# a comment is not a package\n" + "\n".join(installed) + "\n")
    check(python, lock)  # exactly as locked

    name = installed[0].partition("==")[0]
    lock.write_text("\n".join([f"{name}==0.0.0.dev0", *installed[2:], "not-installed-anywhere==1.0"]) + "\n")
    with pytest.raises(LockError) as err:
        check(python, lock)
    assert str(err.value).splitlines()[1:] == [
        f"  - {name}==0.0.0.dev0   (in the lock, not installed)",
        "  - not-installed-anywhere==1.0   (in the lock, not installed)",
        f"  + {installed[0]}   (installed, not in the lock)",
        f"  + {installed[1]}   (installed, not in the lock)",
    ]

def test_a_tool_environment_is_named_for_its_locked_version_and_the_locks_digest(tmp_path, monkeypatch):
    locks = tmp_path / "requirements"
    locks.mkdir()
    monkeypatch.setattr(environments, "requirements_dir", lambda: locks)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (locks / "label-studio.lock").write_text("# made by make lock\nDjango==5.2.1\nlabel-studio==1.23.2\n")
    tool = ToolEnvironment("label-studio")
    first = tool.directory()
    assert tool.version() == "1.23.2"
    assert first.parent == tmp_path / "cache" / "xbench-builder" and first.name.startswith("label-studio-1.23.2-")
    (locks / "label-studio.lock").write_text("# made by make lock\nDjango==5.2.2\nlabel-studio==1.23.2\n")
    assert tool.directory() != first  # same version, other dependencies: another environment
    assert [t.name for t in environments.tools()] == ["label-studio"]
    (first / "bin").mkdir(parents=True)
    (first / environments.INSTALLED).write_text("")
    (locks / "label-studio.lock").write_text("# made by make lock\nDjango==5.2.1\nlabel-studio==1.23.2\n")
    assert tool.ensure(log=pytest.fail) == first  # installed already: nothing to do, nothing said
