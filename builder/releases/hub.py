"""Uploading a published version to the Hugging Face Hub: the same files, then the tag `vX.Y.Z`.

The token comes from `HF_TOKEN` only and is handed to `HfApi`; it is never printed or written.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from builder.errors import BuilderError
from builder.releases import versions as V
from builder.releases.store import ReleaseStore

_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+", re.ASCII)  # fullmatch: no trailing newline


class HubError(BuilderError):
    pass


def require_token(repo_id: str) -> str:
    """Fail before anything is written when the Hub cannot be reached or no token is given."""
    from huggingface_hub import is_offline_mode

    if not _REPO_ID.fullmatch(repo_id):
        raise HubError(f"bad Hub dataset id {repo_id!r}: expected ORG/NAME")
    if is_offline_mode():
        raise HubError("cannot publish to the Hub in offline mode (HF_HUB_OFFLINE is set); "
                       "publish locally, then run again online with --hub")
    token = os.environ.get("HF_TOKEN", "").strip()
    if not token:
        raise HubError("--hub needs a Hugging Face token with write access in the environment variable HF_TOKEN")
    return token


def _failed(what: str, exc: Exception) -> HubError:
    first = str(exc).splitlines()[0] if str(exc) else ""
    return HubError(f"Hub {what} failed: {type(exc).__name__}: {first}")


def _call(what: str, fn, *args, **kwargs):
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    try:
        return fn(*args, **kwargs)
    except (HfHubHTTPError, OfflineModeIsEnabled, OSError) as exc:
        raise _failed(what, exc) from None


def hub_versions(api, repo_id: str) -> list[str]:
    from huggingface_hub.errors import (
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
    )

    try:
        refs = api.list_repo_refs(repo_id, repo_type="dataset")
    except RepositoryNotFoundError:
        return []
    except (HfHubHTTPError, OfflineModeIsEnabled, OSError) as exc:
        raise _failed("listing tags", exc) from None
    return [v for v in (V.from_tag(t.name) for t in refs.tags) if v]


def ensure_new(api, repo_id: str, version: str) -> None:
    if version in hub_versions(api, repo_id):
        raise HubError(f"{repo_id} already has v{version} on the Hub; published versions are never overwritten")


def upload(store: ReleaseStore, version: str, repo_id: str, api) -> str:
    """Upload the version's files as one commit (removing the previous version's data files), then tag it."""
    ensure_new(api, repo_id, version)
    _call("creating the repository", api.create_repo, repo_id, repo_type="dataset", exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="builder-hub-") as tmp:
        folder = store.export(version, Path(tmp) / "release")
        commit = _call("upload", api.upload_folder, repo_id=repo_id, folder_path=str(folder), repo_type="dataset",
                       commit_message=f"Release {version}", delete_patterns=["data/**"])
    _call("tagging", api.create_tag, repo_id, tag=V.tag(version), tag_message=f"Release {version}",
          revision=commit.oid, repo_type="dataset")
    return f"https://huggingface.co/datasets/{repo_id}/tree/{V.tag(version)}"


def api_for(token: str):
    from huggingface_hub import HfApi

    return HfApi(token=token)
