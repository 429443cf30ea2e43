"""Crash repair over a raw log.

Owns :func:`interrupted_turn_closers`, which closes a turn left open by a crash with the
reference's exact synthetic events (docs/surface-and-derivation.md, "Crash repair").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dsh.session.event import Event

INTERRUPTED_TOOL_TEXT = "Tool call interrupted by a crash; no result was recorded."


def interrupted_turn_closers(events: Sequence[Event]) -> list[Event]:
    """The events that close a turn left open at the end of ``events`` (empty when balanced).

    They reuse the time of the last event and continue its seqs. The synthetic ``tool/result``
    writes ``surfaceOp`` before ``sourceEventSeqs``, as the reference's closer does.
    """
    open_turn: int | None = None
    open_step: int | None = None
    pending: dict[str, dict[str, Any]] = {}  # callId -> {"step", "call_seq"}; insertion ordered
    for event in events:
        kind = event.type
        data = event.data
        if kind == "turn/start":
            open_turn, open_step = data.get("turn"), None
            pending.clear()
        elif kind == "turn/end":
            open_turn, open_step = None, None
            pending.clear()
        elif kind == "step/start":
            open_step = data.get("step")
        elif kind == "step/end":
            open_step = None
            pending.clear()
        elif kind == "assistant/message":
            for block in data.get("content") or ():
                if type(block) is dict and block.get("type") == "tool-call":
                    pending[str(block.get("id"))] = {"step": data.get("step"), "call_seq": None}
        elif kind == "tool/call":
            call = pending.get(data.get("callId"))
            if call is not None:
                call["call_seq"] = event.seq
        elif kind == "tool/result":
            pending.pop(data.get("callId"), None)
    if open_turn is None or not events:
        return []
    time = events[-1].time
    seq = events[-1].seq + 1
    closers: list[Event] = []
    for call_id, call in pending.items():
        data = {
            "turn": open_turn,
            "step": call["step"],
            "callId": call_id,
            "content": [{"type": "text", "text": INTERRUPTED_TOOL_TEXT}],
            "isError": True,
            "error": {"name": "InterruptedError", "code": "interrupted"},
        }
        provenance = [call["call_seq"]] if call["call_seq"] is not None else None
        closers.append(Event("tool/result", seq, time, data, provenance, "append", True))
        seq += 1
    if open_step is not None:
        closers.append(Event("step/end", seq, time, {"turn": open_turn, "step": open_step}))
        seq += 1
    closers.append(Event("turn/end", seq, time, {"turn": open_turn, "reason": {"kind": "interrupted"}}))
    return closers
