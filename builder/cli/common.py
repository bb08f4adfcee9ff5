"""What every command group shares: the consoles, the one way a command fails, and the common options."""

from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console, ConsoleDimensions
from rich.rule import Rule
from typer.core import TyperGroup

from builder import languages as languages_mod
from builder.audits.run import script_audit
from builder.errors import BuilderError
from builder.flags import RUNS
from builder.llm.config import LLMSettings
from builder.next_steps import Step
from builder.records import Language
from builder.runner import StageRun, run_stage
from builder.selection import Scope
from builder.workspace.store import Workspace, default_dir, open_workspace

OFF_TERMINAL_WIDTH = 4096  # wide enough for any table the CLI prints: each then takes its own width
RULE_WIDTH = 80


class _Console(Console):
    """On a terminal, its width; in a log or a pipe, where rich would assume 80 columns (or the terminal
    on stdin) and cut a wide table's every column to "s… l… p…", wide enough that tables keep their
    natural width. Text soft-wraps either way; a rule stays 80 wide."""

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        return size if self.is_terminal else ConsoleDimensions(OFF_TERMINAL_WIDTH, size.height)

    def rule(self, title="", *, characters="─", style="rule.line", align="center") -> None:
        self.print(Rule(title, characters=characters, style=style, align=align),
                   width=None if self.is_terminal else RULE_WIDTH)


out = _Console(soft_wrap=True)
err = _Console(stderr=True, soft_wrap=True)

WorkspaceOpt = typer.Option(None, "--workspace", "-w", envvar="BUILDER_WORKSPACE", help="Workspace folder [default: ./workspace]")
LangOpt = typer.Option(..., "--lang", "-l", help="Language codes, comma-separated, or 'all'")
PropsOpt = typer.Option(None, "--properties", help="Only pairs of these properties: a file (one per line) or a comma list")
# The options of every LLM stage, in one place (`llm_options`), so that every stage takes all of them.
LLM_OPTIONS = (
    inspect.Parameter("model", inspect.Parameter.KEYWORD_ONLY, annotation=str | None, default=typer.Option(
        None, "--model", help="The model to ask, by the name the endpoint serves. Default: BUILDER_LLM_MODEL, else the one "
        "model the endpoint's /v1/models lists (gpt-4o-2024-08-06 on api.openai.com)")),
    inspect.Parameter("concurrency", inspect.Parameter.KEYWORD_ONLY, annotation=int | None, default=typer.Option(
        None, "--concurrency", min=1, help="Requests in flight at once, at most; lowered by itself for a server seen "
        "queueing. Default: BUILDER_LLM_CONCURRENCY, else 16")),
    inspect.Parameter("items_per_request", inspect.Parameter.KEYWORD_ONLY, annotation=int | None, default=typer.Option(
        None, "--items-per-request", min=1, help="Items asked in one request, at most (generate: concepts of one "
        "property, at least a pair); lowered by itself when replies drop items. Default: 10")),
    inspect.Parameter("offline", inspect.Parameter.KEYWORD_ONLY, annotation=bool, default=typer.Option(
        False, "--offline", help="Serve replies from the cache only; fail on a miss")),
    inspect.Parameter("dry_run", inspect.Parameter.KEYWORD_ONLY, annotation=bool, default=typer.Option(
        False, "--dry-run", help="Print requests, estimated tokens and cost; send nothing")),
    inspect.Parameter("batch", inspect.Parameter.KEYWORD_ONLY, annotation=bool, default=typer.Option(
        False, "--batch", help="Use the Batch API; a later run collects the results")),
)
TemplatesOpt = typer.Option(None, "--templates", help="Template folder with <lang>/<capability>.yaml [default: the shipped ones]")
JsonOpt = typer.Option(False, "--json", help="Machine-readable output")
ReaskOpt = typer.Option(False, "--reask-flagged", help=f"Ask the LLM again also for flagged items it gave up on in {RUNS} "
                        "runs already (each run asks the others again, with the reason)")


def fail(exc: Exception | str) -> NoReturn:
    """One red line on stderr and exit 1; the message is printed as text, never as markup."""
    err.print("[red]error:[/red] ", end="", highlight=False)
    err.print(str(exc), highlight=False, markup=False)
    raise typer.Exit(1)


