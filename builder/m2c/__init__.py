"""M2C templates: morphology-aware placeholders rendered into tests, in many languages."""

from builder.m2c.engine import Fill, Template
from builder.m2c.errors import TemplateError, Where
from builder.m2c.functions import Forms, register_function
from builder.m2c.language import Grammar, load_language
from builder.m2c.nodes import Lexeme

__all__ = ["Fill", "Forms", "Grammar", "Lexeme", "Template", "TemplateError", "Where", "load_language", "register_function"]
