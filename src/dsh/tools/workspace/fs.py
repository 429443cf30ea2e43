"""``read``, ``write`` and ``edit``, with read-before-write and the sandbox's write policy.

Read-before-write: ``edit``, and ``write`` over an existing file, are refused unless this session
read the file and it has not changed on disk since (size and mtime as read). Writes obey the
sandbox mode in-process: nothing under ``read-only``, only the workspace and the session's temp
dir under ``workspace-write``; paths are resolved through ``..`` and symlinks first. In the
confined modes a write into the repository's git metadata
(:func:`~dsh.tools.workspace.protect.protected_paths`) asks for approval, as a write outside the
workspace does under ``danger-full-access``. dsh's own ``/proc`` files are refused outright.

After the checks, the target is reached by :mod:`._beneath`'s walk, which follows no link: a
folder swapped for a symlink after the check is refused, never followed, and a write's temp file
is made (and renamed over the target) inside the very folder that was opened, then removed on any
failure. Only regular files are read, edited or replaced (devices, FIFOs and sockets are refused,
checked on the descriptor); reads are bounded by ``maxReadBytes`` whatever the file's size claims,
and the file I/O runs off the event loop.

``read`` returns the reference's envelope: ``<path>``, ``<type>file</type>``, ``<content>`` with
``N: line`` rows and a footer saying where the file ends or how to continue. Binary (NUL bytes or
not UTF-8) and oversized files are refused with a message saying what to do instead.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any, Final

from dsh.tools.types import Tool, ToolCall, ToolError, define_tool
from dsh.tools.workspace._beneath import (
    NOT_REGULAR,
    RACE,
    anchor_for,
    check_not_own_process,
    kind_of,
    off_loop,
    open_folder,
    open_regular,
    read_bounded,
    replace_in,
)
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
from dsh.tools.workspace.protect import is_protected

__all__ = ["ReadLedger", "fs_tools"]

DEFAULT_LIMIT: Final = 2000
LINE_CAP: Final = 2000
OUTPUT_CAP: Final = 50_000
GIT_REFUSAL: Final = (
    '{refusal} — "{shown}" is git metadata, read-only in {mode} mode unless approved (git runs '
    "its hooks and config outside the sandbox)"
)


def _is_binary(sample: bytes) -> bool:
    return b"\x00" in sample


def _too_large(verb: str, shown: str, limit: int, size: int | None) -> ToolError:
    # The size a file claims (0 for /proc files) is not trusted: reading past the limit says so.
    amount = f"{size} bytes; the limit is {limit}" if size is not None else f"more than the limit of {limit} bytes"
    return ToolError(
        f'cannot {verb} "{shown}": file is too large ({amount}) — use grep, or bash with head/sed, '
        "to read parts of it"
    )


def _split(root: Path, path: Path) -> tuple[Path, tuple[str, ...], str]:
    """The walk's anchor, the folders below it, and the file's name; a folder target is refused."""
    anchor = anchor_for(path, root)
    parts = path.relative_to(anchor).parts
    if not parts:
        raise IsADirectoryError(errno.EISDIR, "is a directory")
    return anchor, parts[:-1], parts[-1]


def _os_error(verb: str, shown: str, exc: OSError, directory: str) -> ToolError:
    if isinstance(exc, NotADirectoryError) and verb == "write":
        return ToolError(f'cannot write "{shown}": part of its path is a file, not a folder')
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return ToolError(f'cannot {verb} "{shown}": not found')
    if isinstance(exc, IsADirectoryError):
        return ToolError(f'cannot {verb} "{shown}": it is a directory{directory}')
    return ToolError(f'cannot {verb} "{shown}": {exc.strerror or exc}')


def fs_tools(shared: Shared) -> list[Tool]:
    config = shared.config
    ledger = shared.ledger

    def load(root: Path, path: Path, shown: str) -> tuple[bytes, os.stat_result]:
        """The bytes of the regular file at ``path``, bounded by ``maxReadBytes`` (worker thread)."""
        limit = config.max_read_bytes
        try:
            anchor, folders, name = _split(root, path)
            with open_folder(anchor, folders, verb="read", shown=shown) as dir_fd:
                fd, st = open_regular(dir_fd, name, verb="read", shown=shown)
                try:
                    if st.st_size > limit:
                        raise _too_large("read", shown, limit, st.st_size)
                    data = read_bounded(fd, limit)
                finally:
                    os.close(fd)
        except OSError as exc:
            raise _os_error("read", shown, exc, " (use glob to list files)") from None
        if data is None:
            raise _too_large("read", shown, limit, None)
        return data, st

    async def read(args: Any, call: ToolCall) -> list[Any]:
        file_path = str_arg(args, "file_path", allow_empty=False)
        offset = number_arg(args, "offset", minimum=1)
        limit = number_arg(args, "limit", minimum=1)
        assert file_path is not None
        root = workspace_root(call)
        path = resolve_path(root, file_path)
        shown = display_path(root, path)
        check_not_own_process(path, "read", shown)
        data, st = await off_loop(lambda: load(root, path, shown))
        if _is_binary(data[:8192]):
            raise ToolError(f'cannot read "{shown}": binary file (not UTF-8 text)')
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f'cannot read "{shown}": binary file (not UTF-8 text)') from None
        ledger.record(shared.session(call), path, st)
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

    async def _writable(call: ToolCall, file_path: str, verb: str) -> tuple[Path, Path, str]:
        """The resolved target (with the workspace and its display form) once every policy check
        passed: own process files, the sandbox mode, git metadata, outside the workspace."""
        root = workspace_root(call)
        path = resolve_path(root, file_path)
        shown = display_path(root, path)
        check_not_own_process(path, verb, shown)
        policy = shared.policy(call)
        denial = policy.write_denial(path, shared.session(call))
        if denial is not None:
            raise ToolError(denial, code="SANDBOX_DENIED")
        if policy.confined and is_protected(path, root):
            refusal = await shared.approval.check(
                call, f'{verb}s "{path}" in the git metadata of the workspace {root}'
            )
            if refusal is not None:
                raise ToolError(GIT_REFUSAL.format(refusal=refusal, shown=shown, mode=policy.mode), code="APPROVAL")
        inside = path == root or root in path.parents
        if not inside and not policy.confined:
            refusal = await shared.approval.check(
                call, f'{verb}s "{path}", outside the workspace {root}', subject=str(path)
            )
            if refusal is not None:
                raise ToolError(refusal, code="APPROVAL")
        return root, path, shown

    async def write(args: Any, call: ToolCall) -> list[Any]:
        file_path = str_arg(args, "file_path", allow_empty=False)
        content = str_arg(args, "content")
        assert file_path is not None and content is not None
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError("content is not valid Unicode text (it contains a lone surrogate)") from None
        size = len(data)
        if size > config.max_write_bytes:
            raise ToolError(
                f"content is too large ({size} bytes; the limit is {config.max_write_bytes}) — "
                "write the file in smaller parts, or generate it with bash"
            )
        root, path, shown = await _writable(call, file_path, "write")
        session = shared.session(call)

        def store() -> bool:
            """Write ``data`` beneath the checked folder; whether a file was there (worker thread)."""
            try:
                anchor, folders, name = _split(root, path)
                with open_folder(anchor, folders, verb="write", shown=shown, create=True) as dir_fd:
                    try:
                        old = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    except FileNotFoundError:
                        old = None
                    if old is not None:
                        if stat.S_ISLNK(old.st_mode):
                            raise ToolError(RACE.format(verb="write", shown=shown), code="PATH_CHANGED")
                        if stat.S_ISDIR(old.st_mode):
                            raise IsADirectoryError(errno.EISDIR, "is a directory")
                        if not stat.S_ISREG(old.st_mode):
                            raise ToolError(NOT_REGULAR.format(verb="write", shown=shown, kind=kind_of(old.st_mode)))
                        ledger.check(session, path, old, "write", shown)
                    mode = stat.S_IMODE(old.st_mode) if old is not None else None
                    ledger.record(session, path, replace_in(dir_fd, name, data, mode))
                    return old is not None
            except OSError as exc:
                raise _os_error("write", shown, exc, "") from None

        existed = await off_loop(store)
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
        root, path, shown = await _writable(call, file_path, "edit")
        session = shared.session(call)
        limit = config.max_read_bytes

        def change() -> int:
            """Replace in the file beneath the checked folder; the count replaced (worker thread)."""
            try:
                anchor, folders, name = _split(root, path)
                with open_folder(anchor, folders, verb="edit", shown=shown) as dir_fd:
                    fd, st = open_regular(dir_fd, name, verb="edit", shown=shown)
                    try:
                        ledger.check(session, path, st, "edit", shown)
                        raw = read_bounded(fd, limit)
                    finally:
                        os.close(fd)
                    if raw is None:
                        raise _too_large("edit", shown, limit, None)
                    try:
                        content = raw.decode("utf-8")
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
                    ledger.record(session, path, replace_in(dir_fd, name, updated.encode("utf-8"), stat.S_IMODE(st.st_mode)))
                    return count if replace_all else 1
            except OSError as exc:
                raise _os_error("edit", shown, exc, "") from None

        n = await off_loop(change)
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
