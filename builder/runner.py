"""Running an LLM stage from the CLI: build the client, show progress, handle dry runs and batches."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from builder.llm.cache import LLMCache
from builder.llm.client import LLMClient, Plan, Stats
from builder.llm.config import LLMSettings
from builder.progress import progress
from builder.workspace.store import Workspace

Progress = Callable[[str, int, int], None]  # (lang, done, total)


@dataclass
class StageRun:
    result: Any
    stats: Stats
    plan: Plan | None
    batch_id: str | None
    collected: dict[str, str]
    mode: str | None  # the structured-output mode the run's requests went out in (None: none went out)


def run_stage(
    ws: Workspace,
    settings: LLMSettings,
    stage: str,
    work: Callable[[LLMClient, Callable[[str, int, int], None]], Awaitable[Any]],
    console: Console | None = None,
) -> StageRun:
    console = console or Console(stderr=True)

    async def main() -> StageRun:
        client = LLMClient(LLMCache.of_workspace(ws), settings,
                           say=lambda message: console.print(message, style="yellow", markup=False, highlight=False))
        try:
            collected = await client.collect_batches() if settings.batch else {}
            with progress(console, disable=settings.dry_run) as show:
                result = await work(client, lambda lang, done, total: show(f"{stage} {lang}", done, total))
            batch_id = await client.submit_batch(stage) if settings.batch else None
            return StageRun(result, client.stats, client.plan if settings.dry_run or settings.batch else None, batch_id, collected,
                            client.mode)
        finally:
            await client.aclose()

    return asyncio.run(main())


def with_model(ws: Workspace, settings: LLMSettings) -> LLMSettings:
    """The settings with their model named (`LLMClient.named_model`), for a caller that shows or stores it
    before any request goes out (the demo's header, an evaluation's results)."""
    if settings.model is not None:
        return settings

    async def main() -> LLMSettings:
        client = LLMClient(LLMCache.of_workspace(ws), settings)
        try:
            await client.named_model()
            return client.settings
        finally:
            await client.aclose()

    return asyncio.run(main())

