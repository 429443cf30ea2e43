"""``glob`` and ``grep`` on the ripgrep binary of the ``ripgrep`` wheel (no host ``rg`` needed).

``glob`` lists files (never directories), hidden and ignored ones included, VCS folders excluded,
newest first, at most 100; ``grep`` returns matching lines with line numbers grouped by file, at
most 250. A capped result says so and saves the complete list to a spill file whose path it
reports. ripgrep runs directly (no shell), with the pattern passed after ``-e``/``--glob`` so a
pattern can never be taken for an option.

Hostile input: a search is stopped after ``searchTimeoutMs`` (ripgrep killed and reaped, as on
cancel); a FIFO, device or socket is refused as the search path (ripgrep would block on it, or
read forever) and skipped by ripgrep inside folders; dsh's own ``/proc`` files are refused, and a
search of ``/`` leaves ``/proc`` out. ripgrep gets ``--no-config`` and an environment without
secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import sys
import sysconfig
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, Final

from dsh.tools.types import Tool, ToolCall, ToolError, define_tool
from dsh.tools.workspace._beneath import OWN_PROCESS, holds_own_process, kind_of
from dsh.tools.workspace._common import display_path, resolve_path, str_arg, text, workspace_root
from dsh.tools.workspace.config import Shared

__all__ = ["find_rg", "search_tools"]

GLOB_CAP: Final = 100
GREP_CAP: Final = 250
LINE_CAP: Final = 500
_VCS: Final = ("!.git", "!.hg", "!.svn")
SEARCH_TIMEOUT: Final = (
    "{tool} timed out after {ms} ms (searchTimeoutMs) and was stopped — search a smaller folder, "
    "or narrow the search with a more specific path or pattern"
)


@cache
def find_rg() -> str:
    """The ``rg`` of the ripgrep wheel: the scripts folder of this interpreter, next to
    ``sys.executable``, or the wheel's own record; the host's ``rg`` is never used."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "rg",
        Path(sys.executable).parent / "rg",
    ]
    try:
        for file in metadata.files("ripgrep") or ():
            if file.name == "rg":
                candidates.append(Path(str(file.locate())))
    except metadata.PackageNotFoundError:
        pass
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise ToolError("ripgrep is not installed with dsh (pip install ripgrep)")


def _rg_env() -> dict[str, str]:
    """ripgrep's environment: enough to run, nothing secret (``/proc/<rg pid>/environ`` is then
    harmless) and no ``RIPGREP_CONFIG_PATH`` that could add options."""
    keep = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "HOME")
    return {k: v for k, v in os.environ.items() if k in keep}


async def _rg(args: list[str], cwd: Path, *, tool: str, timeout_ms: int) -> tuple[int, bytes, str]:
    """Run ripgrep; killed (and reaped) on timeout or cancel, so a search can never hang a turn."""
    proc = await asyncio.create_subprocess_exec(
        find_rg(), "--no-config", *args,
        cwd=str(cwd),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_rg_env(),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_ms / 1000)
    except TimeoutError:
        raise ToolError(SEARCH_TIMEOUT.format(tool=tool, ms=timeout_ms)) from None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(BaseException):
                await asyncio.shield(proc.wait())
    return proc.returncode or 0, out, err.decode(errors="replace").strip()


def _search_root(call: ToolCall, value: str | None) -> tuple[Path, Path]:
    """The workspace and the resolved place to search: never dsh's own ``/proc`` files, never a
    FIFO, device or socket (ripgrep would block on a FIFO, or read a device forever)."""
    root = workspace_root(call)
    base = resolve_path(root, value) if value else root
    shown = display_path(root, base)
    if holds_own_process(base):  # /proc itself holds dsh's folder: a search would enter it
        raise ToolError(OWN_PROCESS.format(verb="search", shown=shown), code="SANDBOX_DENIED")
    try:
        st = base.stat()
    except FileNotFoundError:
        raise ToolError(f'path "{value}" does not exist') from None
    except OSError as exc:
        raise ToolError(f'cannot search "{shown}": {exc.strerror or exc}') from None
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        raise ToolError(f'cannot search "{shown}": it is a {kind_of(st.st_mode)}, not a regular file or folder')
    return root, base


def _targets(base: Path) -> list[str]:
    """What ripgrep searches for ``base``: ``/`` is searched as its entries but ``/proc`` (dsh's
    environment is in there; ripgrep's globs cannot exclude it from an absolute root)."""
    if base != Path("/"):
        return [str(base)]
    try:
        return [f"/{name}" for name in sorted(os.listdir("/")) if name != "proc"]
    except OSError as exc:
        raise ToolError(f'cannot search "/": {exc.strerror or exc}') from None


