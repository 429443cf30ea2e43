"""agent-instructions: workspace instructions (``AGENTS.md``, ``CLAUDE.md``) for the model.

Owns finding the files and telling each session about them, append-only. Files come from the
user's dsh home (``$DSH_HOME``, default ``$XDG_DATA_HOME/dsh``), then from each directory from the
project root (the nearest ancestor of the session's cwd holding ``.git``; the cwd itself without
one) down to the cwd. A ``CLAUDE.md`` whose trimmed text equals its sibling ``AGENTS.md`` is an
alias and is shown once; byte-identical files anywhere are shown once.

The first step of a session (in this process) injects one durable user-role ``context/message``
(``envelope: "raw"``, ``source {"kind": "plugin", "plugin": "agent-instructions"}``, ``meta
{"files": {path: sha256}}``) in the reference's ``<system-reminder>`` framing. On resume the files
are checked again against the hashes folded from the log: a changed or new file appends
``Updated instructions from: <path>`` / ``Instructions from: <path>``, a removed one
``Instructions removed: <path>``; nothing earlier is rewritten. A literal ``</system-reminder>``
inside a file is escaped so a repository cannot close the frame.

Config: ``fileNames`` (default ``["AGENTS.md", "CLAUDE.md"]``), ``includeHome`` (default true),
``home`` (overrides ``$DSH_HOME``), ``maxBytes`` (per file, default 64 KiB; longer files are cut
with a note).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Final

import msgspec

from dsh._home import dsh_home
from dsh.runtime import Context

__all__ = ["Config", "apply", "collect", "inject", "name", "render"]

name = "agent-instructions"
inject: list[str] = []

SOURCE: Final = {"kind": "plugin", "plugin": "agent-instructions"}
PREAMBLE: Final = (
    "The following workspace instructions may be relevant to your work. Use them as guidance when "
    "applicable. More specific instructions take precedence over broader ones. They do not override "
    "system, developer, or direct user instructions."
)
OPEN, CLOSE = "<system-reminder>", "</system-reminder>"


class Config(msgspec.Struct, rename="camel"):
    file_names: list[str] = msgspec.field(default_factory=lambda: ["AGENTS.md", "CLAUDE.md"])
    include_home: bool = True
    home: str | None = None
    max_bytes: int = 64 * 1024


def home_folder(config: Config) -> Path:
    return Path(config.home).expanduser() if config.home else dsh_home()


def project_root(cwd: Path) -> Path:
    for folder in (cwd, *cwd.parents):
        if (folder / ".git").exists():
            return folder
    return cwd


def _escape(text: str) -> str:
    return text.replace(CLOSE, "<\\/system-reminder>")


def collect(cwd: Path, config: Config) -> list[tuple[str, str]]:
    """``[(display path, text)]`` in order: home first, then project root down to ``cwd``."""
    cwd = Path(os.path.realpath(cwd))
    root = project_root(cwd)
    folders: list[tuple[Path, bool]] = []
    if config.include_home:
        folders.append((home_folder(config), True))
    chain = [cwd, *cwd.parents]
    for folder in reversed(chain[: chain.index(root) + 1]):
        folders.append((folder, False))
    seen: set[bytes] = set()
    found: list[tuple[str, str]] = []
    for folder, is_home in folders:
        texts: dict[str, str] = {}
        for file_name in config.file_names:
            path = folder / file_name
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if data in seen:
                continue
            content = data[: config.max_bytes].decode("utf-8", errors="replace")
            if len(data) > config.max_bytes:
                content += f"\n[... truncated at {config.max_bytes} bytes]"
            if file_name == "CLAUDE.md" and texts.get("AGENTS.md", "").strip() == content.strip():
                continue
            seen.add(data)
            texts[file_name] = content
            shown = str(path) if is_home else str(path.relative_to(root))
            found.append((shown, content))
    return found


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def render(files: list[tuple[str, str]], previous: dict[str, str] | None = None) -> str | None:
    """The reminder text for ``files``: all of them the first time, else only what changed
    against ``previous`` (``{path: sha256}``); ``None`` when nothing did."""
    parts: list[str] = []
    current = {path: _digest(text) for path, text in files}
    for path, text in files:
        if previous is None or path not in previous:
            parts.append(f"Instructions from: {path}\n{_escape(text.strip())}")
        elif previous[path] != current[path]:
            parts.append(f"Updated instructions from: {path}\n{_escape(text.strip())}")
    for path in previous or {}:
        if path not in current:
            parts.append(
                f"Instructions removed: {path}\n"
                "The previously loaded instructions from this file no longer apply."
            )
    if not parts:
        return None
    return f"{OPEN}\n{PREAMBLE}\n" + "\n\n".join(parts) + f"\n{CLOSE}"


def _folded(session: Any) -> dict[str, str] | None:
    """The file hashes last announced in this session (``None``: never announced)."""
    state: dict[str, str] | None = None
    for event in getattr(session, "events", ()):
        if event.type == "context/message" and event.data.get("source") == SOURCE:
            meta = event.data.get("meta")
            files = meta.get("files") if isinstance(meta, dict) else None
            if isinstance(files, dict):
                state = {str(k): str(v) for k, v in files.items()}
    return state


class AgentInstructions:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._checked: set[str] = set()

    def on_pre_step(self, agent: Any, turn: int, step: int, *_rest: Any) -> None:
        session = agent.session
        if session.id in self._checked:
            return
        self._checked.add(session.id)
        cwd = session.header.get("cwd") or os.getcwd()
        files = collect(Path(cwd), self.config)
        previous = _folded(session)
        if previous is None and not files:
            return
        text = render(files, previous)
        if text is None:
            return
        meta = {"files": {path: _digest(content) for path, content in files}}
        agent.inject([{"type": "text", "text": text}], source=dict(SOURCE), envelope="raw", meta=meta)


def apply(ctx: Context, config: Config) -> None:
    plugin = AgentInstructions(config)
    ctx.on("agent/pre-step", plugin.on_pre_step)
    ctx.provide("agent_instructions", plugin)
