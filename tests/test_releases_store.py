"""Atomic, immutable publishing under crashes and kills, and the Hub: upload and load (an in-memory Hub: none here)."""

from __future__ import annotations

import fnmatch
import json
import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path
from unittest.mock import create_autospec

import httpx2
import huggingface_hub
import huggingface_hub.constants
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from huggingface_hub import errors as hub_errors
from huggingface_hub import hf_api
from typer.testing import CliRunner

import builder.releases as releases
from builder.cli import app
from builder.releases import layout
from builder.releases.hub import HubError, upload
from builder.releases.publish import PublishRequest, publish
from builder.releases.store import ReleaseStore, ReleaseStoreError, sha256
from builder.releases.verify import verify

pytest_plugins = ["release_fixtures"]

SECRET = "hf_SeCrEt0123456789abcdef"
ROOT = Path(__file__).resolve().parents[1]


def worktree_files(target: Path) -> dict[str, bytes]:
    return {str(p.relative_to(target)): p.read_bytes() for p in target.rglob("*") if p.is_file() and ".git" not in p.parts}


def build_dirs(target: Path) -> list[Path]:
    return list(target.parent.glob(f".{target.name}.build-*"))


@pytest.mark.parametrize("step", ["write", "tag"])
def test_a_crash_mid_publish_leaves_no_version_and_the_next_publish_succeeds(demo_ws, tmp_path, monkeypatch, step):
    target = tmp_path / "releases"
    publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    before = worktree_files(target)

    def crash(*args, **kwargs):
        raise RuntimeError("simulated crash")

    if step == "write":  # after the data files, before the card's companions and the manifest
        monkeypatch.setattr(layout, "croissant", crash)
    else:  # after the commit objects are written and checked, instead of creating the tag
        monkeypatch.setattr(ReleaseStore, "tag", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        publish(demo_ws, PublishRequest(target=target, version="1.1.0"))
    assert ReleaseStore(target).versions() == ["1.0.0"]
    assert worktree_files(target) == before and not build_dirs(target)
    monkeypatch.undo()
    publish(demo_ws, PublishRequest(target=target, version="1.1.0"))
    assert ReleaseStore(target).versions() == ["1.0.0", "1.1.0"] and verify(target).ok


KILLER = """
import os, signal, sys
from pathlib import Path
from builder.releases.store import ReleaseStore
from builder.releases.publish import PublishRequest, publish
from builder.workspace.store import open_workspace

point = sys.argv[3]
original = getattr(ReleaseStore, point)

def then_die(self, *args, **kwargs):
    original(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)

setattr(ReleaseStore, point, then_die)
publish(open_workspace(sys.argv[1]), PublishRequest(target=Path(sys.argv[2]), version="1.1.0"))
"""


@pytest.mark.parametrize("point", ["check_commit", "tag"])
def test_a_killed_publisher_leaves_either_no_version_or_a_whole_one(demo_ws, tmp_path, point):
    target = tmp_path / "releases"
    publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", KILLER, str(demo_ws.directory), str(target), point], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert build_dirs(target)  # the killed publisher could not clean up
    store = ReleaseStore(target)
    if point == "check_commit":  # killed before the tag: no trace of 1.1.0
        assert store.versions() == ["1.0.0"] and verify(target).ok
        publish(demo_ws, PublishRequest(target=target, version="1.1.0"))
    else:  # killed right after the tag: 1.1.0 exists whole; verify finishes the checkout the kill cut short
        assert store.versions() == ["1.0.0", "1.1.0"]
        assert releases.load(target, "1.1.0", "de").num_rows == 104
        assert store.checkout_pending() and verify(target).ok and not store.checkout_pending()
        publish(demo_ws, PublishRequest(target=target, version="1.2.0"))
    assert not build_dirs(target) and verify(target).ok
    assert store.versions()[-1] in ("1.1.0", "1.2.0") and len(store.versions()) == (2 if point == "check_commit" else 3)


# A git that runs the real one, logs each step that changes a store, and kills its caller's whole process group
# (the publisher and any git it runs) after the step numbered kill_after_git_step in plan.json, or while git holds its locks
# in the step numbered kill_during_git_step: a checkout killed from a smudge filter (index.lock held), a ref
# update killed from the reference-transaction hook once its lock files are taken. Nothing in the product knows.
GIT_KILLER = """#!{python}
import json, os, signal, subprocess, sys

plan = json.loads(open({plan!r}).read())  # a file, not our environment: git runs with one built for it (child_env)

READS = ("rev-parse", "ls-tree", "cat-file", "for-each-ref")
args = sys.argv[1:]
i = 0
while i < len(args) and args[i].startswith("-"):
    i += 2 if args[i] in ("-C", "-c", "--git-dir", "--work-tree") else 1
command = args[i:]
writes = command[0] not in READS and command[:2] not in (["tag", "--list"], ["config", "--local"])
step = 0
if writes:
    with open(plan["git_step_log"], "a+") as log:
        log.write(" ".join(command[:2]) + "\\n")
        log.seek(0)
        step = len(log.readlines())
extra = []
if step and step == int(plan.get("kill_during_git_step", 0)):
    kill = "kill -KILL 0"
    extra = ["-c", "core.attributesFile={attributes}", "-c", "filter.kill.smudge=" + kill, "-c", "core.hooksPath={hooks}"]
rc = subprocess.run([{git!r}, *extra, *args]).returncode
if step and step in (int(plan.get("kill_after_git_step", 0)), int(plan.get("kill_during_git_step", 0))):
    os.killpg(os.getpgrp(), signal.SIGKILL)
sys.exit(rc)
"""
HOOK = """#!/bin/sh
[ "$1" = prepared ] && kill -KILL 0
cat >/dev/null
"""


def git_killer(folder: Path) -> Path:
    """A folder holding the killing `git`, to put first on PATH."""
    import shutil

    (folder / "hooks").mkdir(parents=True)
    (folder / "attributes").write_text("* filter=kill\n")
    (folder / "hooks" / "reference-transaction").write_text(HOOK)
    (folder / "git").write_text(GIT_KILLER.format(python=sys.executable, git=shutil.which("git"), plan=str(folder / "plan.json"),
                                                  attributes=folder / "attributes", hooks=folder / "hooks"))
    for script in (folder / "git", folder / "hooks" / "reference-transaction"):
        script.chmod(0o755)
    return folder


def _publish_as_group_leader(args: list[str], env: dict[str, str]) -> None:
    os.setpgid(0, 0)  # a process group of its own, which the killing git kills whole
    os.environ.update(env)
    res = CliRunner().invoke(app, args)
    if res.exit_code:
        print(res.output, file=sys.stderr)
    os._exit(res.exit_code)


def publish_in_process_group(ws_dir: Path, target: Path, version: str, killer: Path, log: Path, **kill) -> int:
    """`builder publish` in a child process leading a process group of its own, with the killing git first on PATH;
    its exit status (-9: killed). The child is forked from this process, which has imported everything already: a
    fresh interpreter for each of the 35 kill points would spend most of the test importing."""
    (killer / "plan.json").write_text(json.dumps({"git_step_log": str(log), **kill}))
    env = {"HF_HUB_OFFLINE": "1", "PATH": f"{killer}{os.pathsep}{os.environ['PATH']}"}
    args = ["publish", "-w", str(ws_dir), "--to", str(target), "--version", version]
    child = multiprocessing.get_context("fork").Process(target=_publish_as_group_leader, args=(args, env))
    child.start()
    child.join(timeout=300)
    return child.exitcode


def cli_ok(*args: str) -> str:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.output


@pytest.mark.both_databases
def test_publish_killed_at_every_git_step_is_repaired_by_the_next_publish_and_verify(demo_ws, tmp_path):
    """The whole process group killed after each git step that changes the store, and inside the steps that hold
    git's locks (the checkout's index.lock, a ref's lock): the version is whole or absent; `releases verify`,
    then `publish`, then `releases verify` succeed with no hand on the store."""
    killed_at_every_git_step(demo_ws, tmp_path, first=False)


def test_the_first_publish_killed_at_every_git_step_is_repaired_by_the_next_publish_and_verify(demo_ws, tmp_path):
    """The same for the publish that makes the store (`git init` and its settings are steps too). On SQLite only:
    the workspace's database plays no part in the store's repair, and each run of these kills takes a minute."""
    killed_at_every_git_step(demo_ws, tmp_path, first=True)


def killed_at_every_git_step(demo_ws, tmp_path: Path, *, first: bool) -> None:
    import shutil

    killer, version = git_killer(tmp_path / "killer"), "1.0.0" if first else "1.1.0"
    template = tmp_path / "template"
    if not first:
        publish(demo_ws, PublishRequest(target=template, version="1.0.0"))

    def store_as_before(target: Path) -> None:
        if first:
            target.parent.mkdir(parents=True)
        else:
            shutil.copytree(template, target)

    store_as_before(tmp_path / "probe" / "releases")
    assert publish_in_process_group(demo_ws.directory, tmp_path / "probe" / "releases", version, killer, tmp_path / "steps.log") == 0
    steps = (tmp_path / "steps.log").read_text().splitlines()
    assert {"reset", "tag", "update-ref", "clean"} | ({"init", "config"} if first else set()) <= {s.split()[0] for s in steps}
    locking = [n for n, s in enumerate(steps, 1) if s.split()[0] in ("reset", "tag", "update-ref")]
    points = [("after", n) for n in range(1, len(steps) + 1)] + [("during", n) for n in locking]
    seen_locks = set()
    for when, n in points:
        target, log = tmp_path / f"{when}-{n}" / "releases", tmp_path / f"{when}-{n}" / "steps.log"
        store_as_before(target)
        status = publish_in_process_group(demo_ws.directory, target, version, killer, log, **{f"kill_{when}_git_step": n})
        assert status == -signal.SIGKILL, (when, n, steps[n - 1])
        seen_locks |= {p.name for p in (target / ".git").rglob("*.lock") if p.name != "builder-publish.lock"}
        store = ReleaseStore(target)
        published = store.versions()
        assert published in ([], ["1.0.0"]) if first else published in (["1.0.0"], ["1.0.0", "1.1.0"])
        if version in published:  # whole: every row there
            assert releases.load(target, version, "de").num_rows == 104, (when, n)
        cli_ok("releases", "verify", "--from", str(target))
        cli_ok("publish", "-w", str(demo_ws.directory), "--to", str(target), "--version", "2.0.0")
        cli_ok("releases", "verify", "--from", str(target))
        assert store.versions()[-1] == "2.0.0" and not build_dirs(target), (when, n)
        assert worktree_files(target) == {p: data for p, data in store.read("2.0.0", list(store.files("2.0.0"))).items()}
    assert {"index.lock", f"v{version}.lock", "main.lock"} <= seen_locks  # git's own locks were left, and removed


class Hub:
    """An in-memory Hugging Face Hub (which cannot be reached here) behind an autospec of the installed `HfApi`.

    Calls go through `create_autospec`, so a call that the installed huggingface_hub's signatures no longer
    accept fails here as it would against the real client. The Hub keeps repositories, commits and tags and
    fails as the real one documents: `RepositoryNotFoundError` for an unknown repository, 409 for an existing
    tag, `RevisionNotFoundError` and `RemoteEntryNotFoundError` for downloads."""

    def __init__(self, downloads: Path) -> None:
        self.commits: dict[str, dict[str, bytes]] = {}  # oid -> path -> contents
        self.repos: dict[str, dict] = {}  # repo id -> {"head": oid | None, "tags": {tag: oid}}
        self.downloads = downloads
        self.api = create_autospec(huggingface_hub.HfApi, instance=True, spec_set=True)
        for name in ("list_repo_refs", "create_repo", "upload_folder", "create_tag", "hf_hub_download"):
            getattr(self.api, name).side_effect = getattr(self, name)

    @staticmethod
    def _error(cls, status: int, message: str):
        return cls(message, response=httpx2.Response(status, request=httpx2.Request("GET", "https://huggingface.co/api")))

    def _repo(self, repo_id: str) -> dict:
        if repo_id not in self.repos:
            raise self._error(hub_errors.RepositoryNotFoundError, 404, f"Repository Not Found for url: {repo_id}")
        return self.repos[repo_id]

    def list_repo_refs(self, repo_id, *, repo_type=None, **_):
        tags = [hf_api.GitRefInfo(name=tag, ref=f"refs/tags/{tag}", target_commit=oid)
                for tag, oid in self._repo(repo_id)["tags"].items()]
        return hf_api.GitRefs(branches=[], converts=[], tags=tags)

    def create_repo(self, repo_id, *, repo_type=None, exist_ok=False, **_):
        if repo_id in self.repos and not exist_ok:
            raise self._error(hub_errors.HfHubHTTPError, 409, f"You already created this dataset repo: {repo_id}")
        self.repos.setdefault(repo_id, {"head": None, "tags": {}})
        return hf_api.RepoUrl(f"https://huggingface.co/datasets/{repo_id}")

    def upload_folder(self, *, repo_id, folder_path, repo_type=None, commit_message=None, delete_patterns=None, **_):
        repo = self._repo(repo_id)
        files = dict(self.commits[repo["head"]]) if repo["head"] else {}
        for pattern in [delete_patterns] if isinstance(delete_patterns, str) else delete_patterns or []:
            files = {p: b for p, b in files.items() if not fnmatch.fnmatch(p, pattern)}
        folder = Path(folder_path)
        files |= {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        oid = sha256(repr(sorted(files.items())).encode())[:40]
        self.commits[oid], repo["head"] = files, oid
        return hf_api.CommitInfo(commit_url=f"https://huggingface.co/datasets/{repo_id}/commit/{oid}",
                                 commit_message=commit_message or "", commit_description="", oid=oid)

    def create_tag(self, repo_id, *, tag, tag_message=None, revision=None, repo_type=None, exist_ok=False, **_):
        repo = self._repo(repo_id)
        if tag in repo["tags"] and not exist_ok:
            raise self._error(hub_errors.HfHubHTTPError, 409, f"Tag {tag} already exists")
        repo["tags"][tag] = revision or repo["head"]

    def hf_hub_download(self, repo_id, filename, *, repo_type=None, revision=None, **_):
        repo = self._repo(repo_id)
        oid = repo["tags"].get(revision, revision if revision in self.commits else None) if revision else repo["head"]
        if oid is None:
            raise self._error(hub_errors.RevisionNotFoundError, 404, f"Invalid rev id: {revision}")
        if filename not in self.commits[oid]:
            raise self._error(hub_errors.RemoteEntryNotFoundError, 404, f"Entry Not Found: {filename}")
        path = self.downloads / oid / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.commits[oid][filename])
        return str(path)

    def files(self, repo_id: str, tag: str) -> dict[str, bytes]:
        return self.commits[self.repos[repo_id]["tags"][tag]]


def test_hub_upload_sends_the_version_and_tags_it_without_leaking_the_token(demo_ws, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    caplog.set_level("DEBUG")
    target = tmp_path / "releases"
    hub = Hub(tmp_path / "downloads")
    res = publish(demo_ws, PublishRequest(target=target, version="1.0.0", hub="org/xcomps"), api=hub.api)
    assert res.hub_url == "https://huggingface.co/datasets/org/xcomps/tree/v1.0.0"
    man = releases.manifest(target, "1.0.0")
    uploaded = hub.files("org/xcomps", "v1.0.0")
    assert {p: sha256(b) for p, b in uploaded.items()} == {**man["files"], "release.json": sha256((target / "release.json").read_bytes())}
    upload_call = hub.api.upload_folder.call_args
    assert (upload_call.kwargs["repo_id"], upload_call.kwargs["repo_type"], upload_call.kwargs["commit_message"],
            upload_call.kwargs["delete_patterns"]) == ("org/xcomps", "dataset", "Release 1.0.0", ["data/**"])
    assert hub.api.method_calls[-1][0] == "create_tag" and hub.repos["org/xcomps"]["tags"]["v1.0.0"] == hub.repos["org/xcomps"]["head"]
    git_text = subprocess.run(["git", "-C", str(target), "log", "--all", "-p", "--format=%B"], capture_output=True).stdout
    assert SECRET.encode() not in git_text and SECRET not in caplog.text
    assert all(SECRET.encode() not in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    # A version the Hub already has is refused before anything is written locally.
    hub.api.create_tag("org/xcomps", tag="v1.1.0", repo_type="dataset")
    with pytest.raises(HubError, match="already has v1.1.0"):
        publish(demo_ws, PublishRequest(target=target, version="1.1.0", hub="org/xcomps"), api=hub.api)
    assert ReleaseStore(target).versions() == ["1.0.0"]


def test_a_release_read_from_the_hub_is_checked_against_its_manifest_like_a_local_one(demo_ws, tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    target, hub = tmp_path / "releases", Hub(tmp_path / "downloads")
    publish(demo_ws, PublishRequest(target=target, version="1.0.0", hub="org/xcomps"), api=hub.api)
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda *args, **kwargs: hub.api)  # what the loader makes
    assert releases.configs("org/xcomps", "latest") == releases.configs(target, "1.0.0")
    from_hub, local = releases.load("org/xcomps", "1.0.0", "de"), releases.load(target, "1.0.0", "de")
    assert from_hub.num_rows == 104 and from_hub.features == local.features
    assert from_hub.data.table.equals(local.data.table)
    assert [c.args[1] for c in hub.api.hf_hub_download.call_args_list if c.args[1].startswith("data/")] == \
        [p for p in releases.manifest(target, "1.0.0")["files"] if p.startswith("data/de/")]
    # A file changed on the Hub after publishing is refused, as it is from a local store.
    files = hub.files("org/xcomps", "v1.0.0")
    parquet = next(p for p in files if p.startswith("data/de/"))
    table = pq.read_table(pa.BufferReader(files[parquet]))
    rows = table.to_pylist()
    rows[0]["acceptable_sentence"] = "Manipuliert."
    doctored = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), doctored)
    files[parquet] = doctored.getvalue().to_pybytes()
    with pytest.raises(ReleaseStoreError, match=f"{parquet} in version 1.0.0 of org/xcomps does not match its checksum"):
        releases.load("org/xcomps", "1.0.0", "de")
    with pytest.raises(Exception, match="RevisionNotFoundError|Invalid rev id"):
        releases.load("org/xcomps", "2.0.0", "de")


def test_hub_in_offline_mode_or_without_a_token_is_a_clear_error_and_writes_nothing(demo_ws, tmp_path, monkeypatch):
    target = tmp_path / "releases"
    runner = CliRunner()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    res = runner.invoke(app, ["publish", "--version", "1.0.0", "--to", str(target), "--hub", "org/xcomps", "-w", str(demo_ws.directory)])
    assert res.exit_code == 1 and "cannot publish to the Hub in offline mode" in res.output and SECRET not in res.output
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_TOKEN")
    res = runner.invoke(app, ["publish", "--version", "1.0.0", "--to", str(target), "--hub", "org/xcomps", "-w", str(demo_ws.directory)])
    assert res.exit_code == 1 and "HF_TOKEN" in res.output
    assert not target.exists()
    # The real client, offline, fails with a clear message rather than hanging or half-uploading.
    publish(demo_ws, PublishRequest(target=target, version="1.0.0"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubError, match="Hub listing tags failed: OfflineModeIsEnabled"):
        upload(ReleaseStore(target), "1.0.0", "org/xcomps", huggingface_hub.HfApi(token=SECRET))


def test_a_folder_with_other_content_or_a_foreign_repository_is_never_used_as_a_store(demo_ws, tmp_path):
    foreign = tmp_path / "project"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="exists and is not a release store"):
        publish(demo_ws, PublishRequest(target=foreign, version="1.0.0"))
    subprocess.run(["git", "init", "-q", str(foreign)], check=True)
    with pytest.raises(Exception, match="is a git repository but not a release store"):
        publish(demo_ws, PublishRequest(target=foreign, version="1.0.0"))
    assert (foreign / "notes.txt").read_text() == "mine" and not ReleaseStore(foreign).versions()
