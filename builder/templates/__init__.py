"""M2C templates: morphology-aware placeholders rendered into tests, in many languages."""

from builder.templates.engine import Fill, Lexeme, Template
from builder.templates.errors import TemplateError, Where
from builder.templates.functions import Forms, register_function
from builder.templates.language import Language, load_language

__all__ = ["Fill", "Forms", "Language", "Lexeme", "Template", "TemplateError", "Where", "load_language", "register_function"]