def search_tools(shared: Shared) -> list[Tool]:
    async def glob(args: Any, call: ToolCall) -> list[Any]:
        pattern = str_arg(args, "pattern", allow_empty=False)
        assert pattern is not None
        if "\x00" in pattern:
            raise ToolError("invalid pattern: contains a NUL byte")
        root, base = _search_root(call, str_arg(args, "path", required=False))
        if not base.is_dir():
            raise ToolError(f'path "{display_path(root, base)}" is not a directory')
        rg_args = ["--files", "--hidden", "--no-ignore", "--no-messages", "--null"]
        for vcs in _VCS:
            rg_args += ["--glob", vcs]
        rg_args += ["--glob", pattern]
        if base == Path("/"):
            rg_args += ["--", *_targets(base)]
        code, out, err = await _rg(rg_args, base, tool="glob", timeout_ms=shared.config.search_timeout_ms)
        if code not in (0, 1):
            raise ToolError(f"glob failed: {err or f'ripgrep exit {code}'}")
        names = [n for n in out.decode("utf-8", errors="replace").split("\0") if n]

        def mtime(name: str) -> float:
            try:
                return (base / name).stat().st_mtime
            except OSError:
                return 0.0

        paths = sorted(names, key=lambda n: (-mtime(n), n))
        shown = [display_path(root, Path(os.path.normpath(base / p))) for p in paths]
        if not shown:
            return text("No files found")
        if len(shown) <= GLOB_CAP:
            return text("\n".join(shown))
        saved = shared.spill.save(shared.session(call), "glob", "\n".join(shown) + "\n")
        return text(
            "\n".join(shown[:GLOB_CAP])
            + f"\n\n(Results capped: showing the {GLOB_CAP} newest of {len(shown)} files. "
            f"The complete list was saved to {saved})"
        )

    async def grep(args: Any, call: ToolCall) -> list[Any]:
        pattern = str_arg(args, "pattern", allow_empty=False)
        include = str_arg(args, "include", required=False)
        assert pattern is not None
        root, base = _search_root(call, str_arg(args, "path", required=False))
        rg_args = ["--json", "--hidden", "--no-messages"]
        for vcs in _VCS:
            rg_args += ["--glob", vcs]
        if include:
            rg_args += ["--glob", include]
        rg_args += ["-e", pattern, "--", *_targets(base)]
        code, out, err = await _rg(rg_args, root, tool="grep", timeout_ms=shared.config.search_timeout_ms)
        if code == 2 and not out:
            raise ToolError(f"grep failed: {err.splitlines()[0] if err else 'invalid pattern'}")
        groups: dict[str, list[str]] = {}
        total = 0
        for raw in out.splitlines():
            try:
                item = json.loads(raw)
            except ValueError:
                continue
            if item.get("type") != "match":
                continue
            data = item["data"]
            name = data["path"].get("text") or "<non-UTF-8 path>"
            line = (data["lines"].get("text") or "").rstrip("\n")
            if len(line) > LINE_CAP:
                line = line[:LINE_CAP] + "…"
            shown = display_path(root, Path(name))
            groups.setdefault(shown, []).append(f"  {data['line_number']}: {line}")
            total += 1
        if total == 0:
            return text("No matches found")
        blocks: list[str] = []
        inline = 0
        for name, rows in groups.items():
            if inline >= GREP_CAP:
                break
            take = rows[: GREP_CAP - inline]
            inline += len(take)
            blocks.append(f"{name}:\n" + "\n".join(take))
        head = f"Found {total} match{'es' if total != 1 else ''}"
        result = head + "\n\n" + "\n\n".join(blocks)
        if total > GREP_CAP:
            full = head + "\n\n" + "\n\n".join(f"{n}:\n" + "\n".join(r) for n, r in groups.items())
            saved = shared.spill.save(shared.session(call), "grep", full + "\n")
            result += (
                f"\n\n(Results capped: showing the first {GREP_CAP} of {total} matches. "
                f"The complete match list was saved to {saved})"
            )
        return text(result)

    return [
        define_tool(
            name="glob",
            description=(
                "Find files whose paths match a glob pattern. Returns matching file paths — never "
                "directories — including hidden and ignored files (VCS metadata directories are "
                "excluded). Up to 100 paths come back in modification-time order; a larger result "
                "instead returns the 100 newest paths, says so, and reports where the complete "
                "sorted list was saved. This tool does not enumerate directory entries."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "pattern": {
                        "type": "string",
                        "description": (
                            'Glob pattern to match file paths against (e.g. "**/*.ts", "src/**/*.test.js"). '
                            'A pattern with no "/" matches the basename at any depth, so "*" and "*.ts" both '
                            "search the whole tree; include a separator to anchor the depth."
                        ),
                    },
                    "path": {
                        "type": "string",
                        "description": "Directory to search in. Defaults to the session workspace; a relative path resolves against it.",
                    },
                },
                "required": ["pattern"],
            },
            execute=glob,
        ),
        define_tool(
            name="grep",
            description=(
                "Search file contents with a ripgrep regular expression. Returns matching lines "
                "with line numbers, grouped by file. Returns the first 250 matches inline; a capped "
                "result reports where the complete match list was saved. Use read on a matched file "
                "for surrounding context."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression to search for (ripgrep syntax)."},
                    "path": {
                        "type": "string",
                        "description": "File or directory to search. Defaults to the session workspace; a relative path resolves against it.",
                    },
                    "include": {
                        "type": "string",
                        "description": 'One glob filter for which files to search (e.g. "*.ts", "*.{js,jsx}"). Not a list; negation is not supported.',
                    },
                },
                "required": ["pattern"],
            },
            execute=grep,
        ),
    ]


