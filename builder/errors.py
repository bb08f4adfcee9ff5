"""The project's one error type: what a user can fix.

A `BuilderError` is a missing or damaged file, a bad value, a server that does not answer: its message
says what is wrong and what to do, and the command line shows it as one line. Any other exception is
a bug and shows its traceback (`builder --debug` shows it for a `BuilderError` too). Each library
keeps its own subclasses where callers tell failures apart (`WorkspaceError`, `ReleaseStoreError`, `LLMError`, …).
"""

from __future__ import annotations


class BuilderError(Exception):
    """What a user can fix; the message is one sentence naming the file, line or field and what to do."""


class InputError(BuilderError, ValueError):
    """A value a user gave refused (a field of a file, an option, a name): one sentence naming where and why."""
