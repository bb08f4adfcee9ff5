"""`python -m builder.cli`: the same command line as the `builder` script."""

from builder.cli import app

app()
