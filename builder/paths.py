"""Where the packaged data and lock files live, whether installed as a wheel or editable from a checkout."""

from __future__ import annotations

from pathlib import Path


def _shipped(in_wheel: str, in_checkout: str, marker: str) -> Path:
    """`builder/<in_wheel>` inside a wheel, the repository's `<in_checkout>` in a checkout (whichever holds `marker`)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / in_wheel, here.parent / in_checkout):
        if (candidate / marker).is_file():
            return candidate
    raise FileNotFoundError(f"packaged {in_checkout}/ not found next to {here}")


def data_dir() -> Path:
    """The `data/` folder."""
    return _shipped("_data", "data", "languages.yaml")


def sample_dir() -> Path:
    return data_dir() / "sample"


def requirements_dir() -> Path:
    """The `requirements/` folder of lock files."""
    return _shipped("_requirements", "requirements", "project.in")
