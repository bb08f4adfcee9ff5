"""Versioned releases: publish reviewed data as immutable Hugging Face datasets, and read them back.

`load`, `manifest` and `configs` are the loader API evaluation uses (see contracts: release layout).
"""

from builder.releases.reading import configs, load, manifest

__all__ = ["configs", "load", "manifest"]
