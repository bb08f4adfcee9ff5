"""Progress of long work: bars on a terminal; in a log (no terminal) a plain line as each task passes a tenth.

A bar that rich cannot draw (output piped to a file, CI, `nohup`) shows nothing until the work ends, so an
hour-long evaluation would leave its log silent; the lines keep it readable there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich import progress as bars
from rich.console import Console

Show = Callable[[str, int, int], None]  # (task, done, total); a total of 0 is a task with nothing to do: done
STEPS = 10  # lines per task in a log


@contextmanager
def progress(console: Console, disable: bool = False) -> Iterator[Show]:
    if disable:
        yield lambda task, done, total: None
    elif console.is_terminal:
        with bars.Progress(bars.TextColumn("[bold]{task.description}"), bars.BarColumn(), bars.MofNCompleteColumn(),
                           bars.TimeElapsedColumn(), console=console) as bar:
            ids: dict[str, bars.TaskID] = {}

            def show(task: str, done: int, total: int) -> None:
                if task not in ids:
                    ids[task] = bar.add_task(task, total=max(total, 1))
                bar.update(ids[task], completed=done if total else 1, total=max(total, 1))

            yield show
    else:
        yield _lines(console)


def _lines(console: Console) -> Show:
    started, shown = time.monotonic(), {}

    def show(task: str, done: int, total: int) -> None:
        step = STEPS if not total else done * STEPS // total
        if step > shown.get(task, -1):
            shown[task] = step
            elapsed = int(time.monotonic() - started)
            console.print(f"{task}: {done if total else 0}/{total} ({100 * step // STEPS}%) after {elapsed // 60}m{elapsed % 60:02d}s",
                          highlight=False, markup=False)

    return show
