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
from dsh.apps.acp.wire import WireMessage
from dsh.session import Event

__all__ = ["replay"]

_DELTAS = {"text-delta": "agent_message_chunk", "reasoning-delta": "agent_thought_chunk"}


def _delta_update(event: Event) -> WireMessage | None:
    """A text or reasoning delta's update as wire JSON, or ``None`` for every other event.

    Why: deltas are most of a log (20 of 27 events a turn in the benchmark workload), and
    building and dumping a pydantic model per delta was most of the replay's cost. The shape is
    the one :func:`.mapping.updates_for` produces (a test compares them).
    """
    if event.type != "assistant/chunk":
        return None
    chunk = event.data.get("chunk")
    if not isinstance(chunk, dict):
        return None
    kind = _DELTAS.get(str(chunk.get("type")))
    text = chunk.get("text")
    if kind is None or not isinstance(text, str) or not text:
        return None
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


async def replay(
    events: Iterable[Event],
    send: Callable[[Update], Awaitable[None]],
    *,
    cwd: str | None,
    tool_names: dict[str, str],
    send_raw: Callable[[WireMessage], None] | None = None,
) -> int:
    """Send every update of ``events`` in order; returns how many were sent.

    ``send_raw``, when given, takes the wire JSON of text and reasoning deltas (the fast path);
    everything else goes through ``send`` as a model.
    """
    sent = 0
    for event in events:
        if send_raw is not None:
            raw = _delta_update(event)
            if raw is not None:
                send_raw(raw)
                sent += 1
                continue
        for update in updates_for(event.type, event.data, cwd=cwd, tool_names=tool_names, replay=True):
            await send(update)
            sent += 1
    return sent
