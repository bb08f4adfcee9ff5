"""Where the packaged data lives, whether installed as a wheel or editable from a checkout."""

from __future__ import annotations

from pathlib import Path


def data_dir() -> Path:
    """The `data/` folder: `builder/_data` inside a wheel, the repository's `data/` in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_data", here.parent / "data"):
        if (candidate / "languages.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"packaged data not found next to {here}")


def sample_dir() -> Path:
    return data_dir() / "sample"


def requirements_dir() -> Path:
    """The `requirements/` folder of lock files: `builder/_requirements` inside a wheel, or the repository's."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_requirements", here.parent / "requirements"):
        if (candidate / "project.in").is_file():
            return candidate
    raise FileNotFoundError(f"lock files not found next to {here}")
