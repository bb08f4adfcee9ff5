"""GGUF model files as transformers folders: converted once, cached by the file's content.

transformers reads a GGUF file (dequantizing its tensors to float32) but refuses to save what it
read, and reading takes minutes, so the weights are copied into a fresh model of the same
configuration and saved, with the tokenizer (and its chat template), under
`<cache>/<sha256 of the file>/`. The folder's `conversion.json` names the source file, its sha256
and the versions that converted it; a second request for the same bytes, under any name or path,
finds the folder and converts nothing. Folders appear whole (written aside, then renamed).

The default model, SmolLM2-135M-Instruct, is one (`builder.default_model`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from pathlib import Path

from filelock import FileLock

from builder.environments import cache_root
from builder.errors import InputError
from builder.files import write_text

GGUF_SUFFIX = ".gguf"
CONVERSION_FILE = "conversion.json"
HASHES_FILE = "file-hashes.json"  # {path: [size, mtime_ns, sha256]}


def cache_dir() -> Path:
    return Path(os.environ.get("BUILDER_MODEL_CACHE", cache_root() / "models"))


def gguf_file(path: Path) -> Path | None:
    """The GGUF file that `path` names: itself, or the only .gguf in a folder without config.json; None for
    anything else. A folder holding several is an error that lists them."""
    if path.is_file():
        return path if path.name.endswith(GGUF_SUFFIX) else None
    if not path.is_dir() or (path / "config.json").is_file():
        return None
    files = sorted(path.glob(f"*{GGUF_SUFFIX}"))
    if len(files) > 1:
        raise InputError(f"{path}: several GGUF files ({', '.join(f.name for f in files)}); name one")
    return files[0] if files else None


def file_sha256(path: Path) -> str:
    """The file's sha256, read once per content: remembered by path, size and modification time (as make does) in
    the cache, so that loading a large model again, or a suite's second entry of it, hashes nothing."""
    path = Path(path).resolve()
    stat = path.stat()
    stamp = [stat.st_size, stat.st_mtime_ns]
    known = cache_root() / HASHES_FILE
    known.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(known.with_suffix(".lock")):
        hashes = json.loads(known.read_text(encoding="utf-8")) if known.is_file() else {}
    if hashes.get(str(path), [None])[:2] == stamp:
        return hashes[str(path)][2]
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    with FileLock(known.with_suffix(".lock")):
        hashes = json.loads(known.read_text(encoding="utf-8")) if known.is_file() else {}
        hashes[str(path)] = [*stamp, h.hexdigest()]
        write_text(known, json.dumps(hashes))
    return h.hexdigest()


def converted(path: Path, cache: Path | None = None, log=lambda message: None) -> tuple[Path, dict]:
    """(transformers folder, conversion record) for the GGUF file `path`, converting it on first use."""
    digest = file_sha256(path)
    folder = (cache or cache_dir()) / digest
    record = folder / CONVERSION_FILE
    if record.is_file():
        return folder, json.loads(record.read_text(encoding="utf-8"))
    log(f"converting {path.name} to a transformers folder (once; cached in {folder})")
    folder.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=folder.parent))
    try:
        info = _convert(path, digest, building)
        try:
            building.rename(folder)
        except OSError:  # another process finished the same conversion first (between a check and the rename, too)
            if not record.is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return folder, info


def _convert(path: Path, digest: str, out: Path) -> dict:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    read = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    config = read.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the copy holds plain float32 weights
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(read.state_dict(), strict=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info = {"source_file": path.name, "source_sha256": digest, "source_bytes": path.stat().st_size,
            "transformers": transformers.__version__, "gguf": importlib.metadata.version("gguf"),
            "weights": "dequantized to float32 by transformers"}
    (out / CONVERSION_FILE).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return info
