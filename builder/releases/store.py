"""The local release store: a git repository with one annotated tag `vX.Y.Z` per version.

Publishing is atomic. The release is built in a temporary folder beside the store, committed with
a private index (objects only: no ref, no working-tree change), its blobs are checked against the
manifest, and only then is the tag created: that single ref update is the moment the version comes
into being. A crash before it leaves unreferenced objects and a stale build folder, which the next
publish removes; a crash after it leaves the version complete. The branch `main` and the working tree
are a convenience view of the latest version and are re-synchronised at the start of every publish.
Versions are read from the tags' trees, never from the working tree.

A publish killed at any step is repaired by the next one, under the publisher's lock (`recover`): a new
store whose `git init` was cut short is made again, the lock files of a git process killed mid-step
(`index.lock`, a ref's lock) are removed once no git process works in the store, and the working tree is
brought to the latest tag. The commit the working tree was last brought to is recorded (`.git/builder-checkout`),
so `releases verify` can tell a checkout that a kill cut short (repaired, then checked) from files changed since.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from builder.child_env import child_env
from builder.errors import BuilderError
from builder.files import write_text
from builder.releases import versions as V

BRANCH = "main"
MANIFEST = "release.json"
PUBLISH_LOCK = "builder-publish.lock"  # in .git: held by the publisher (filelock; the OS frees it with the process)
CHECKED_OUT = "builder-checkout"  # in .git: the commit the working tree was last brought to, whole; empty meanwhile


class ReleaseStoreError(BuilderError):
    """The release store is missing, damaged, or git failed."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


DAMAGE = ("corrupt", "unable to unpack", "unable to read", "inflate:", "bad object", "hash mismatch", "did not match")


def _git(cwd: Path, *args: str, input: bytes | None = None, env: dict | None = None, what: str = "the release store") -> bytes:
    """git's output; a `ReleaseStoreError` when it fails, or when it reports damaged objects (which `cat-file --batch`
    answers as missing, exiting 0): the error names `what` was read, where, and what to do. The ceiling keeps git from
    taking a repository above the store for it (a `.git` not made whole yet is none)."""
    proc = subprocess.run(["git", "-C", str(cwd), *args], input=input, capture_output=True,
                          env=child_env(GIT_CEILING_DIRECTORIES=str(Path(cwd).absolute().parent), **(env or {})))
    said = proc.stderr.decode(errors="replace").strip()
    if any(words in said for words in DAMAGE):
        raise ReleaseStoreError(f"{what} in {cwd} cannot be read: git objects are damaged ({said.splitlines()[-1]}): restore "
                         f"the store from a backup or another copy of it (`git -C {cwd} fsck` lists what is damaged)")
    if proc.returncode != 0:
        raise ReleaseStoreError(f"git {' '.join(args[:2])} failed in {cwd}: {said}")
    return proc.stdout


