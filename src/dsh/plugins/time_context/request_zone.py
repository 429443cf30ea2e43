"""The request's zone: which zones the open turn's prompts carry, and the line that says so.

A prompt's zone lives in its durable event source, under the reference's field name
(``{"kind": "user", "rpcId": "<uuid>", "clientTimeZone": "Asia/Tokyo"}``); nothing else stores
it. The open turn's ``user/message`` and ``steering/message`` events are read, and:

- a user source counts only in the reference's user-rpc form (a string ``rpcId`` beside the
  string ``clientTimeZone``); a plugin source counts with ``clientTimeZone`` alone (the
  schedule plugin's delivered reminders carry the zone of the turn that created them);
- every counted zone must be canonical (``dsh._zones.canonical_client_zone`` gives it back
  unchanged), or the reading fails with the reference's ``TypeError`` texts: a log cannot slip
  an unchecked zone into the model's text;
- one distinct zone is ``resolved``; several are ``mixed`` (sorted, as the reference sorts);
  none is ``missing``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from dsh import _zones

if TYPE_CHECKING:
    from dsh.session import Event

__all__ = ["MESSAGE_TYPES", "RequestZone", "check_zone", "derive", "render_zone_line", "source_zone", "zone_at"]

MESSAGE_TYPES: Final = frozenset({"user/message", "steering/message"})
"""The events whose sources can carry a prompt's zone."""


@dataclass(frozen=True)
class RequestZone:
    """``kind`` is ``resolved`` (``zones`` has one), ``mixed`` (several, sorted) or ``missing``."""

    kind: str
    zones: tuple[str, ...] = ()

    @property
    def resolved(self) -> str | None:
        return self.zones[0] if self.kind == "resolved" else None


MISSING: Final = RequestZone("missing")


def source_zone(source: object) -> str | None:
    """The zone a message source carries (unchecked), or ``None`` when it carries none."""
    if type(source) is not dict:
        return None
    value = source.get(_zones.CLIENT_ZONE_KEY)
    if type(value) is not str:
        return None
    if source.get("kind") == "user" and type(source.get("rpcId")) is not str:
        return None  # the reference counts a user zone only in its user-rpc form
    return value


def check_zone(value: str) -> str:
    """``value`` itself, or ``TypeError`` (the reference's texts) when it is not canonical
    ``UTC`` or ``Area/Location``, not a zone the data knows, or not spelled canonically."""
    quoted = json.dumps(value, ensure_ascii=False)
    if value != "UTC" and not _zones.is_area_location(value):
        raise TypeError(f"browser time zone must be canonical UTC or IANA Area/Location: {quoted}")
    canonical = _zones.canonical_client_zone(value)
    if canonical is None:
        raise TypeError(f"browser time zone is unsupported: {quoted}")
    if canonical != value:
        raise TypeError(f"browser time zone must be canonical: {quoted}")
    return value


def derive(zones: set[str] | frozenset[str]) -> RequestZone:
    """The open turn's zone from the distinct zones its prompts carry (each checked)."""
    for value in sorted(zones):
        check_zone(value)
    if not zones:
        return MISSING
    ordered = tuple(sorted(zones))
    return RequestZone("resolved" if len(ordered) == 1 else "mixed", ordered)


def render_zone_line(request: RequestZone) -> str:
    """The reference's policy line, exactly."""
    if request.kind == "resolved":
        return (
            f"Browser time zone for this request: {request.zones[0]}. "
            "Interpret otherwise-unqualified dates and times in this zone."
        )
    if request.kind == "mixed":
        listed = json.dumps(list(request.zones), ensure_ascii=False, separators=(",", ":"))
        return (
            f"Browser time zone for this request: mixed {listed}. "
            "Ask the user to clarify otherwise-unqualified dates and times."
        )
    return (
        "Browser time zone for this request: unavailable. "
        "Ask the user to clarify otherwise-unqualified dates and times."
    )


def zone_at(events: Sequence[Event], seq: int) -> str | None:
    """The resolved zone of the turn that was open at ``seq`` (its prompts up to ``seq``), or
    ``None`` when they carry none, several, or one that fails the check."""
    found: set[str] = set()
    for event in reversed(events[: seq + 1]):
        if event.type == "turn/start":
            break
        if event.type in MESSAGE_TYPES and type(event.data) is dict:
            zone = source_zone(event.data.get("source"))
            if zone is not None:
                found.add(zone)
    try:
        return derive(found).resolved
    except TypeError:
        return None
