"""The reference's tool-pairing depth count, kept as a test oracle for compaction's cut points.

dsh's compactor decides cuts with its own rule (``tool_cut_points``); these tests check that it
agrees with the reference's depth count on well-formed surfaces.
"""

from __future__ import annotations

from collections.abc import Sequence

from dsh.session import Event


class ToolPairingError(ValueError):
    """A surface whose tool results outnumber their calls."""


def tool_pairing_depths(events: Sequence[Event], surface: Sequence[int]) -> list[int]:
    """Depth before each surface node: +1 per tool-call block, -1 per tool result.

    A cut before node ``i`` is balanced when ``depths[i] == 0``. ``depths`` has one more entry
    than ``surface`` (the depth after the last node).
    """
    depth = 0
    depths = [0]
    for seq in surface:
        event = events[seq]
        if event.type == "assistant/message":
            depth += sum(
                1 for b in event.data.get("content") or () if type(b) is dict and b.get("type") == "tool-call"
            )
        elif event.type == "tool/result":
            depth -= 1
            if depth < 0:
                raise ToolPairingError(f"tool/result at seq {seq} has no preceding tool call on the surface")
        depths.append(depth)
    return depths
