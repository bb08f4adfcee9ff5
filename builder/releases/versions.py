"""Release version strings: strict `X.Y.Z`, tags `vX.Y.Z`, and bumps from the latest version."""

from __future__ import annotations

import re
from typing import Literal

from builder.errors import BuilderError

Bump = Literal["major", "minor", "patch"]
_SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")  # whole strings only (fullmatch): ASCII digits, no newline


class VersionError(BuilderError, ValueError):
    """A version string that is malformed, already published, or not newer than the latest."""


def parse(version: str) -> tuple[int, int, int]:
    m = _SEMVER.fullmatch(version)
    if not m:
        hint = " (without the leading 'v')" if version.startswith("v") and _SEMVER.fullmatch(version[1:]) else ""
        raise VersionError(f"bad version {version!r}: expected X.Y.Z with numbers and no leading zeros, e.g. 1.0.0{hint}")
    major, minor, patch = (int(g) for g in m.groups())
    return major, minor, patch


def tag(version: str) -> str:
    parse(version)
    return f"v{version}"


def from_tag(name: str) -> str | None:
    """The version a tag names, or None for tags that are not release tags."""
    return name[1:] if name.startswith("v") and _SEMVER.fullmatch(name[1:]) else None


def ordered(versions: list[str]) -> list[str]:
    return sorted(versions, key=parse)


def bump(latest: str | None, part: Bump) -> str:
    major, minor, patch = parse(latest) if latest else (0, 0, 0)
    if part == "major":
        return f"{major + 1}.0.0"
    if part == "minor":
        return f"{major}.{minor + 1}.0"
    return f"{major}.{minor}.{patch + 1}"


def next_version(existing: list[str], *, version: str | None, bump_part: Bump | None) -> str:
    """The version to publish: given explicitly or bumped; never one that exists or is not newest."""
    if (version is None) == (bump_part is None):
        raise VersionError("give exactly one of --version X.Y.Z or --bump major|minor|patch")
    latest = ordered(existing)[-1] if existing else None
    new = bump(latest, bump_part) if bump_part else version
    parse(new)
    if new in existing:
        raise VersionError(f"version {new} is already published; published versions are never overwritten "
                           f"(publish a new one, e.g. --bump patch → {bump(latest, 'patch')})")
    if latest and parse(new) < parse(latest):
        raise VersionError(f"version {new} is older than the latest release {latest}; versions only increase")
    return new
