"""Construction side of the platform: workspace, seeds, languages, LLM client and the XCOMPS stages."""

__version__ = "0.1.0"

# The package's public names are its modules (imported by name, e.g. `from builder import agreement`).
__all__ = [
    "agreement", "audits", "cli", "default_model", "environments", "files", "flags", "generate", "integrity",
    "languages", "llm", "m2c", "paths", "prompts", "records", "releases", "reviews", "runner", "seeds",
    "progress", "selection", "status", "textdiff", "translate", "version", "workspace"
]
