"""Forking a session at a turn boundary (docs/surface-and-derivation.md, "Forks")."""

from __future__ import annotations

import uuid

from dsh.session.log import Session


class ForkError(ValueError):
    """A fork that cannot be made; ``code`` is the reference's error code."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def fork_session(source: Session, boundary: int | None = None, child_id: str | None = None) -> Session:
    """A new session seeded with ``source``'s events up to and including ``boundary``.

    The boundary defaults to the last event and must be a ``turn/end``.
    """
    events = source.events
    if not len(events):
        raise ForkError(f'session "{source.id}" has no events to fork', "INVALID_BOUNDARY")
    if boundary is None:
        boundary = len(events) - 1
    if not 0 <= boundary < len(events):
        raise ForkError(f"fork boundary {boundary} is outside the log", "INVALID_BOUNDARY")
    if events[boundary].type != "turn/end":
        if boundary == len(events) - 1 and source.open_turn is not None:
            raise ForkError(f'session "{source.id}" has an open turn', "OPEN_TURN")
        raise ForkError(f"fork boundary {boundary} is not a turn/end", "INVALID_BOUNDARY")
    header = {
        "createdAt": None,
        "cwd": source.header.get("cwd"),
        "parentSession": source.id,
        "seedLength": boundary + 1,
    }
    del header["createdAt"]
    child = child_id or f"{source.id}-fork-{uuid.uuid4()}"
    return Session(child, list(events[: boundary + 1]), header={**header, "id": child})
