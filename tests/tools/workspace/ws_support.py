"""Helpers for the workspace-tool tests: a real registry with the plugin mounted, and an agent-like
caller whose session (a real :class:`dsh.session.Session`, header ``cwd`` = a temp workspace) has
an open turn, as every tool call in the loop does."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dsh.runtime import AbortController, Context
from dsh.session import Session
from dsh.tools import ToolResult
from dsh.tools.workspace.sandbox import bwrap_status

HAVE_BWRAP = bwrap_status() is None
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason=f"bubblewrap unusable here: {bwrap_status()}")


@dataclass
class FakeAgent:
    """The agent attributes tools read (``session``, ``inject``); the session is real."""

    session: Session
    injected: list[Any] = field(default_factory=list)

    def inject(self, content: Any, *, source: Any = None, envelope: Any = None, meta: Any = None) -> None:
        self.injected.append(content)
        data = {"content": content, "source": source}
        if envelope is not None:
            data["envelope"] = envelope
        self.session.append("context/message", data, surface_op="append")


@dataclass
class Workspace:
    ctx: Context
    root: Path
    agent: FakeAgent
    calls: int = 0

    async def run(self, name: str, args: Any, *, signal: Any = None) -> ToolResult:
        self.calls += 1
        return await self.ctx.tools.execute(
            call_id=f"c{self.calls}", name=name, arguments=args, agent=self.agent,
            signal=signal if signal is not None else AbortController().signal,
        )

    async def text(self, name: str, args: Any, **kw: Any) -> str:
        result = await self.run(name, args, **kw)
        return "".join(b.get("text", "") for b in result.content)


def make_agent(root: Path, sid: str = "s1") -> FakeAgent:
    session = Session(sid, header={"cwd": str(root)})
    session.append("turn/start", {"turn": 1, "trigger": {"kind": "user"}})
    return FakeAgent(session)
