"""Shared pieces of the workspace tools: the workspace of a call, argument checks, display paths,
and (re-exported from :mod:`.spill`) the spill store that keeps full outputs the model only sees
the tail or head of.

Why one module: every tool needs the same "which folder is this session's workspace" answer and
the same one-line argument errors, and they must agree exactly (the sandbox checks paths against
the same root the tools resolve them from).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from dsh.tools.types import ContentBlock, ToolCall, ToolError
from dsh.tools.workspace.spill import SpillStore

__all__ = [
    "SpillStore",
    "bool_arg",
    "display_path",
    "number_arg",
    "resolve_path",
    "session_id",
    "str_arg",
    "text",
    "workspace_root",
]


_RESOLVE_TRIES: Final = 5


def text(value: str) -> list[ContentBlock]:
    return [{"type": "text", "text": value}]


def _args(args: Any) -> Mapping[str, Any]:
    if not isinstance(args, Mapping):
        raise ToolError(f"arguments must be a JSON object, got {type(args).__name__}")
    return args


def str_arg(args: Any, key: str, *, required: bool = True, allow_empty: bool = True) -> str | None:
    """A string argument; wrong types and NUL bytes are model-visible errors, never crashes."""
    value = _args(args).get(key)
    if value is None:
        if required:
            raise ToolError(f"missing required argument {key} (a string)")
        return None
    if not isinstance(value, str):
        raise ToolError(f"invalid {key}: expected a string, got {type(value).__name__}")
    if "\x00" in value and key in ("file_path", "path", "workdir", "include"):
        raise ToolError(f"invalid {key}: contains a NUL byte")
    if not allow_empty and not value.strip():
        raise ToolError(f"invalid {key}: expected a non-empty string")
    return value


def number_arg(args: Any, key: str, *, minimum: float = 0) -> float | None:
    value = _args(args).get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ToolError(f"invalid {key}: expected a number, got {type(value).__name__}")
    if value < minimum:
        raise ToolError(f"invalid {key}: expected a number >= {minimum:g}, got {value}")
    return float(value)


def bool_arg(args: Any, key: str) -> bool:
    value = _args(args).get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ToolError(f"invalid {key}: expected a boolean, got {type(value).__name__}")
    return value


def session_id(call: ToolCall) -> str:
    agent = call.agent
    session = getattr(agent, "session", None)
    return str(getattr(session, "id", None) or "no-session")


def workspace_root(call: ToolCall) -> Path:
    """The session's workspace: its header's ``cwd`` (resolved through symlinks), else the
    process cwd. The sandbox and every path argument use this same answer."""
    session = getattr(call.agent, "session", None)
    header = getattr(session, "header", None)
    cwd = header.get("cwd") if isinstance(header, Mapping) else None
    return Path(os.path.realpath(cwd if isinstance(cwd, str) and cwd else os.getcwd()))


def resolve_path(root: Path, value: str) -> Path:
    """``value`` resolved against ``root``, with ``..`` and symlinks resolved (so the sandbox
    checks the file the OS would really touch)."""
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        path = root / path
    # realpath raises when a link is swapped for a folder between its lstat and its readlink
    # (EINVAL): a process racing the tool. Look again; a path that keeps changing is refused.
    for _ in range(_RESOLVE_TRIES - 1):
        try:
            return Path(os.path.realpath(path))
        except OSError:
            continue
    try:
        return Path(os.path.realpath(path))
    except OSError:
        raise ToolError(f'cannot resolve "{value}": it kept changing while it was being resolved — retry') from None


def display_path(root: Path, path: Path) -> str:
    """Workspace-relative when inside the workspace, else absolute."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return str(path)
    return str(rel) if str(rel) != "." else "."
