"""``read``, ``write`` and ``edit``, with read-before-write and the sandbox's write policy.

Read-before-write: ``edit``, and ``write`` over an existing file, are refused unless this session
read the file and it has not changed on disk since (size and mtime as read). Writes obey the
sandbox mode in-process: nothing under ``read-only``, only the workspace and the session's temp
dir under ``workspace-write``; paths are resolved through ``..`` and symlinks first. Under
``danger-full-access`` a write outside the workspace asks for approval.

``read`` returns the reference's envelope: ``<path>``, ``<type>file</type>``, ``<content>`` with
``N: line`` rows and a footer saying where the file ends or how to continue. Binary (NUL bytes or
not UTF-8) and oversized files are refused with a message saying what to do instead.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Final

from dsh.tools.types import Tool, ToolCall, ToolError, define_tool
from dsh.tools.workspace._common import (
    bool_arg,
    display_path,
    number_arg,
    resolve_path,
    str_arg,
    text,
    workspace_root,
)
from dsh.tools.workspace.config import Shared
from dsh.tools.workspace.ledger import ReadLedger

__all__ = ["ReadLedger", "fs_tools"]

DEFAULT_LIMIT: Final = 2000
LINE_CAP: Final = 2000
OUTPUT_CAP: Final = 50_000


def _is_binary(sample: bytes) -> bool:
    return b"\x00" in sample


def _atomic_write(path: Path, content: str) -> None:
    """Write via a temp file and rename, keeping the file's mode, so a crash never leaves half a
    file behind."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".dsh-tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(content)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fs_tools(shared: Shared) -> list[Tool]:
    config = shared.config

    def read(args: Any, call: ToolCall) -> list[Any]:
        file_path = str_arg(args, "file_path", allow_empty=False)
        offset = number_arg(args, "offset", minimum=1)
        limit = number_arg(args, "limit", minimum=1)
        assert file_path is not None
        root = workspace_root(call)
        path = resolve_path(root, file_path)
        shown = display_path(root, path)
        if not path.exists():
            raise ToolError(f'cannot read "{shown}": not found')
        if path.is_dir():
            raise ToolError(f'cannot read "{shown}": it is a directory (use glob to list files)')
        size = path.stat().st_size
        if size > config.max_read_bytes:
            raise ToolError(
                f'cannot read "{shown}": file is too large ({size} bytes; the limit is '
                f"{config.max_read_bytes}) — use grep, or bash with head/sed, to read parts of it"
            )
        data = path.read_bytes()
        if _is_binary(data[:8192]):
            raise ToolError(f'cannot read "{shown}": binary file (not UTF-8 text)')
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f'cannot read "{shown}": binary file (not UTF-8 text)') from None
        shared.ledger.record(shared.session(call), path)
        lines = content.splitlines()
        total = len(lines)
        first = int(offset or 1)
        count = int(limit or DEFAULT_LIMIT)
        if total and first > total:
            raise ToolError(f'offset {first} is out of range for "{shown}" ({total} lines)')
        rows: list[str] = []
        used = 0
        last = first - 1
        capped = False
        for number in range(first, min(total, first + count - 1) + 1):
            line = lines[number - 1]
            if len(line) > LINE_CAP:
                line = line[:LINE_CAP] + f"... (line truncated to {LINE_CAP} chars)"
            row = f"{number}: {line}"
            if used + len(row) + 1 > OUTPUT_CAP and rows:
                capped = True
                break
            rows.append(row)
            used += len(row) + 1
            last = number
        if capped:
            footer = f"(Output capped. Showing lines {first}-{last}. Use offset={last + 1} to continue.)"
        elif last < total:
            footer = f"(Showing lines {first}-{last} of {total}. Use offset={last + 1} to continue.)"
        else:
            footer = f"(End of file - total {total} lines)"
        body = "\n".join(rows)
        return text(
            f"<path>{shown}</path>\n<type>file</type>\n<content>\n{body}\n\n{footer}\n</content>"
        )

    async def _writable(call: ToolCall, file_path: str, verb: str) -> tuple[Path, str]:
        root = workspace_root(call)
        path = resolve_path(root, file_path)
        shown = display_path(root, path)
        policy = shared.policy(call)
        denial = policy.write_denial(path, shared.session(call))
        if denial is not None:
            raise ToolError(denial, code="SANDBOX_DENIED")
        inside = path == root or root in path.parents
        if not inside and not policy.confined:
            refusal = await shared.approval.check(
                call, f'{verb}s "{path}", outside the workspace {root}', subject=str(path)
            )
            if refusal is not None:
                raise ToolError(refusal, code="APPROVAL")
        if path.is_dir():
            raise ToolError(f'cannot {verb} "{shown}": it is a directory')
        return path, shown

    async def write(args: Any, call: ToolCall) -> list[Any]:
        file_path = str_arg(args, "file_path", allow_empty=False)
        content = str_arg(args, "content")
        assert file_path is not None and content is not None
        try:
            size = len(content.encode("utf-8"))
        except UnicodeEncodeError:
            raise ToolError("content is not valid Unicode text (it contains a lone surrogate)") from None
        if size > config.max_write_bytes:
            raise ToolError(
                f"content is too large ({size} bytes; the limit is {config.max_write_bytes}) — "
                "write the file in smaller parts, or generate it with bash"
            )
        path, shown = await _writable(call, file_path, "write")
        session = shared.session(call)
        existed = path.exists()
        if existed:
            shared.ledger.check(session, path, "write", shown)
        elif not path.parent.is_dir():
            path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, content)
        shared.ledger.record(session, path)
        lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
        verb = "Overwrote" if existed else "Created"
        return text(f"{verb} {shown} ({lines} lines, {size} bytes)")

    async def edit(args: Any, call: ToolCall) -> list[Any]:
        file_path = str_arg(args, "file_path", allow_empty=False)
        old = _args_str(args, "old_string")
        new = _args_str(args, "new_string")
        replace_all = bool_arg(args, "replace_all")
        assert file_path is not None
        if not old:
            raise ToolError("old_string must be a non-empty string")
        if old == new:
            raise ToolError("old_string and new_string must differ")
        path, shown = await _writable(call, file_path, "edit")
        if not path.exists():
            raise ToolError(f'cannot edit "{shown}": not found')
        session = shared.session(call)
        shared.ledger.check(session, path, "edit", shown)
        try:
            content = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f'cannot edit "{shown}": binary file (not UTF-8 text)') from None
        count = content.count(old)
        if count == 0:
            raise ToolError(
                f'old_string not found in "{shown}" — copy the exact text from a fresh read '
                "(whitespace and indentation included), then retry"
            )
        if count > 1 and not replace_all:
            raise ToolError(
                f'old_string appears {count} times in "{shown}" — include more surrounding lines '
                "to make it unique, or set replace_all: true"
            )
        updated = content.replace(old, new) if replace_all else content.replace(old, new, 1)
        _atomic_write(path, updated)
        shared.ledger.record(session, path)
        n = count if replace_all else 1
        return text(f"Edited {shown}: replaced {n} occurrence{'s' if n != 1 else ''}")

    return [
        define_tool(
            name="read",
            description="Read a UTF-8 text file and return line-numbered content.",
            parameters={
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "Path to read, resolved by the filesystem backend."},
                    "offset": {"type": "number", "description": "1-based first line to return. Defaults to 1."},
                    "limit": {"type": "number", "description": "Maximum number of lines to return. Defaults to 2000."},
                },
                "required": ["file_path"],
            },
            execute=read,
        ),
        define_tool(
            name="write",
            description="Create or fully replace a UTF-8 text file.",
            parameters={
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "Path to write, resolved by the filesystem backend."},
                    "content": {"type": "string", "description": "Full UTF-8 text content to write."},
                },
                "required": ["file_path", "content"],
            },
            execute=write,
        ),
        define_tool(
            name="edit",
            description="Edit an existing UTF-8 text file by replacing literal text.",
            parameters={
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "Path to edit, resolved by the filesystem backend."},
                    "old_string": {"type": "string", "description": "Literal text to replace. Must match exactly."},
                    "new_string": {"type": "string", "description": "Literal replacement text. Use an empty string to delete the match."},
                    "replace_all": {
                        "type": "boolean",
                        "description": "Replace all matches. Defaults to false; when false, old_string must appear exactly once.",
                    },
                },
                "required": ["file_path", "old_string", "new_string"],
            },
            execute=edit,
        ),
    ]


def _args_str(args: Any, key: str) -> str:
    value = str_arg(args, key)
    return value or ""
