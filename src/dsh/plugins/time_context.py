"""time-context: a durable, zoned wall-clock reading before every model step.

Before each step, a prepended ``agent/pre-step`` listener appends a ``context/message`` (source
``{"kind": "plugin", "plugin": "time-context"}``) that the model sees as a user-role message::

    <context source="plugin">
    Time sampled while preparing turn 2, step 1: 2026-07-15T09:01:01+08:00[Asia/Shanghai]
    Elapsed since the preceding model-visible message: 1d 1h 1m 1s.
    </context>

(the tags and the text are three separate text blocks; about 45 tokens per reading). Later steps
say ``Elapsed since the preceding step context: …`` and measure model and tool time since that
step's previous reading. Readings stay in every later request until compaction shadows them;
nothing goes into the system prompt or ``request/header``, so the prompt cache is never broken.

Config (both optional):

- ``timeZone``: an IANA zone; default the process zone, resolved once at load (``TZ``, then
  ``/etc/localtime``, then UTC).
- ``refreshIntervalMs``: 0 or omitted reads on every step; a positive value skips a step when the
  latest reading in the raw log (shadowed or not, across resumes) is younger than the interval.

Every decision is a pure function of the durable log and the clock. A per-session index answers
the three questions the reference answers by scanning the log backwards (latest reading, latest
model-visible message, preceding reading of this turn) in constant time; it is fed from the log
itself, so it agrees with a full scan by construction (and a property test checks it).
"""

from __future__ import annotations

import json
import math
import os
import zoneinfo
from datetime import datetime
from functools import cache
from typing import Any, Final

import msgspec

from dsh import _clock, _json
from dsh.runtime import Context
from dsh.session import Event

name = "time-context"
inject = ["agents"]

SOURCE: Final = {"kind": "plugin", "plugin": "time-context"}
MAX_SAFE_INTEGER: Final = 2**53 - 1
MESSAGE_TYPES: Final = frozenset(
    {"user/message", "assistant/message", "tool/result", "context/message", "steering/message"}
)
UTC_ALIASES: Final = frozenset(
    {"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu",
     "GMT", "Etc/GMT", "GMT0", "Etc/GMT0", "Greenwich", "Etc/Greenwich"}
)


class Config(msgspec.Struct, rename={"time_zone": "timeZone", "refresh_interval_ms": "refreshIntervalMs"}):
    time_zone: str | None = None
    # Checked by apply, not the schema, so every bad value gets the plugin's own message.
    refresh_interval_ms: Any = None


# -- formatting ------------------------------------------------------------------------------


def format_duration(ms: int) -> str:
    """Compact whole-second units: ``0s``, ``1m 1s``, ``1h 0s``, ``1d 1h 1m 1s``."""
    seconds = max(0, ms) // 1000
    days, seconds = divmod(seconds, 86_400)
    hours, seconds = divmod(seconds, 3_600)
    minutes, seconds = divmod(seconds, 60)
    parts = [f"{value}{unit}" for value, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if value]
    parts.append(f"{seconds}s")
    return " ".join(parts)


