"""What a session is seeded with: its header and the events of a replayed log, checked.

Owns :func:`make_header` (the header a :class:`~dsh.session.log.Session` keeps, reference key
order) and :func:`seed_event` (one seed event, an :class:`Event` or a mapping, checked as the
reference checks a replayed event: envelope keys and types, lossless JSON, vocabulary).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh import _clock, _json
from dsh.session.event import Event, InvalidEventError, check_vocabulary

__all__ = ["SESSION_FORMAT_VERSION", "make_header", "seed_event"]

SESSION_FORMAT_VERSION = 0

_ENVELOPE_KEYS = frozenset({"type", "seq", "time", "data", "sourceEventSeqs", "surfaceOp"})


def make_header(id: str, header: Mapping[str, Any] | None) -> dict[str, Any]:
    """The header of session ``id``: ``version, id, createdAt`` (now when absent), then the
    optional ``cwd, parentSession, seedLength`` that are set."""
    if header is None:
        return {"version": SESSION_FORMAT_VERSION, "id": id, "createdAt": _clock.now_ms()}
    out: dict[str, Any] = {
        "version": header.get("version", SESSION_FORMAT_VERSION),
        "id": header.get("id", id),
        "createdAt": header["createdAt"] if "createdAt" in header else _clock.now_ms(),
    }
    for key in ("cwd", "parentSession", "seedLength"):
        if header.get(key) is not None:
            out[key] = header[key]
    return out


def seed_event(item: Event | Mapping[str, Any], index: int) -> Event:
    """The checked event at ``index`` of a seed (a fresh snapshot of its JSON values)."""
    if isinstance(item, Event):
        fields = item.to_json()
        surface_first = item.surface_first
    elif isinstance(item, Mapping):
        fields = dict(item)
        surface_first = False
        extra = fields.keys() - _ENVELOPE_KEYS
        if extra:
            raise InvalidEventError(f"unexpected envelope key(s) {', '.join(sorted(extra))}")
    else:
        raise InvalidEventError("seed event is not an object")
    for key in ("type", "seq", "time", "data"):
        if key not in fields:
            raise InvalidEventError(f"missing envelope key {key!r}")
    type_, seq, time = fields["type"], fields["seq"], fields["time"]
    if not isinstance(type_, str) or not type_:
        raise InvalidEventError("type must be a non-empty string")
    if type(seq) is not int or seq != index:
        shown = _json.dumps(seq) if _json.is_lossless(seq) else repr(seq)
        raise InvalidEventError(f"seq {shown} does not match its index {index}")
    if type(time) is not int or time < 0:
        raise InvalidEventError("time must be a non-negative integer")
    try:
        data = _json.lossless_copy(fields["data"])
        op = fields.get("surfaceOp")
        op = None if op is None else _json.lossless_copy(op)
        seqs = fields.get("sourceEventSeqs")
        seqs = None if seqs is None else _json.lossless_copy(seqs)
    except _json.NotLosslessJSON:
        raise TypeError(f'session event "{type_}" carries non-JSON-serializable data') from None
    check_vocabulary(type_, data)
    return Event(type_, seq, time, data, seqs, op, surface_first)
