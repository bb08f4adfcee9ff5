"""Test tooling, kept apart from the platform: no pipeline stage imports it.

`standin` is the OpenAI-compatible stand-in server the tests and benchmarks talk to over real HTTP (and that
`builder llm record-demo` answers the demo from, to re-record its replies); `parity` compares our sentence scores
with lm-evaluation-harness's and minicons', which `reference_scorers` computes inside their own environment.
"""

# The package's public names are its modules (imported by name, e.g. `from builder.testing import standin`).
__all__ = ["parity", "reference_scorers", "standin"]
