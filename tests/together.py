"""Work started in several threads at the same moment: the races of team use, run for real."""

from __future__ import annotations

import threading


def at_once(workers: int, work) -> list[BaseException]:
    """`work(n)` in `workers` threads released together; the exceptions they raised."""
    together = threading.Barrier(workers, timeout=60)
    failures: list[BaseException] = []

    def run(n: int) -> None:
        together.wait()
        try:
            work(n)
        except Exception as exc:  # noqa: BLE001 - every failure is reported by the caller's assertion
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return failures
