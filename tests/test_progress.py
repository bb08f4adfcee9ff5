"""Progress in a log: a line per tenth of each task, none on a disabled run, bars (not lines) on a terminal."""

import io

from rich.console import Console

from builder.progress import progress


def shown(console: Console, calls) -> list[str]:
    with progress(console) as show:
        for call in calls:
            show(*call)
    return console.file.getvalue().splitlines()


def test_a_log_gets_a_line_as_each_task_passes_a_tenth():
    lines = shown(Console(file=io.StringIO(), width=200), [("m2c", d, 95) for d in range(96)] + [("meta", 0, 3), ("meta", 3, 3)])
    m2c = [line for line in lines if line.startswith("m2c:")]
    assert [line.split(" after ")[0] for line in m2c] == [f"m2c: {d}/95 ({p}%)" for d, p in
                                                         zip([0, 10, 19, 29, 38, 48, 57, 67, 76, 86, 95], range(0, 101, 10))]
    assert [line.split(" after ")[0] for line in lines[len(m2c):]] == ["meta: 0/3 (0%)", "meta: 3/3 (100%)"]


def test_a_task_with_nothing_to_do_is_shown_done_once():
    lines = shown(Console(file=io.StringIO(), width=200), [("translate de", 0, 0), ("translate de", 0, 0)])
    assert [line.split(" after ")[0] for line in lines] == ["translate de: 0/0 (100%)"]


def test_a_disabled_run_shows_nothing():
    console = Console(file=io.StringIO(), width=200)
    with progress(console, disable=True) as show:
        show("translate de", 1, 2)
    assert console.file.getvalue() == ""


def test_a_terminal_gets_bars_not_lines():
    console = Console(file=io.StringIO(), width=200, force_terminal=True)
    with progress(console) as show:
        show("direct", 5, 10)
    text = console.file.getvalue()
    assert "5/10" in text and "(50%)" not in text and "after" not in text
