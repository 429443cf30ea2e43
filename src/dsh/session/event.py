"""The event envelope: one committed record of the append-only session log.

Owns :class:`Event` (``type, seq, time, data, sourceEventSeqs?, surfaceOp?``), the split of the
vocabulary into surface and log-only types, the envelope validation rules with the reference's
error texts, and the durable JSON encoding of an event line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias

import msgspec

from dsh import _json

ReplaceOp: TypeAlias = dict[str, Any]
"""``{"op": "replace", "start": int, "end": int}`` (keys in that order)."""

SurfaceOp: TypeAlias = "Literal['append'] | ReplaceOp"

SURFACE_TYPES: Final = frozenset(
    {"user/message", "assistant/message", "tool/result", "context/message", "steering/message"}
)
"""The five message-producing types: they require a ``surfaceOp`` and may carry provenance."""

CORE_LOG_TYPES: Final = frozenset(
    {
        "turn/start",
        "turn/end",
        "step/start",
        "step/end",
        "assistant/chunk",
        "tool/call",
        "request/header",
        "prompt/blocked",
        "todo/write",
        "compact/start",
        "compact/summary",
        "compact/end",
    }
)
"""Core log-only types. Plugins may append other log-only types of their own."""

TURN_END_KINDS: Final = frozenset(
    {"completed", "aborted", "error", "disposed", "max-tokens", "rejected", "interrupted"}
)
HEADER_REASONS: Final = frozenset({"initial", "resume", "change"})


class InvalidEventError(ValueError):
    """An append or seed event broke an envelope, surface or provenance rule."""


class Event(
    msgspec.Struct,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=True,
    rename={"source_event_seqs": "sourceEventSeqs", "surface_op": "surfaceOp"},
):
    """One committed event. ``data`` is a private lossless-JSON snapshot: treat it as read-only.

    ``surface_first`` only records that a line carried ``surfaceOp`` before ``sourceEventSeqs``
    (the reference's crash-repair closer does), so that re-encoding reproduces its bytes.
    """

    type: str
    seq: int
    time: int
    data: Any
    source_event_seqs: list[int] | None = None
    surface_op: str | dict[str, Any] | None = None
    surface_first: bool = False

    def to_json(self) -> dict[str, Any]:
        """The durable form as a plain dict, keys in the reference order."""
        out: dict[str, Any] = {"type": self.type, "seq": self.seq, "time": self.time, "data": self.data}
        if self.surface_first and self.surface_op is not None:
            out["surfaceOp"] = self.surface_op
            if self.source_event_seqs is not None:
                out["sourceEventSeqs"] = self.source_event_seqs
            return out
        if self.source_event_seqs is not None:
            out["sourceEventSeqs"] = self.source_event_seqs
        if self.surface_op is not None:
            out["surfaceOp"] = self.surface_op
        return out


_event_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(Event)


def encode_event(event: Event) -> bytes:
    """The compact durable JSON line of ``event`` (without the newline)."""
    if event.surface_first:
        return _event_encoder.encode(event.to_json())
    return _event_encoder.encode(event)


def decode_event(line: bytes) -> Event:
    """Parse one durable line into an :class:`Event` (envelope types checked, rules not)."""
    return restore_key_order(_event_decoder.decode(line), line)


def restore_key_order(event: Event, line: bytes) -> Event:
    """Remember when ``line`` wrote ``surfaceOp`` before ``sourceEventSeqs``.

    The top-level keys follow ``data``, so the last occurrence of each name is the envelope's.
    """
    if event.surface_first:
        raise msgspec.ValidationError("Object contains unknown field `surface_first`")
    if (
        event.surface_op is not None
        and event.source_event_seqs is not None
        and line.rfind(b'"surfaceOp"') < line.rfind(b'"sourceEventSeqs"')
    ):
        return msgspec.structs.replace(event, surface_first=True)
    return event


def to_json(value: Event | Mapping[str, Any] | Any) -> str:
    """Compact durable JSON text of an event, a header or any lossless value."""
    if isinstance(value, Event):
        return encode_event(value).decode()
    return _json.dumps(value)


def canonical_surface_op(surface_op: Any) -> Any:
    """A replace op as a fresh dict with the reference's key order (``op, start, end``)."""
    if isinstance(surface_op, Mapping) and set(surface_op) == {"op", "start", "end"}:
        surface_op = {"op": surface_op["op"], "start": surface_op["start"], "end": surface_op["end"]}
    return _json.lossless_copy(surface_op)


def check_surface_fields(
    type_: str, seq: int, surface_op: Any, source_event_seqs: Any
) -> None:
    """Envelope rules that do not depend on the surface: presence, shape and provenance."""
    if type_ in SURFACE_TYPES:
        if surface_op is None:
            raise InvalidEventError(
                f'session event "{type_}" is surface-eligible and requires a surfaceOp marker'
            )
        if surface_op != "append" and (
            type(surface_op) is not dict
            or surface_op.keys() != {"op", "start", "end"}
            or surface_op["op"] != "replace"
            or type(surface_op["start"]) is not int
            or type(surface_op["end"]) is not int
        ):
            raise InvalidEventError(f'session event "{type_}" carries an invalid replace surfaceOp')
        if source_event_seqs is not None:
            _check_provenance(seq, source_event_seqs)
    else:
        if surface_op is not None:
            raise InvalidEventError(
                f'session event "{type_}" is not surface-eligible and cannot carry surfaceOp'
            )
        if source_event_seqs is not None:
            raise InvalidEventError(
                f'session event "{type_}" is not surface-eligible and cannot carry sourceEventSeqs'
            )


def provenance_is_valid(seqs: Any, seq: int) -> bool:
    """Whether :func:`check_surface_fields` accepts ``seqs`` as the provenance of event ``seq``
    (the fast yes; a no is explained by the check itself)."""
    return (
        type(seqs) is list
        and len(seqs) > 0
        and set(map(type, seqs)) == _INT_ONLY
        and min(seqs) >= 0
        and max(seqs) < seq
        and len(set(seqs)) == len(seqs)
    )


_INT_ONLY = {int}


def _check_provenance(seq: int, seqs: Any) -> None:
    if type(seqs) is not list:
        raise InvalidEventError("sourceEventSeqs must be an array of event seqs")
    if not seqs:
        raise InvalidEventError("sourceEventSeqs must not be empty when present")
    for value in seqs:
        if type(value) is not int or value < 0:
            raise InvalidEventError(
                f"sourceEventSeqs must contain non-negative integers, got {_json.dumps(value)}"
            )
        if value >= seq:
            raise InvalidEventError(
                f"sourceEventSeqs must reference earlier events: {value} >= current seq {seq}"
            )
    if len(set(seqs)) != len(seqs):
        raise InvalidEventError("sourceEventSeqs must not contain duplicates")


VOCABULARY_TYPES: Final = frozenset({"request/header-delta", "request/header"})
"""The types :func:`check_vocabulary` looks at (any other passes it)."""


def check_vocabulary(type_: str, data: Any) -> None:
    """Reject legacy records the reference refuses at append and at load."""
    if type_ == "request/header-delta":
        raise InvalidEventError('legacy session event "request/header-delta" is not supported')
    if type_ == "request/header":
        reason = data.get("reason") if type(data) is dict else None
        if reason not in HEADER_REASONS:
            raise InvalidEventError(
                f"request/header reason {_json.dumps(reason)} is not supported "
                "(expected initial, resume or change)"
            )
