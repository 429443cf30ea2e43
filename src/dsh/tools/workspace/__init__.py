"""Workspace tools: ``bash``, background jobs, ``read``/``write``/``edit``, ``glob``/``grep`` and
``todo_write``, under a bubblewrap sandbox and an approval policy. The plugin is
:mod:`dsh.tools.workspace.plugin` (short name ``workspace-tools``)."""

from dsh.tools.workspace.approval import ApprovalOutcome, ApprovalRequest, ApprovalService, Asker
from dsh.tools.workspace.plugin import Config, apply, inject, name
from dsh.tools.workspace.sandbox import MODES, SandboxMode

__all__ = [
    "MODES",
    "ApprovalOutcome",
    "ApprovalRequest",
    "ApprovalService",
    "Asker",
    "Config",
    "SandboxMode",
    "apply",
    "inject",
    "name",
]
