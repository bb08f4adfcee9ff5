"""The workspace: an embedded SQL database that is the single source of truth, with lineage."""

from builder.workspace.store import Workspace, WorkspaceError, init_workspace, open_workspace

__all__ = ["Workspace", "WorkspaceError", "open_workspace", "init_workspace"]
