"""The request/derive dev check (``devChecks``): every request equals the session prefix plus
the history an independent fold derives from the raw log before the step's ``step/start``.

Owns :class:`ShadowFold`, that naive fold, kept per agent and advanced lazily, and
:class:`InvariantError`. Not the session's own cache: a bug there is what it would catch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dsh.session import SURFACE_TYPES, Event, Message, Session, project


class InvariantError(AssertionError):
    """A request whose messages differ from the prefix plus the log-derived history."""

    code = "INVARIANT"


class ShadowFold:
    """An independent, naive fold of the raw log's surface, for the request/derive dev check.

    It is advanced lazily to each step's ``step/start``, so keeping it costs only the new
    events. :meth:`check` compares a request against it: the messages added since the previous
    check always, the whole history whenever a replace happened or the history doubled since
    the last full comparison, so the check stays amortised O(new messages) per step and a long
    session under dev checks does not slow down as it grows.
    """

    def __init__(self) -> None:
        self.nodes: list[int] = []
        self.messages: list[Message] = []
        self.seen = 0
        self.generation = 0
        self.full_generation = -1
        self.full_length = 0
        self.last_length = 0

    def advance(self, session: Session, upto: int) -> list[Message]:
        events = session.events
        for event in events[self.seen : upto]:
            if event.type not in SURFACE_TYPES:
                continue
            op = event.surface_op
            if op == "append":
                self.nodes.append(event.seq)
                message = project(event)
                if message is not None:
                    self.messages.append(message)
            elif isinstance(op, Mapping):
                i = self.nodes.index(op["start"])
                j = self.nodes.index(op["end"])
                self.nodes[i : j + 1] = [event.seq]
                projected = (project(events[seq]) for seq in self.nodes)
                self.messages = [m for m in projected if m is not None]
                self.generation += 1
        self.seen = upto
        return self.messages

    def check(self, prefix: Sequence[object], messages: Sequence[object]) -> bool:
        """Whether ``messages`` equals ``prefix`` plus the folded history (see the class doc)."""
        derived = self.messages
        length = len(prefix) + len(derived)
        if len(messages) != length:
            return False
        full = self.generation != self.full_generation or length >= 2 * max(self.full_length, 1)
        start = 0 if full else min(self.last_length, length)
        ok = True
        if start < len(prefix):
            ok = list(messages[start : len(prefix)]) == list(prefix[start:])
            start = len(prefix)
        ok = ok and list(messages[start:]) == derived[start - len(prefix) :]
        if ok and full:
            self.full_generation, self.full_length = self.generation, length
        self.last_length = length
        return ok


def check_request(
    shadow: ShadowFold, session: Session, step_start: Event, prefix: Sequence[object], messages: Sequence[object]
) -> None:
    """Raise :class:`InvariantError` unless ``messages`` is ``prefix`` plus the history derived
    from the raw log before ``step_start``."""
    shadow.advance(session, step_start.seq)
    if not shadow.check(prefix, messages):
        raise InvariantError(
            f"request for session {session.id} at seq {step_start.seq} differs from the log-derived history"
        )