def format_timestamp(ms: int, zone: zoneinfo.ZoneInfo, zone_name: str) -> str:
    """``YYYY-MM-DDTHH:MM:SS±HH:MM[<zone>]`` in whole seconds."""
    moment = datetime.fromtimestamp(ms // 1000, tz=zone)
    offset = int(moment.utcoffset().total_seconds())  # type: ignore[union-attr]
    sign = "-" if offset < 0 else "+"
    hours, minutes = divmod(abs(offset) // 60, 60)
    return f"{moment:%Y-%m-%dT%H:%M:%S}{sign}{hours:02d}:{minutes:02d}[{zone_name}]"


def render_reading(
    turn: int, step: int, now: int, baseline: int | None, zone: zoneinfo.ZoneInfo, zone_name: str
) -> str:
    """The exact two-line reading text (no trailing newline)."""
    kind = "model-visible message" if step == 1 else "step context"
    elapsed = "unavailable" if baseline is None else format_duration(now - baseline)
    return (
        f"Time sampled while preparing turn {turn}, step {step}: "
        f"{format_timestamp(now, zone, zone_name)}\n"
        f"Elapsed since the preceding {kind}: {elapsed}."
    )


# -- the durable index -----------------------------------------------------------------------


def is_reading(event: Event) -> bool:
    if event.type != "context/message":
        return False
    source = event.data.get("source")
    return type(source) is dict and source.get("kind") == "plugin" and source.get("plugin") == "time-context"


class ReadingIndex:
    """What the plugin needs from a raw log, kept current event by event."""

    __slots__ = ("last_message_time", "last_reading_seq", "last_reading_time", "turn_start_seq")

    def __init__(self) -> None:
        self.last_message_time: int | None = None
        self.last_reading_time: int | None = None
        self.last_reading_seq = -1
        self.turn_start_seq: dict[Any, int] = {}

    def observe(self, event: Event) -> None:
        kind = event.type
        if kind in MESSAGE_TYPES:
            self.last_message_time = event.time
            if kind == "context/message" and is_reading(event):
                self.last_reading_time = event.time
                self.last_reading_seq = event.seq
        elif kind == "turn/start":
            self.turn_start_seq[event.data.get("turn")] = event.seq

    def reading_in_turn(self, turn: int) -> int | None:
        """The reference's backward scan: the newest reading unless ``turn/start {turn}`` comes
        first (a missing ``turn/start`` lets an older turn's reading through, as there)."""
        if self.last_reading_seq > self.turn_start_seq.get(turn, -1):
            return self.last_reading_time
        return None


def reading_index(session: Any) -> ReadingIndex:
    index: ReadingIndex = session.attach_index(ReadingIndex, ReadingIndex)
    return index


# -- validation ------------------------------------------------------------------------------


def _js_string(value: Any) -> str:
    """``String(value)`` as JavaScript renders it in the reference's message."""
    if value is True or value is False:
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        text = repr(value)
        if "e" in text:  # JS writes 1e+21 and 1.5e-7 where Python writes 1e+21 and 1.5e-07
            mantissa, exponent = text.split("e")
            return f"{mantissa}e{'-' if exponent.startswith('-') else '+'}{int(exponent.lstrip('+-'))}"
        return text
    if isinstance(value, (list, dict)):
        return _json.dumps(value) if _json.is_lossless(value) else str(value)
    return str(value)


def validate_interval(value: Any) -> int:
    """``refreshIntervalMs``: omitted -> 0; else a non-negative JS safe integer."""
    if value is None:
        return 0
    ok = (
        type(value) is int
        or (type(value) is float and math.isfinite(value) and value.is_integer())
    ) and 0 <= value <= MAX_SAFE_INTEGER
    if not ok:
        raise TypeError(
            f"time-context: refreshIntervalMs must be a non-negative safe integer, got {_js_string(value)}"
        )
    return int(value)


@cache
def _zone_keys_by_lowercase() -> dict[str, str]:
    return {key.lower(): key for key in zoneinfo.available_timezones()}


def _load_zone(key: str) -> tuple[zoneinfo.ZoneInfo, str]:
    """A zone and the name to print; keys match case-insensitively, as ICU does."""
    try:
        zone = zoneinfo.ZoneInfo(key)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        canonical = _zone_keys_by_lowercase().get(key.lower())
        if canonical is None:
            raise
        key, zone = canonical, zoneinfo.ZoneInfo(canonical)
    return zone, "UTC" if key in UTC_ALIASES else key


def system_zone_key() -> str:
    """The process zone: ``TZ`` (leading ``:`` stripped), else ``/etc/localtime``'s link, else UTC."""
    tz = os.environ.get("TZ", "")
    key = tz[1:] if tz.startswith(":") else tz
    if key:
        marker = "zoneinfo/"
        return key.split(marker, 1)[1] if key.startswith("/") and marker in key else key
    try:
        target = os.path.realpath("/etc/localtime")
    except OSError:
        return "UTC"
    marker = "/zoneinfo/"
    return target.split(marker, 1)[1] if marker in target else "UTC"


def resolve_zone(explicit: str | None) -> tuple[zoneinfo.ZoneInfo, str]:
    if explicit is not None:
        try:
            return _load_zone(explicit)
        except Exception as exc:
            raise ValueError(f"time-context: invalid IANA timeZone {json.dumps(explicit, ensure_ascii=False)}") from exc
    try:
        return _load_zone(system_zone_key())
    except Exception as exc:
        raise ValueError("time-context: failed to resolve the system time zone") from exc


# -- the plugin ------------------------------------------------------------------------------


class TimeContext:
    """The resolved settings, provided as ``ctx.time_context`` so other plugins (compaction)
    can render times the way the model is told them."""

    def __init__(self, zone: zoneinfo.ZoneInfo, zone_name: str, refresh_interval_ms: int) -> None:
        self.zone = zone
        self.zone_name = zone_name
        self.refresh_interval_ms = refresh_interval_ms

    def format_timestamp(self, ms: int) -> str:
        return format_timestamp(ms, self.zone, self.zone_name)

    def due(self, index: ReadingIndex, now: int) -> bool:
        last = index.last_reading_time
        interval = self.refresh_interval_ms
        return interval <= 0 or last is None or now < last or now - last >= interval

    def on_pre_step(self, agent: Any, turn: int, step: int, _system: str, _prefix: Any, signal: Any) -> None:
        if signal is not None and signal.aborted:
            return
        now = _clock.now_ms()
        index = reading_index(agent.session)
        if not self.due(index, now):
            return
        baseline = index.last_message_time if step == 1 else index.reading_in_turn(turn)
        text = render_reading(turn, step, now, baseline, self.zone, self.zone_name)
        agent.inject([{"type": "text", "text": text}], source=SOURCE)


def apply(ctx: Context, config: Config) -> None:
    interval = validate_interval(config.refresh_interval_ms)
    zone, zone_name = resolve_zone(config.time_zone)
    plugin = TimeContext(zone, zone_name, interval)
    ctx.on("agent/pre-step", plugin.on_pre_step, prepend=True)
    # Build each session's index when its agent appears, so no step pays for a full scan.
    ctx.on("agent/created", lambda agent: reading_index(agent.session))
    for agent in ctx.agents.list():
        reading_index(agent.session)
    ctx.provide("time_context", plugin)
