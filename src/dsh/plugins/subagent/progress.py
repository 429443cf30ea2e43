"""What a running child is doing, for the views of its parent (``dsh chat``, ``dsh acp``).

Owns :func:`child_activity`: for an event of a live child session, the top-level session it
works for, that session's ``subagent`` call, and one line (``reviewer · glob · 3s``;
``reviewer · done · 5s``) — or ``None`` for events that change nothing a person needs to see.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsh.plugins.subagent.lineage import delegation_root, label_of
from dsh.plugins.subagent.service import SUBAGENTS
from dsh.runtime import Context

__all__ = ["Activity", "child_activity"]


@dataclass(frozen=True)
class Activity:
    root_session: str
    call_id: str
    label: str
    text: str
    done: bool
    what: str
    started: float


def child_activity(ctx: Context, session_id: str, event: Any) -> Activity | None:
    service = ctx.get(SUBAGENTS)
    child = service.running.get(session_id) if service is not None else None
    if child is None:
        return None
    data = event.data if isinstance(event.data, Mapping) else {}
    elapsed = f"{int(time.monotonic() - child.started)}s"
    if event.type == "tool/call":
        child.tool = str(data.get("name"))
        what = child.tool
        done = False
    elif event.type == "turn/end":
        kind = (data.get("reason") or {}).get("kind")
        what = "done" if kind == "completed" else f"ended {kind}"
        done = True
    else:
        return None
    root, call_id = delegation_root(child.agent)
    label = (label_of(child.agent) or "subagent").removeprefix("subagent ")
    return Activity(
        str(root.session.id), call_id or child.call_id, label, f"{label} · {what} · {elapsed}", done, what, child.started
    )
