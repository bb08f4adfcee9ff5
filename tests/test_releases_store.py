"""Atomic, immutable publishing under crashes and kills, and the Hub upload (faked: no Hub here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import pytest
from typer.testing import CliRunner

import builder.releases as releases
from builder.cli import app
from builder.releases import layout
from builder.releases.hub import HubError, upload
from builder.releases.publish import PublishRequest, publish
from builder.releases.store import ReleaseStore, sha256
from builder.releases.verify import verify

from release_fixtures import demo_template, demo_ws, offline_datasets  # noqa: F401

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
    else:  # killed right after the tag: 1.1.0 exists whole; the checked-out folder lags behind until the next publish
        assert store.versions() == ["1.0.0", "1.1.0"]
        assert releases.load(target, "1.1.0", "de").num_rows == 104
        assert any("working tree" in p for p in verify(target).problems)
        publish(demo_ws, PublishRequest(target=target, version="1.2.0"))
    assert not build_dirs(target) and verify(target).ok
    assert store.versions()[-1] in ("1.1.0", "1.2.0") and len(store.versions()) == (2 if point == "check_commit" else 3)


class FakeHub:
    """Stands in for the Hugging Face Hub API (which cannot be reached here) and records what it was asked."""

    def __init__(self, tags=()):
        self.tags = list(tags)
        self.calls = []
        self.uploaded: dict[str, str] = {}

    def list_repo_refs(self, repo_id, repo_type):
        self.calls.append(("list_repo_refs", repo_id, repo_type))
        return type("Refs", (), {"tags": [type("Ref", (), {"name": n})() for n in self.tags]})()

    def create_repo(self, repo_id, repo_type, exist_ok):
        self.calls.append(("create_repo", repo_id, repo_type, exist_ok))

    def upload_folder(self, *, repo_id, folder_path, repo_type, commit_message, delete_patterns):
        folder = Path(folder_path)
        self.uploaded = {str(p.relative_to(folder)): sha256(p.read_bytes()) for p in folder.rglob("*") if p.is_file()}
        self.calls.append(("upload_folder", repo_id, repo_type, commit_message, tuple(delete_patterns)))
        return type("Commit", (), {"oid": "abc123"})()

    def create_tag(self, repo_id, *, tag, tag_message, revision, repo_type):
        self.calls.append(("create_tag", repo_id, tag, revision, repo_type))


def test_hub_upload_sends_the_version_and_tags_it_without_leaking_the_token(demo_ws, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    caplog.set_level("DEBUG")
    target = tmp_path / "releases"
    hub = FakeHub()
    res = publish(demo_ws, PublishRequest(target=target, version="1.0.0", hub="org/xcomps"), api=hub)
    assert res.hub_url == "https://huggingface.co/datasets/org/xcomps/tree/v1.0.0"
    man = releases.manifest(target, "1.0.0")
    assert hub.uploaded == {**man["files"], "release.json": sha256((target / "release.json").read_bytes())}
    assert ("upload_folder", "org/xcomps", "dataset", "Release 1.0.0", ("data/**",)) in hub.calls
    assert hub.calls[-1] == ("create_tag", "org/xcomps", "v1.0.0", "abc123", "dataset")
    git_text = subprocess.run(["git", "-C", str(target), "log", "--all", "-p", "--format=%B"], capture_output=True).stdout
    assert SECRET.encode() not in git_text and SECRET not in caplog.text
    assert all(SECRET.encode() not in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    # A version the Hub already has is refused before anything is written locally.
    with pytest.raises(HubError, match="already has v1.1.0"):
        publish(demo_ws, PublishRequest(target=target, version="1.1.0", hub="org/xcomps"), api=FakeHub(tags=["v1.1.0"]))
    assert ReleaseStore(target).versions() == ["1.0.0"]


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
