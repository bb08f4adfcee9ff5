"""The `builder` command line: the application shell over the `builder`, `annotation` and `evaluate` libraries.

One module per command group; `common` holds the consoles, the one error handler (`Commands`) and the shared options.
No library module imports this package.
"""

import typer

from builder.cli import stages
from builder.cli.common import Commands, DebugOpt
from builder.cli.evaluation import eval_app
from builder.cli.languages import language_app
from builder.cli.llm import llm_app
from builder.cli.m2c import lexicon_app, templates_app
from builder.cli.releases import publish, releases_app
from builder.cli.review import review_app
from builder.cli.seeds import seeds_app

__all__ = ["app"]

app = typer.Typer(help="Build, review and release multilingual benchmarks with a human-LLM loop.", no_args_is_help=True,
                  cls=Commands)


@app.callback()
def main(debug: bool = DebugOpt) -> None:
    """`--debug`, read by `Commands` when an error reaches it."""


for command in (stages.init, stages.status, stages.translate, stages.accept, stages.generate, stages.audit, stages.demo, publish):
    app.command()(command)
for group, name in ((review_app, "review"), (language_app, "language"), (seeds_app, "seeds"), (llm_app, "llm"),
                    (lexicon_app, "lexicon"), (templates_app, "templates"), (eval_app, "eval"), (releases_app, "releases")):
    app.add_typer(group, name=name)
