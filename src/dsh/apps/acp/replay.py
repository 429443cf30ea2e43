"""``session/load``'s replay: a stored session's durable log as ``session/update`` notifications.

The log is replayed in order through the same mapping as a live turn (:mod:`.mapping`), with the
user's prompts included, so the client rebuilds the conversation exactly as it was streamed:
every text delta, thought, tool call and result, plan, and the turns crash repair closed (their
synthetic results appear as failed tool calls). Shadowed events (compaction) are replayed too: the
client shows the history, not the model's window.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from dsh.apps.acp.mapping import Update, updates_for
from dsh.session import Event

__all__ = ["replay"]


async def replay(
    events: Iterable[Event],
    send: Callable[[Update], Awaitable[None]],
    *,
    cwd: str | None,
    tool_names: dict[str, str],
) -> int:
    """Send every update of ``events`` through ``send``, in order; returns how many were sent."""
    sent = 0
    for event in events:
        for update in updates_for(event.type, event.data, cwd=cwd, tool_names=tool_names, replay=True):
            await send(update)
            sent += 1
    return sent
