"""The synthetic session that several benchmarks share: 27-event turns, as the issues define them.

One turn is ``turn/start``, a 200-character ``user/message``, a time-context ``context/message``,
``step/start``, 20 text-delta ``assistant/chunk`` events, a 200-character ``assistant/message``
(``sourceEventSeqs`` = its 20 chunks, as the agent loop writes it), ``step/end`` and ``turn/end``.
3,704 turns make 100,008 events, the size of the anchors' log.

:func:`build_ops` precomputes the arguments of every ``Session.append`` so that a timed loop pays
for the append alone; :func:`build_session` runs them through a real session.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dsh.session import Event, Session

EVENTS_PER_TURN = 27
TURNS_100K = 3_704  # 3,704 x 27 = 100,008 events
USER_SOURCE = {"kind": "user"}
TIME_SOURCE = {"kind": "plugin", "plugin": "time-context"}


class Op(NamedTuple):
    """The arguments of one ``Session.append``."""

    type: str
    data: dict[str, Any]
    surface_op: str | None
    source_event_seqs: list[int] | None


def _text(prefix: str, length: int) -> str:
    """``length`` characters of word-like text starting with ``prefix``."""
    filler = " lorem ipsum dolor sit amet, consectetur adipiscing elit"
    text = prefix
    while len(text) < length:
        text += filler
    return text[:length]


def turn_ops(turn: int, first_seq: int) -> list[Op]:
    """The 27 appends of turn ``turn`` whose ``turn/start`` gets seq ``first_seq``."""
    step = {"turn": turn, "step": 1}
    reading = (
        f"Time sampled while preparing turn {turn}, step 1: "
        "2026-07-14T09:00:00+08:00[Asia/Shanghai]\n"
        "Elapsed since the preceding model-visible message: 0s."
    )
    reply = _text(f"Reply {turn}:", 200)
    ops = [
        Op(
            "turn/start",
            {"turn": turn, "trigger": {"kind": "message", "source": USER_SOURCE}},
            None,
            None,
        ),
        Op(
            "user/message",
            {
                "content": [{"type": "text", "text": _text(f"Prompt {turn}:", 200)}],
                "source": USER_SOURCE,
            },
            "append",
            None,
        ),
        Op(
            "context/message",
            {"content": [{"type": "text", "text": reading}], "source": TIME_SOURCE},
            "append",
            None,
        ),
        Op("step/start", dict(step), None, None),
    ]
    for index in range(20):
        delta = reply[index * 10 : index * 10 + 10]
        chunk = {"type": "text-delta", "index": 0, "text": delta}
        ops.append(Op("assistant/chunk", {**step, "chunk": chunk}, None, None))
    chunks = list(range(first_seq + 4, first_seq + 24))
    message = {
        **step,
        "content": [{"type": "text", "text": reply}],
        "usage": {"inputTokens": 120 + turn, "outputTokens": 50},
    }
    ops.append(Op("assistant/message", message, "append", chunks))
    ops.append(Op("step/end", dict(step), None, None))
    ops.append(Op("turn/end", {"turn": turn, "reason": {"kind": "completed"}}, None, None))
    assert len(ops) == EVENTS_PER_TURN
    return ops


def build_ops(turns: int, first_turn: int = 1) -> list[Op]:
    """The appends of ``turns`` whole turns, numbered from ``first_turn``, starting at seq 0."""
    ops: list[Op] = []
    for turn in range(first_turn, first_turn + turns):
        ops.extend(turn_ops(turn, len(ops)))
    return ops


def apply_ops(session: Session, ops: list[Op]) -> None:
    """Append ``ops`` to ``session`` (the timed loop of the append benchmark)."""
    append = session.append
    for kind, data, surface_op, seqs in ops:
        append(kind, data, surface_op=surface_op, source_event_seqs=seqs)


def build_session(session_id: str, turns: int) -> Session:
    """A live session of ``turns`` whole turns, built through ``Session.append``."""
    session = Session(session_id)
    apply_ops(session, build_ops(turns))
    return session


def turn_batches(events: list[Event]) -> list[list[Event]]:
    """``events`` cut after every ``turn/end``: what a flush at each turn end writes."""
    batches: list[list[Event]] = []
    start = 0
    for index, event in enumerate(events):
        if event.type == "turn/end":
            batches.append(events[start : index + 1])
            start = index + 1
    if start < len(events):
        batches.append(events[start:])
    return batches
