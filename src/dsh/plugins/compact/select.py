"""Which span to compact, and the wall-clock span underneath it.

Owns range selection (the retained tail, then a cut that keeps every tool call with its result,
pairs matched by call id) and :func:`covered_span`, which finds the first and last original
events under a span, through earlier checkpoints' provenance.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dsh.plugins.compact.estimate import Estimator
from dsh.session import SURFACE_TYPES, Event, Session

__all__ = ["CompactRange", "covered_span", "select_range", "tool_cut_points"]


def tool_cut_points(events: Sequence[Event], surface: Sequence[int]) -> list[bool]:
    """``ok[i]``: whether a cut before surface node ``i`` keeps every tool call with its result.

    ``len(ok) == len(surface) + 1``. A result pairs with the newest unanswered call of the same
    id before it (ids repeat: the mock model always says ``call-echo``). Orphans (a call without
    a result, a result without a call) constrain nothing, where the reference's depth count
    would stay unbalanced (or throw) from there on.
    """
    n = len(surface)
    marks = [0] * (n + 2)
    pending: dict[object, list[int]] = {}
    for position, seq in enumerate(surface):
        event = events[seq]
        kind = event.type
        if kind == "assistant/message":
            for block in event.data.get("content") or ():
                if type(block) is dict and block.get("type") == "tool-call":
                    pending.setdefault(block.get("id"), []).append(position)
        elif kind == "tool/result":
            calls = pending.get(event.data.get("callId"))
            if calls:
                call = calls.pop()
                marks[call + 1] += 1
                marks[position + 1] -= 1
    ok: list[bool] = []
    open_pairs = 0
    for i in range(n + 1):
        open_pairs += marks[i]
        ok.append(open_pairs == 0)
    return ok


@dataclass(frozen=True)
class CompactRange:
    """A head span of the surface: ``start``/``end`` seqs and the shadowed seqs in order."""

    start: int
    end: int
    seqs: tuple[int, ...]


def select_range(session: Session, estimator: Estimator, retain_tokens: int) -> CompactRange | None:
    """The span to compact: everything before the retained tail, or ``None``.

    The tail is the newest nodes whose raw content reaches ``retain_tokens`` (at least the last
    node); the cut then moves toward the head until no tool pair straddles it.
    """
    surface = session.surface
    events = session.events
    cut = len(surface) - 1
    kept = 0
    while cut >= 0:
        kept += estimator.event(events[surface[cut]])
        if kept >= retain_tokens:
            break
        cut -= 1
    if cut <= 0:
        return None
    ok = tool_cut_points(events, surface)
    while cut > 0 and not ok[cut]:
        cut -= 1
    if cut <= 0:
        return None
    seqs = surface[:cut]
    return CompactRange(seqs[0], seqs[-1], tuple(seqs))


def _underlying_parts(events: Sequence[Event], event: Event) -> list[int]:
    if type(event.surface_op) is dict and event.source_event_seqs:
        return [s for s in event.source_event_seqs if events[s].type in SURFACE_TYPES]
    return []


def covered_span(
    events: Sequence[Event], seqs: Iterable[int], memo: dict[int, tuple[int, int]] | None = None
) -> tuple[int, int]:
    """``(first, last)`` seqs of the original events underneath ``seqs``.

    A replace node (an earlier checkpoint) stands for the surface events it shadowed, found
    through its provenance, recursively; anything else stands for itself.
    """
    memo = {} if memo is None else memo
    first: int | None = None
    last: int | None = None
    for seq in seqs:
        stack = [seq]
        while stack:
            top = stack[-1]
            if top in memo:
                stack.pop()
                continue
            parts = _underlying_parts(events, events[top])
            missing = [p for p in parts if p not in memo]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            if parts:
                memo[top] = (min(memo[p][0] for p in parts), max(memo[p][1] for p in parts))
            else:
                memo[top] = (top, top)
        lo, hi = memo[seq]
        first = lo if first is None else min(first, lo)
        last = hi if last is None else max(last, hi)
    if first is None or last is None:
        raise ValueError("covered_span needs at least one seq")
    return first, last
