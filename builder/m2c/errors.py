"""Template errors that say where: file, line and column of the offending key."""

from __future__ import annotations

from dataclasses import dataclass

from builder.errors import BuilderError


@dataclass(frozen=True)
class Where:
    """A position in a template: `file` may be None for templates built in Python (line/col are 1-based)."""

    file: str | None
    line: int
    col: int
    field: str | None = None

    def __str__(self) -> str:
        head = f"{self.file}:{self.line}:{self.col}" if self.file else f"line {self.line}, column {self.col}"
        return f"{head} ({self.field})" if self.field else head


class TemplateError(BuilderError, ValueError):
    """A template that cannot be rendered correctly; `where` is the key's position when known."""

    def __init__(self, message: str, where: Where | None = None, template: str | None = None) -> None:
        self.message = message
        self.where = where
        self.template = template
        prefix = str(where) + ": " if where else ""
        name = f"template {template}: " if template else ""
        super().__init__(f"{prefix}{name}{message}")


class LanguageDataError(BuilderError, ValueError):
    """A language file in data/m2c/languages that is inconsistent."""
