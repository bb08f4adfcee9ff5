"""`builder llm …`: the LLM cache as a recording, and the bundled demo recording.

Re-recording runs the demo, whose module (seconds to import) is loaded only by `record-demo`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from builder.cli.common import WorkspaceOpt, err, open_ws, out
from builder.llm.cache import LLMCache
from builder.llm.recording import export_recording
from builder.paths import sample_dir

llm_app = typer.Typer(help="LLM calls, cache and recordings.", no_args_is_help=True)


@llm_app.command("export-recording")
def export_recording_cmd(
    path: Path,
    cache: list[Path] | None = typer.Option(None, "--cache", exists=True, dir_okay=False,
                                               help="An evaluation's LLM cache file (OUT/llm-cache.sqlite) instead of the workspace's; repeatable"),
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Write the cached replies of the workspace (or of evaluation caches) as a recording that can be replayed offline."""
    caches = [LLMCache.open(p) for p in cache] if cache else [LLMCache.of_workspace(open_ws(workspace))]
    try:
        n = export_recording(path, *caches)
    finally:
        for c in caches:
            c.close()
    out.print(f"wrote {n} replies to {path}")


@llm_app.command("record-demo")
def record_demo_cmd(
    path: Path = typer.Option(None, help="Where to write [default: the sample's demo/recording.jsonl]"),
) -> None:
    """Re-record the bundled demo replies from the sample's answer files (maintainers)."""
    from builder.demo_recording import record_demo

    target = path or sample_dir() / "demo" / "recording.jsonl"
    n = record_demo(target, err)
    out.print(f"wrote {n} replies to {target}")
