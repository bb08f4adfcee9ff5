"""Model files checked before use: a GGUF or safetensors file whose header promises more bytes than it holds.

A download or copy cut short leaves a file that starts well and ends early; transformers then fails deep
inside with a reshape error that names neither the file nor the cause. Both formats say in their header
where each tensor's bytes lie, so the size the file must have is known before a byte of weights is read:
`check_file` compares it with the size the file has and names a short one with the likely cause.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import BinaryIO

from builder.errors import BuilderError

GGUF_MAGIC = b"GGUF"
SAFETENSORS_HEADER_MAX = 100 << 20  # bytes of JSON before the tensors: a few MB even for the largest models


class ModelFileError(BuilderError, ValueError):
    """A model file that cannot be what it claims: which file, what is wrong, what to do."""


def check_file(path: Path) -> None:
    """Raise `ModelFileError` unless `path` (a .gguf or .safetensors file) holds every byte its header promises."""
    size = path.stat().st_size
    try:
        with path.open("rb") as f:
            needed = _gguf_size(f) if path.name.endswith(".gguf") else _safetensors_size(f, size)
    except (EOFError, struct.error, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ModelFileError(f"{path} is corrupt ({size:,} bytes; its header is unreadable: {exc}): it was probably "
                             "cut short or is not a model file; download or copy it again") from exc
    if size < needed:
        raise ModelFileError(f"{path} is truncated: {size:,} bytes where its header promises {needed:,}, likely an "
                             "interrupted download or copy; download or copy it again (and remove the partial file)")


def check_folder(folder: Path) -> None:
    """`check_file` for every safetensors file of a model folder."""
    for path in sorted(folder.glob("*.safetensors")):
        check_file(path)


def _read(f: BinaryIO, n: int) -> bytes:
    """`n` bytes, or EOFError where fewer are left (checked first: a corrupt length may claim exabytes)."""
    left = os.fstat(f.fileno()).st_size - f.tell()
    if n > left:
        raise EOFError(f"the file ends at byte {f.tell() + left:,}, inside its header")
    return f.read(n)


def _safetensors_size(f: BinaryIO, size: int) -> int:
    """8 bytes of header length, the JSON header, then the tensors at their [begin, end) offsets after it."""
    (n,) = struct.unpack("<Q", _read(f, 8))
    if n > min(SAFETENSORS_HEADER_MAX, size):
        raise ValueError(f"a header of {n:,} bytes")
    header = json.loads(_read(f, n).decode("utf-8"))
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    return 8 + n + max(ends, default=0)


_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}  # GGUF value types
STRING, ARRAY = 8, 9


def _gguf_value(f: BinaryIO, kind: int):
    if kind in _SCALARS:
        fmt = "<" + _SCALARS[kind]
        return struct.unpack(fmt, _read(f, struct.calcsize(fmt)))[0]
    if kind == STRING:
        (n,) = struct.unpack("<Q", _read(f, 8))
        return _read(f, n).decode("utf-8", errors="replace")
    if kind == ARRAY:
        item, n = struct.unpack("<IQ", _read(f, 12))
        if item in _SCALARS:  # skipped in one read: a vocabulary's scores are 50,000 floats
            _read(f, n * struct.calcsize("<" + _SCALARS[item]))
            return None
        for _ in range(n):
            _gguf_value(f, item)
        return None
    raise ValueError(f"unknown GGUF value type {kind}")


def _gguf_size(f: BinaryIO) -> int:
    """Header, metadata, tensor infos, alignment padding, then each tensor at its offset (its bytes by its type)."""
    from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType

    magic = _read(f, 4)
    if magic != GGUF_MAGIC:
        raise ValueError(f"it starts with {magic!r}, not {GGUF_MAGIC!r}")
    _version, n_tensors, n_kv = struct.unpack("<IQQ", _read(f, 20))
    alignment = GGUF_DEFAULT_ALIGNMENT
    for _ in range(n_kv):
        key = _gguf_value(f, STRING)
        value = _gguf_value(f, struct.unpack("<I", _read(f, 4))[0])
        if key == "general.alignment":
            alignment = int(value)
    end = 0
    for _ in range(n_tensors):
        _gguf_value(f, STRING)
        (n_dims,) = struct.unpack("<I", _read(f, 4))
        dims = struct.unpack(f"<{n_dims}Q", _read(f, 8 * n_dims))
        kind, offset = struct.unpack("<IQ", _read(f, 12))
        block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        elements = 1
        for d in dims:
            elements *= d
        end = max(end, offset + elements // block * block_bytes)
    start = -(-f.tell() // alignment) * alignment
    return start + end
