"""Readable one-glance views of tool calls for ``dsh sessions show``.

``bash`` shows ``$ command`` and, for its result, a few lines of output plus the exit code;
``edit`` shows a small diff; ``write``/``read``/``glob``/``grep`` name their path or pattern.
Anything else (or arguments that do not parse) falls back to the raw JSON. Callers escape
terminal control characters before printing.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

__all__ = ["render_call", "render_result"]

_RESULT_LINES = 6
_DIFF_LINES = 20
_MARKER = re.compile(r"^\[(exit code|timed out|killed by signal|sandbox|output truncated)[^\n]*\]$")


def _args(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    return None


def render_call(name: str, raw: Any) -> str | None:
    """A readable call line (multi-line for ``edit``), or ``None`` for the raw fallback."""
    args = _args(raw)
    if args is None:
        return None
    if name == "bash" and isinstance(args.get("command"), str):
        background = " &  (background)" if args.get("run_in_background") else ""
        where = f"  (in {args['workdir']})" if isinstance(args.get("workdir"), str) else ""
        return f"bash  $ {args['command']}{background}{where}"
    if name == "edit" and isinstance(args.get("old_string"), str) and isinstance(args.get("new_string"), str):
        diff = list(
            difflib.unified_diff(
                args["old_string"].splitlines(), args["new_string"].splitlines(), lineterm="", n=1
            )
        )[2:]
        if len(diff) > _DIFF_LINES:
            diff = [*diff[:_DIFF_LINES], f"… ({len(diff) - _DIFF_LINES} more diff lines)"]
        every = " (all matches)" if args.get("replace_all") else ""
        return f"edit  {args.get('file_path')}{every}\n" + "\n".join(diff)
    if name == "write" and isinstance(args.get("content"), str):
        lines = args["content"].count("\n") + (0 if args["content"].endswith("\n") else 1)
        return f"write {args.get('file_path')} ({lines} lines)"
    if name == "read" and "file_path" in args:
        span = f" from line {args['offset']}" if args.get("offset") else ""
        return f"read  {args['file_path']}{span}"
    if name in ("glob", "grep") and "pattern" in args:
        where = f" in {args['path']}" if args.get("path") else ""
        include = f" ({args['include']})" if args.get("include") else ""
        return f"{name}  {args['pattern']}{include}{where}"
    return None


def render_result(name: str | None, text: str) -> str:
    """The first (``bash``: last) few lines of a result, with bash's markers kept."""
    lines = text.rstrip("\n").splitlines()
    if name == "bash":
        markers = [line for line in lines if _MARKER.match(line)]
        body = [line for line in lines if not _MARKER.match(line)]
        shown = body[-_RESULT_LINES:]
        if len(body) > len(shown):
            shown = [f"… ({len(body) - len(shown)} earlier lines)", *shown]
        if not any(m.startswith("[exit code") for m in markers):
            markers.append("[exit code: 0]" if not any("timed out" in m or "killed" in m for m in markers) else "")
        return "\n".join([*shown, *[m for m in markers if m]])
    if len(lines) > _RESULT_LINES:
        return "\n".join([*lines[:_RESULT_LINES], f"… ({len(lines) - _RESULT_LINES} more lines)"])
    return "\n".join(lines)