class Commands(TyperGroup):
    """The command line's one error handler: a `BuilderError` (what a user can fix) ends as one red line and exit 1
    (`fail`); any other exception is a bug and goes on to typer, which shows its traceback, as it does for every
    error under `--debug`."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BuilderError as exc:
            if ctx.params.get("debug"):
                raise
            fail(exc)


DebugOpt = typer.Option(False, "--debug", help="Show the traceback of every error, not only of a bug")


def workspace_dir(workspace: Path | None) -> Path:
    return Path(workspace or default_dir())


def open_ws(workspace: Path | None) -> Workspace:
    return open_workspace(workspace_dir(workspace))


def langs(ws: Workspace, spec: str, exclude: tuple[str, ...] = ()) -> list[Language]:
    reg = languages_mod.registry(ws)
    return [reg[c] for c in languages_mod.resolve(spec, reg, exclude=exclude)]


def codes(spec: str | None) -> list[str] | None:
    """A comma list as given on the command line, or None when not given."""
    return [c.strip() for c in spec.split(",") if c.strip()] if spec else None


def llm_options(command):
    """Give a command the options every LLM stage shares (`LLM_OPTIONS`), as one argument `llm: LLMSettings`."""
    own = inspect.signature(command, eval_str=True)
    params = [p for name, p in own.parameters.items() if name != "llm"]

    @functools.wraps(command)
    def with_llm(*args, **kwargs):
        chosen = {p.name: kwargs.pop(p.name) for p in LLM_OPTIONS}
        return command(*args, llm=llm_settings(**chosen), **kwargs)

    with_llm.__signature__ = own.replace(parameters=[*params, *LLM_OPTIONS])
    with_llm.__annotations__ = {p.name: p.annotation for p in (*params, *LLM_OPTIONS)}
    return with_llm


def llm_settings(**chosen) -> LLMSettings:
    """The LLM settings from the environment, with the options given on the command line."""
    settings = LLMSettings.from_env(**chosen)
    if settings.source == "recording":
        err.print("[yellow]no OPENAI_API_KEY or OPENAI_BASE_URL: replaying the bundled recording[/yellow]")
    return settings


def llm_stage(ws: Workspace, name: str, properties: str | None, settings: LLMSettings, work) -> StageRun:
    """Run an LLM stage over the chosen scope (`work(client, progress, scope)`)."""
    scope = Scope.parse(ws, properties)
    return run_stage(ws, settings, name, lambda c, p: work(c, p, scope), err)


def show_steps(ws: Workspace, steps: list[Step]) -> None:
    """What to do next: each step's language and items, then its command on a line of its own, to copy as it is."""
    if steps:
        out.print("what to do next:", highlight=False)
    reg = languages_mod.registry(ws)
    for step in steps:
        out.print(f"  {languages_mod.label(step.lang, reg) + ': ' if step.lang else ''}{step.what}", markup=False,
                  highlight=False)
        out.print(f"    {step.command}", markup=False, highlight=False)


def report_stage(run: StageRun, what: str) -> None:
    """What a stage did; what it sent, retried, re-used and re-asked; in which mode and at what cost.

    A dry run shows the first requests in full (as JSON) and counts them all."""
    s, plan = run.stats, run.plan
    if plan is not None and plan.requests and not run.batch_id:
        cost = f"${plan.cost_usd:.4f}" if plan.cost_known else "unknown (data/prices.yaml has no price for the model at this endpoint)"
        mode = f"{plan.mode}{' (assumed: a dry run probes nothing)' if plan.mode_assumed else ''}"
        out.print(f"dry run: {plan.requests} request(s) in structured-output mode {mode}, ~{plan.tokens_in} tokens in, "
                  f"~{plan.tokens_out} tokens out, estimated cost {cost}; the first {len(plan.samples)}:")
        for body in plan.samples:
            out.print(json.dumps(body, ensure_ascii=False, indent=1), markup=False, highlight=False)
    if run.batch_id:
        out.print(f"submitted batch {run.batch_id} ({plan.requests} requests); run the same command again to collect")
    for bid, st in run.collected.items():
        out.print(f"batch {bid}: {st}", markup=False)
    out.print(f"{what}; requests sent {s.sent}, retries {s.retries}, cache hits {s.cache_hits}, re-asks {s.reasks}")
    if run.mode:
        out.print(f"structured outputs: {run.mode}")
    if s.sent or s.unpriced:
        unknown = "".join(f"; {n} call(s) of {model!r} at an unknown price (none for it at this endpoint in data/prices.yaml)"
                          for model, n in sorted(s.unpriced.items()))
        out.print(f"cost ${s.cost_usd:.4f}{unknown}", markup=False)


def flag_scripts(ws: Workspace, languages: list[Language] | None = None, properties: str | None = None) -> None:
    """Flag the words written outside their language's declared script (a Latin "bus" in Hindi) in these languages
    (all declared ones by default), clear the flags of those now right, and say how many are flagged."""
    reg = languages_mod.registry(ws)
    found = script_audit(ws, list(reg.values()) if languages is None else languages, scope=Scope.parse(ws, properties)).findings
    flagged = ", ".join(f"{languages_mod.label(code, reg)} {by['script']}"
                        for code, by in sorted(found.items()) if by.get("script"))
    if flagged:
        out.print(f"words not in the declared script, flagged for curators: {flagged} "
                  "(`builder status --flags --stage script`)", markup=False)
