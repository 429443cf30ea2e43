"""The durable session log: events, surface, derivation and crash repair.

Public names: :class:`Session`, :class:`Event`, :func:`derive_messages`, :func:`to_json`.
"""

from dsh.session.derive import DerivedMessages, Message, derive_messages, project
from dsh.session.event import (
    SURFACE_TYPES,
    Event,
    InvalidEventError,
    decode_event,
    encode_event,
    to_json,
)
from dsh.session.fork import ForkError, fork_session
from dsh.session.log import SESSION_FORMAT_VERSION, Session, SessionIndex
from dsh.session.raw import EventLog
from dsh.session.repair import INTERRUPTED_TOOL_TEXT, interrupted_turn_closers

__all__ = [
    "INTERRUPTED_TOOL_TEXT",
    "SESSION_FORMAT_VERSION",
    "SURFACE_TYPES",
    "DerivedMessages",
    "Event",
    "EventLog",
    "ForkError",
    "InvalidEventError",
    "Message",
    "Session",
    "SessionIndex",
    "decode_event",
    "derive_messages",
    "encode_event",
    "fork_session",
    "interrupted_turn_closers",
    "project",
    "to_json",
]
