"""The ``rewind`` plugin: a workspace snapshot before each step that will change files, and
after each turn that had one.

A step's tool calls are known once the model's answer is complete (the ``agent/step-result``
waterfall, before the calls run). When one of them is not read-only (``bash``, ``write``,
``edit``, ``job_kill``, an MCP tool without ``readOnlyHint``, any tool not known to be
read-only), the workspace is recorded in the shadow store (:mod:`dsh.rewind.store`) and a
log-only ``workspace/snapshot`` event names the tree, the turn and the step. Just before that
turn's ``turn/end`` (``agent/turn-end``, whatever the reason) a second snapshot records what the
turn left, with ``changes {files, added, deleted}`` counted from the turn's first snapshot (what
``dsh chat`` shows at the end of the turn). A failing snapshot (no git, an unreadable folder) is a warning, never a failed turn.

Config (all optional): ``maxFileBytes`` (default 10 MiB: larger files are not kept),
``maxFiles`` (default 100,000: a snapshot that would hash more new or changed files is skipped),
``readOnlyTools`` (more tool names that never change files), ``home`` (the store's parent folder;
default ``$DSH_HOME``), ``enabled`` (default true).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from dsh.agent.agent import Agent
from dsh.agent.hooks import STEP_RESULT, TURN_END, JsonMap, StepResult, TurnEnd
from dsh.rewind.history import SNAPSHOT
from dsh.rewind.store import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_NEW_FILES,
    GitError,
    ShadowStore,
    Snapshot,
)
from dsh.runtime import Context
from dsh.tools.registry import TOOLS

__all__ = ["READ_ONLY_TOOLS", "Config", "apply", "inject", "name"]

log = logging.getLogger("dsh.rewind")

name = "rewind"
inject = ["tools"]

# Tools that never change files (the workspace reads, the todo list, reminders, echo).
READ_ONLY_TOOLS = frozenset(
    {"read", "glob", "grep", "todo_write", "job_output", "job_list", "echo",
     "schedule_create", "schedule_list", "schedule_delete"}
)
MAX_LISTED = 20  # too-big files named per event


class Config(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    enabled: bool = True
    max_file_bytes: Annotated[int, msgspec.Meta(ge=0)] = DEFAULT_MAX_FILE_BYTES
    max_files: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_MAX_NEW_FILES
    read_only_tools: list[str] = msgspec.field(default_factory=list)
    home: str | None = None


class _Snapshots:
    def __init__(self, ctx: Context, config: Config) -> None:
        self.ctx = ctx
        self.config = config
        self.read_only = READ_ONLY_TOOLS | set(config.read_only_tools)
        self.home = Path(config.home).expanduser() if config.home else None
        self.turns: dict[str, tuple[int, str]] = {}  # agent id -> (turn, its first tree)
        self.warned: set[str] = set()

    def mutating(self, agent: Agent, tool_name: object) -> bool:
        if not isinstance(tool_name, str) or tool_name in self.read_only:
            return False
        tool = self.ctx.require(TOOLS).get(tool_name, agent_id=agent.id)
        return tool is None or not tool.read_only

    def _store(self, agent: Agent) -> ShadowStore:
        cwd = agent.session.header.get("cwd")
        return ShadowStore(
            cwd if isinstance(cwd, str) and cwd else ".", home=self.home,
            max_file_bytes=self.config.max_file_bytes, max_new_files=self.config.max_files,
        )

    async def take(self, agent: Agent, turn: int, step: int, at: str, since: str | None = None) -> str | None:
        """Snapshot and log it; the tree id (``None`` when it failed). With ``since`` (the turn's
        first tree), the event also counts what changed: ``changes {files, added, deleted}``."""
        session_id = agent.session.id

        def work() -> tuple[Snapshot, tuple[int, int, int] | None]:
            store = self._store(agent)
            snap = store.snapshot(session_id)
            return snap, (store.numstat(since, snap.tree) if since is not None else None)

        try:
            snap, changes = await asyncio.to_thread(work)
        except (GitError, OSError) as exc:
            if session_id not in self.warned:  # once per session: a missing git is not news twice
                self.warned.add(session_id)
                log.warning('rewind: no workspace snapshot for session "%s": %s', session_id, exc)
            return None
        data: dict[str, Any] = {"turn": turn, "step": step, "at": at, "tree": snap.tree}
        if changes is not None:
            data["changes"] = {"files": changes[0], "added": changes[1], "deleted": changes[2]}
        if snap.too_big:
            data["tooBig"] = [{"path": p, "bytes": n} for p, n in snap.too_big[:MAX_LISTED]]
            if len(snap.too_big) > MAX_LISTED:
                data["tooBigMore"] = len(snap.too_big) - MAX_LISTED
        agent.session.append(SNAPSHOT, data)
        return snap.tree

    async def on_step_result(self, payload: StepResult, next_: Callable[[], Awaitable[JsonMap]]) -> JsonMap:
        message = await next_()
        agent = payload.agent
        content = message.get("content") if isinstance(message, Mapping) else None
        calls = [
            b for b in content or () if isinstance(b, Mapping) and b.get("type") == "tool-call"  # type: ignore[attr-defined]
        ]
        if any(self.mutating(agent, call.get("name")) for call in calls):
            tree = await self.take(agent, payload.turn, payload.step, "before-step")
            seen = self.turns.get(agent.id)
            if tree is not None and (seen is None or seen[0] != payload.turn):
                self.turns[agent.id] = (payload.turn, tree)
        return message

    async def on_turn_end(self, payload: TurnEnd) -> None:
        agent = payload.agent
        seen = self.turns.pop(agent.id, None)
        if seen is not None and seen[0] == payload.turn:
            await self.take(agent, payload.turn, payload.step, "turn-end", since=seen[1])


def apply(ctx: Context, config: Config) -> None:
    if not config.enabled:
        return
    snapshots = _Snapshots(ctx, config)
    ctx.on(STEP_RESULT, snapshots.on_step_result)
    ctx.on(TURN_END, snapshots.on_turn_end)