def _git_at_work(root: Path) -> list[int] | None:
    """The processes on this machine that may hold a git lock file of the repository at `root`: those with a file
    of its `.git` open whose name ends in `.lock`, and every git process whose working folder is in it (git closes a
    ref's lock file before renaming it). None where the system does not show its processes (no /proc)."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    git_dir = str(root / ".git") + os.sep
    found = []
    for pid in (p for p in proc.iterdir() if p.name.isdigit() and p.name != str(os.getpid())):
        try:
            if (pid / "comm").read_text().strip().startswith("git") and Path(os.readlink(pid / "cwd")).is_relative_to(root):
                found.append(int(pid.name))
                continue
            for fd in (pid / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith(git_dir) and target.endswith(".lock"):
                    found.append(int(pid.name))
                    break
        except OSError:  # gone meanwhile, or another user's
            continue
    return found


class ReleaseStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).absolute()

    # -- reading -----------------------------------------------------------------------------

    def exists(self) -> bool:
        """A repository is there (what `git init` makes first: HEAD, objects, refs); a publish makes it a store."""
        git = self.root / ".git"
        return (git / "HEAD").is_file() and (git / "objects").is_dir() and (git / "refs").is_dir()

    def require(self) -> None:
        if not self.exists():
            raise ReleaseStoreError(f"no release store at {self.root} (publish a version there first)")

    def versions(self) -> list[str]:
        """Published versions, oldest first (none when the store does not exist yet)."""
        if not self.exists():
            return []
        names = _git(self.root, "tag", "--list", "v*").decode().split()
        return V.ordered([v for v in map(V.from_tag, names) if v])

    def latest(self) -> str | None:
        vs = self.versions()
        return vs[-1] if vs else None

    def resolve(self, version: str) -> str:
        """'latest' or X.Y.Z → a published version, or a clear error listing what exists."""
        self.require()
        published = self.versions()
        if version == "latest":
            if not published:
                raise ReleaseStoreError(f"{self.root} has no published version yet")
            return published[-1]
        V.parse(version)
        if version not in published:
            raise ReleaseStoreError(f"version {version} is not published in {self.root}; published: "
                             f"{', '.join(published) or 'none'}")
        return version

    def files(self, version: str) -> dict[str, str]:
        """path -> git blob id of every file in the version."""
        out = {}
        for entry in _git(self.root, "ls-tree", "-r", "-z", V.tag(version), what=f"version {version}").split(b"\0"):
            if entry:
                meta, path = entry.split(b"\t", 1)
                out[path.decode()] = meta.split()[2].decode()
        return out

    def read(self, version: str, paths: list[str]) -> dict[str, bytes]:
        """The contents of files of a version, read from git objects in one batch."""
        spec = "".join(f"{V.tag(version)}:{p}\n" for p in paths).encode()
        raw = _git(self.root, "cat-file", "--batch", input=spec, what=f"version {version}")
        out, pos = {}, 0
        for p in paths:
            header_end = raw.index(b"\n", pos)
            header = raw[pos:header_end].split()
            if header[-1] == b"missing":
                raise ReleaseStoreError(f"{p} is not in version {version} of {self.root}")
            size = int(header[2])
            out[p] = raw[header_end + 1: header_end + 1 + size]
            pos = header_end + 1 + size + 1
        return out

    def export(self, version: str, dest: Path) -> Path:
        """Write a version's files into `dest` (which must not exist yet)."""
        files = self.files(version)
        data = self.read(version, sorted(files))
        dest.mkdir(parents=True)
        for path, content in data.items():
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            (dest / path).write_bytes(content)
        return dest

    # -- publishing ----------------------------------------------------------------------------

    def _marked(self) -> bool:
        return self.exists() and subprocess.run(
            ["git", "-C", str(self.root), "config", "--local", "builder.releasestore"], capture_output=True, text=True,
            env=child_env(GIT_CEILING_DIRECTORIES=str(self.root.parent))).stdout.strip() == "true"

    def _only_git(self) -> bool:
        return not self.root.exists() or all(p.name == ".git" for p in self.root.iterdir())

    def _init(self) -> None:
        """Call under `lock()`: make the repository, marked as ours last (publishing resets and cleans its working tree,
        so a folder with other content, or someone else's repository, is refused). A `.git` holding nothing but what an
        init cut short leaves (no ref, nothing beside it) is one of ours not finished: it is made again. Parquet is
        already compressed, so loose objects use zlib level 1."""
        if self._marked():
            return
        if not self._only_git() or (self.exists() and _git(self.root, "for-each-ref").strip()):
            raise ReleaseStoreError(f"{self.root} is a git repository but not a release store; choose another --to")
        _git(self.root, "init", "-q", "-b", BRANCH)
        for key, value in (("user.name", "builder publish"), ("user.email", "builder@localhost"),
                           ("core.looseCompression", "1"), ("core.autocrlf", "false"), ("gc.auto", "0"),
                           ("builder.releasestore", "true")):
            _git(self.root, "config", key, value)

    @contextmanager
    def lock(self) -> Iterator[None]:
        """One publisher at a time (the OS releases the lock if the process dies), in a store made if new and
        repaired if a publish was killed (`recover`). A folder with other content is refused before anything is made."""
        if not (self.root / ".git").is_dir():
            if not self._only_git():
                raise ReleaseStoreError(f"{self.root} exists and is not a release store; choose an empty or new folder for --to")
            (self.root / ".git").mkdir(parents=True, exist_ok=True)
        elif not self._marked() and not self._only_git():
            raise ReleaseStoreError(f"{self.root} is a git repository but not a release store; choose another --to")
        with FileLock(str(self.root / ".git" / PUBLISH_LOCK), timeout=60):
            self._init()
            self.recover()
            yield

    def recover(self) -> None:
        """Call under `lock()`: undo what a publish killed at any step left. Stale git lock files go (a git process
        killed mid-step leaves them, and git refuses to run while they are there), then the working tree is brought
        to the latest version. A lock file is removed only when no git process on this machine works in the store;
        while one does, or where this system cannot tell, it is an error that names the file."""
        git = self.root / ".git"
        stale = sorted(p for p in (*git.glob("*.lock"), *(git / "refs").rglob("*.lock")) if p.name != PUBLISH_LOCK)
        if stale:
            working = _git_at_work(self.root)
            if working is None or working:
                who = "this system cannot tell whether a git process holds it" if working is None else \
                    f"git process {', '.join(map(str, working))} works in the store"
                raise ReleaseStoreError(f"{stale[0]} is held or was left by a killed git ({who}); once no git runs in "
                                 f"{self.root}, delete it and publish again")
            for path in stale:
                path.unlink(missing_ok=True)
        self.sync_worktree()

    def checkout_pending(self) -> bool:
        """Whether the working tree has not been brought to the latest version whole (a publish killed after its tag,
        or during a checkout). A store from before the record counts as pending when `main` is behind the latest tag."""
        latest = self.latest()
        if latest is None:
            return False
        commit = _git(self.root, "rev-parse", f"{V.tag(latest)}^{{commit}}").decode().strip()
        record = self.root / ".git" / CHECKED_OUT
        if record.is_file():
            return record.read_text().strip() != commit
        head = subprocess.run(["git", "-C", str(self.root), "rev-parse", "-q", "--verify", "HEAD^{commit}"],
                              capture_output=True, text=True).stdout.strip()
        return head != commit

    def _build_prefix(self) -> str:
        return f".{self.root.name}.build-"

    @contextmanager
    def build_dir(self) -> Iterator[Path]:
        """A fresh temporary folder beside the store (same file system), removed afterwards.

        Call under `lock()`: folders left by a publisher that crashed are removed first."""
        for stale in self.root.parent.glob(self._build_prefix() + "*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=self._build_prefix(), dir=self.root.parent))
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def sync_worktree(self) -> None:
        """Point `main` and the working tree at the latest version (repairs an interrupted publish); call under `lock()`.

        The commit is recorded once the tree is whole (`checkout_pending`); the record is emptied first."""
        latest = self.latest()
        if latest is None:
            return
        commit = _git(self.root, "rev-parse", f"{V.tag(latest)}^{{commit}}").decode().strip()
        record = self.root / ".git" / CHECKED_OUT
        write_text(record, "")
        _git(self.root, "update-ref", f"refs/heads/{BRANCH}", commit)
        _git(self.root, "symbolic-ref", "HEAD", f"refs/heads/{BRANCH}")
        _git(self.root, "reset", "-q", "--hard", commit)
        _git(self.root, "clean", "-q", "-f", "-d", "-x", "-e", ".git")
        write_text(record, commit + "\n")

    def commit(self, folder: Path, version: str, message: str, index: Path) -> str:
        """Write `folder` as a commit whose parent is the latest version; returns the commit id.

        Only objects are written: nothing refers to the commit until `tag()`."""
        env = {"GIT_INDEX_FILE": str(index)}
        git_dir = ("--git-dir", str(self.root / ".git"), "--work-tree", str(folder))
        _git(folder, *git_dir, "add", "-A", "--", ".", env=env)
        tree = _git(folder, *git_dir, "write-tree", env=env).decode().strip()
        latest = self.latest()
        parent = ["-p", _git(self.root, "rev-parse", f"{V.tag(latest)}^{{commit}}").decode().strip()] if latest else []
        return _git(self.root, "commit-tree", tree, *parent, "-m", message).decode().strip()

    def check_commit(self, commit: str, expected: dict[str, str]) -> None:
        """Every file of the commit has the sha256 the manifest records, and nothing else is there."""
        listed = {}
        for entry in _git(self.root, "ls-tree", "-r", "-z", commit).split(b"\0"):
            if entry:
                meta, path = entry.split(b"\t", 1)
                listed[path.decode()] = meta.split()[2].decode()
        paths = sorted(set(listed) - {MANIFEST})
        if set(paths) != set(expected):
            raise ReleaseStoreError(f"commit {commit[:12]} holds {sorted(set(paths) ^ set(expected))} unlike its manifest")
        raw = _git(self.root, "cat-file", "--batch", input="".join(f"{listed[p]}\n" for p in paths).encode())
        pos = 0
        for p in paths:
            header_end = raw.index(b"\n", pos)
            size = int(raw[pos:header_end].split()[2])
            if sha256(raw[header_end + 1: header_end + 1 + size]) != expected[p]:
                raise ReleaseStoreError(f"{p} in commit {commit[:12]} does not match its checksum")
            pos = header_end + 1 + size + 1

    def tag(self, commit: str, version: str, message: str) -> None:
        """Create the annotated tag: the one step that publishes the version (refused if it exists)."""
        _git(self.root, "tag", "-a", V.tag(version), commit, "-m", message)
