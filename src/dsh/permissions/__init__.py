"""Permission rules in Claude Code's syntax (``Bash(npm test:*)``, ``Edit(//abs/**)``,
``mcp__server__tool``): parsing, printing and matching. Session approvals use them today; a
permissions setting will reuse them. See ``README.md``."""

from dsh.permissions.rules import (
    PATH_TOOLS,
    SHELL_META,
    Rule,
    RuleError,
    has_shell_meta,
    parse_rule,
)
from dsh.permissions.scopes import session_scopes

__all__ = ["PATH_TOOLS", "SHELL_META", "Rule", "RuleError", "has_shell_meta", "parse_rule", "session_scopes"]
