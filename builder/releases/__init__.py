"""Versioned releases: publish reviewed data as immutable Hugging Face datasets, and read them back.

`load`, `manifest`, `configs` and `languages` are the loader API evaluation uses.
"""

from builder.releases.declarations import ReleaseLanguages
from builder.releases.reading import configs, languages, load, manifest

__all__ = ["ReleaseLanguages", "configs", "languages", "load", "manifest"]
