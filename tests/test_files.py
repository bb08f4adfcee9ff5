"""`builder.files.atomic_write`, the one way a file is written in place: writers at once never collide, a reader
never sees half a file, and nothing of a failed write is left."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from builder.files import atomic_write, write_bytes, write_text


def test_writers_at_once_each_replace_the_file_whole_and_a_reader_never_sees_half_of_one(tmp_path):
    path = tmp_path / "results.parquet"
    contents = [bytes([n]) * (256 * 1024 + n) for n in range(8)]  # each several writes' worth of bytes
    write_bytes(path, contents[0])
    together = threading.Barrier(len(contents), timeout=60)
    done = threading.Event()
    failures: list[BaseException] = []
    torn: list[int] = []

    def writer(data: bytes) -> None:
        try:
            for _ in range(25):
                together.wait()
                write_bytes(path, data)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)

    def reader() -> None:
        while not done.is_set():
            data = path.read_bytes()
            if data not in contents:
                torn.append(len(data))

    threads = [threading.Thread(target=writer, args=(data,)) for data in contents]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    done.set()
    watcher.join()
    assert not failures and not torn, (failures[:3], torn[:3])
    assert path.read_bytes() in contents and os.listdir(tmp_path) == ["results.parquet"]  # no temporary file left


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "report.md"
    write_text(path, "the old report\n")

    def half_then_fail(tmp):
        tmp.write_text("half a rep")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, half_then_fail)
    assert path.read_text() == "the old report\n" and os.listdir(tmp_path) == ["report.md"]


def test_a_written_file_has_the_usual_permissions_and_a_secret_its_own(tmp_path):
    umask = os.umask(0o022)
    try:
        write_text(tmp_path / "summary.json", "{}")
        write_text(tmp_path / "token", "s3cret", mode=0o600)
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "summary.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "token").stat().st_mode) == 0o600
