"""Virtual environments installed from lock files: the project's own, and one per tool server.

`requirements/<name>.in` says what an environment asks for; `make lock` (`python3 -m
builder.environments lock`) installs each into a fresh throw-away venv and freezes what it got
into `requirements/<name>.lock`, the only file an install reads. Upgrading is that one command.
The project's environment is `.venv` (`make install`). A tool whose pinned dependencies clash with
ours (Label Studio) gets a venv of its own under ~/.cache/xbench-builder, named for the tool's
version and the lock's digest, so two versions never share one. An install counts as done only when
its `pip freeze` equals its lock, line for line.

Standard library only: `make lock` and `make install` run it before any dependency is installed.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder.child_env import INSTALLER, child_env
from builder.errors import BuilderError
from builder.files import write_text
from builder.paths import requirements_dir

PROJECT = "project"  # requirements/project.in: the project and its extras, installed into .venv
PROJECT_DIST = "xbench-builder"  # installed editable on top of its lock, so never part of it
INSTALLED = ".installed"  # written into a tool's venv once it matches its lock

__all__ = ["LockError", "ToolEnvironment", "cache_root", "check", "freeze", "make_lock", "read_lock", "tools"]


class LockError(BuilderError):
    """An environment that differs from its lock, or a lock that cannot be made or read."""


def cache_root() -> Path:
    """Where tool environments live, shared by every checkout on the machine."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xbench-builder"


def read_lock(path: Path) -> list[str]:
    """A lock's requirement lines (`name==version`), without its comments."""
    if not path.is_file():
        raise LockError(f"no lock file {path}: run `make lock`")
    return [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.startswith("#")]


def freeze(python: Path) -> list[str]:
    """What an environment holds, as `pip freeze` writes it (the project itself left out)."""
    done = subprocess.run([str(python), "-m", "pip", "freeze", "--exclude", PROJECT_DIST],
                          capture_output=True, text=True, check=True, env=child_env(also=INSTALLER))
    return [ln.strip() for ln in done.stdout.splitlines() if ln.strip() and not ln.startswith("#")]


def check(python: Path, lock: Path) -> None:
    """Raise unless the environment of `python` holds exactly the lock's packages and versions."""
    want, have = read_lock(lock), freeze(python)
    if want == have:
        return
    missing = [f"  - {ln}   (in the lock, not installed)" for ln in want if ln not in have]
    extra = [f"  + {ln}   (installed, not in the lock)" for ln in have if ln not in want]
    raise LockError(f"{python.parent.parent} differs from {lock}:\n" + "\n".join(missing + extra))


def _pins(lock: Path) -> dict[str, str]:
    return {_normal(name): version for name, _, version in (ln.partition("==") for ln in read_lock(lock))}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class ToolEnvironment:
    """A tool's own venv, installed from `requirements/<name>.lock` (name it for the tool's package)."""

    name: str

    @property
    def lock(self) -> Path:
        return requirements_dir() / f"{self.name}.lock"

    def version(self) -> str | None:
        """The locked version of the package the environment is named for (None if it is named otherwise)."""
        return _pins(self.lock).get(_normal(self.name))

    def directory(self) -> Path:
        digest = hashlib.sha256("\n".join(read_lock(self.lock)).encode()).hexdigest()[:8]
        return cache_root() / "-".join(p for p in (self.name, self.version(), digest) if p)

    def ensure(self, directory: Path | None = None, log=print) -> Path:
        """The environment's folder, installed from the lock first if it is not yet (once, under a file lock).

        A folder of ours left half-installed by a killed run has no `.installed` marker and is made
        again; a `directory` of yours elsewhere is installed into as it is, never removed.
        """
        venv = directory or self.directory()
        if (venv / INSTALLED).is_file():
            return venv
        venv.parent.mkdir(parents=True, exist_ok=True)
        with open(venv.parent / f".{venv.name}.installing", "w") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)  # another process installing the same environment finishes first
            if not (venv / INSTALLED).is_file():
                log(f"installing {self.name} from {self.lock.name} into {venv} (a few minutes, once)")
                if venv.is_relative_to(cache_root()):
                    shutil.rmtree(venv, ignore_errors=True)
                _install(venv, self.lock)
                write_text(venv / INSTALLED, self.lock.read_text(encoding="utf-8"))
        return venv


def tools() -> list[ToolEnvironment]:
    """Every tool environment that has a lock."""
    return [ToolEnvironment(p.stem) for p in sorted(requirements_dir().glob("*.lock")) if p.stem != PROJECT]


def _install(venv: Path, lock: Path) -> None:
    env = child_env(also=INSTALLER)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-qq", "-r", str(lock)], check=True, env=env)
    check(venv / "bin" / "python", lock)


def make_lock(name: str, log=print) -> Path:
    """Install `requirements/<name>.in` into a fresh throw-away venv and freeze it into `<name>.lock`.

    The `.in` file's comment lines head the lock, so what it says about a pin (the torch CPU wheel)
    travels with it.
    """
    source = requirements_dir() / f"{name}.in"
    lock = source.with_suffix(".lock")
    log(f"locking {source.name} -> {lock.name}")
    with tempfile.TemporaryDirectory(prefix=f"lock-{name}-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-qq", "-r", str(source)],
                       cwd=requirements_dir().parent, check=True)
        pins = freeze(venv / "bin" / "python")
    notes = [ln for ln in source.read_text(encoding="utf-8").splitlines() if ln.startswith("#")]
    made = (f"# Made by `make lock` from requirements/{source.name} in a fresh venv (Python "
            f"{sys.version.split()[0]}, {sys.platform}); do not edit: change the .in file and run `make lock`.")
    write_text(lock, "\n".join([made, *notes, *pins]) + "\n")
    return lock


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m builder.environments", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    lock = sub.add_parser("lock", help="rewrite requirements/<name>.lock from <name>.in (all of them by default)")
    lock.add_argument("names", nargs="*")
    chk = sub.add_parser("check", help="compare the project's environment, and each installed tool's, with its lock")
    chk.add_argument("--python", type=Path, default=Path(sys.executable), help="the project environment's python")
    args = parser.parse_args(argv)
    if args.command == "lock":
        for name in args.names or [p.stem for p in sorted(requirements_dir().glob("*.in"))]:
            make_lock(name)
        return
    try:
        check(args.python, requirements_dir() / f"{PROJECT}.lock")
        print(f"{args.python.parent.parent}: {len(read_lock(requirements_dir() / f'{PROJECT}.lock'))} packages, as locked")
        for tool in tools():
            venv = tool.directory()
            if (venv / INSTALLED).is_file():
                check(venv / "bin" / "python", tool.lock)
                print(f"{venv}: {len(read_lock(tool.lock))} packages, as locked")
    except LockError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
