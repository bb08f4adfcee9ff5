"""Label Studio review: server lifecycle, labeling configs, tasks, push, and pulls parsed into typed records
for the review owner (`builder.reviews`), which records decisions and computes agreement."""

# The package's public names are its modules (imported by name, e.g. `from annotation import autoreview`).
__all__ = [
    "autoreview", "configs", "instructions", "review", "server", "tasks"
]
