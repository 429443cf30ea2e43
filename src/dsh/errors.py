"""Errors a person or a calling program can meet, shared by every front end.

Owns :class:`UsageError` (how dsh was invoked or configured: exit status 2) and
:class:`RunError` (a library run whose turn ended in error). They live here, below the apps and
the CLI, so that no front end imports another to reach them. Store errors
(``dsh.persistence.base.StoreError``) and config errors (``dsh.runtime.ConfigError``) stay with
the code that raises them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh.session import Event

__all__ = ["RunError", "UsageError"]


class UsageError(Exception):
    """A mistake in how dsh was invoked or configured (exit 2)."""


class RunError(Exception):
    """A turn that ended in error (or ended without finishing), raised once its events are
    durable. ``reason`` is the logged ``turn/end`` reason (``{"kind": "error", ...}``), ``events``
    what the run appended."""

    def __init__(
        self,
        message: str,
        *,
        reason: Mapping[str, object],
        session_id: str,
        events: Sequence[Event] = (),
    ) -> None:
        super().__init__(message)
        self.reason: dict[str, object] = dict(reason)
        self.session_id = session_id
        self.events: tuple[Event, ...] = tuple(events)
