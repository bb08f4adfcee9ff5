"""Writing a file in place so that a reader never sees half of it and two writers never collide.

Every file the project rewrites where others may read it (results, reports and their figures, the records of
a workspace's database and of a running server, lock files, recordings) goes through `atomic_write`. The
content goes to a temporary file beside the target, under a name no other writer uses, and is then renamed
over the target in one step: a reader sees the old file or the new one, and of two writers each renames a
whole file of its own (the last one stays). Only standard-library imports: `builder.environments` uses it
before the project's dependencies are installed.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: Path | str, write: Callable[[Path], object], *, mode: int = 0o666) -> None:
    """`write(tmp)` fills a temporary file beside `path` (the same file system), which then replaces `path`.

    The temporary name is made unique with O_EXCL, like `tempfile.mkstemp`, but the file is created with
    `mode` less the umask (by default the usual permissions, not mkstemp's 0600, so a team's results stay
    readable to it; 0o600 for a secret, which is then never readable to others, not even for a moment).
    A failed `write` leaves no temporary file behind and `path` as it was.
    """
    path = Path(path)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
            break
        except FileExistsError:
            continue
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: Path | str, text: str, *, mode: int = 0o666) -> None:
    """`Path.write_text` (UTF-8), atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), mode=mode)


def write_bytes(path: Path | str, data: bytes) -> None:
    """`Path.write_bytes`, atomically."""
    atomic_write(path, lambda tmp: tmp.write_bytes(data))
