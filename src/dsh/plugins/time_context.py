"""time-context: a durable, zoned wall-clock reading before every model step.

Owns the ``time-context`` plugin: its config (``timeZone``, ``refreshIntervalMs``), the prepended
``agent/pre-step`` listener that decides from the durable log alone whether to take a reading and
appends it with ``agent.inject``, the exact reading text, and the per-session
:class:`ReadingIndex` that answers the reference's three backward scans in constant time. It
provides ``TIME_CONTEXT`` (the resolved zone and ``format_timestamp``) so other plugins render
times as the model is told them.

The contract (when a reading is taken, its exact text, what the model sees, config errors) is
``docs/time-context.md``; the cost per firing is in ``BENCHMARKS.md`` (prestep_depth).
"""

from __future__ import annotations

import json
import os
import zoneinfo
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Final

from dsh import _clock, _zones
from dsh._js import is_safe_integer, js_string
from dsh.agent.agent import AGENTS, Agent
from dsh.agent.hooks import AGENT_CREATED, PRE_STEP, PreStep
from dsh.runtime import AbortSignal, Context, ServiceKey
from dsh.runtime.config import CheckedConfig
from dsh.session import SURFACE_TYPES, Event, Session

name = "time-context"
inject = ["agents"]

SOURCE: Final = {"kind": "plugin", "plugin": "time-context"}
UTC_ALIASES: Final = frozenset(
    {
        "UTC",
        "Etc/UTC",
        "Etc/UCT",
        "UCT",
        "Etc/Universal",
        "Universal",
        "Etc/Zulu",
        "Zulu",
        "GMT",
        "Etc/GMT",
        "GMT0",
        "Etc/GMT0",
        "Greenwich",
        "Etc/Greenwich",
    }
)


class Config(
    CheckedConfig, rename={"time_zone": "timeZone", "refresh_interval_ms": "refreshIntervalMs"}
):
    time_zone: str | None = None
    refresh_interval_ms: int = 0

    @classmethod
    def check_raw(cls, raw: Mapping[str, object]) -> Mapping[str, object]:
        # Checked here, before msgspec's type check, so every bad value gets the plugin's own
        # message (a TypeError, as the reference throws).
        if "refreshIntervalMs" not in raw:
            return raw
        return {**raw, "refreshIntervalMs": validate_interval(raw["refreshIntervalMs"])}

    def __post_init__(self) -> None:
        self.refresh_interval_ms = validate_interval(self.refresh_interval_ms)


# -- formatting ------------------------------------------------------------------------------


def format_duration(ms: int) -> str:
    """Compact whole-second units: ``0s``, ``1m 1s``, ``1h 0s``, ``1d 1h 1m 1s``."""
    seconds = max(0, ms) // 1000
    days, seconds = divmod(seconds, 86_400)
    hours, seconds = divmod(seconds, 3_600)
    minutes, seconds = divmod(seconds, 60)
    parts = [
        f"{value}{unit}" for value, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if value
    ]
    parts.append(f"{seconds}s")
    return " ".join(parts)


def format_timestamp(ms: int, zone: zoneinfo.ZoneInfo, zone_name: str) -> str:
    """``YYYY-MM-DDTHH:MM:SS±HH:MM[<zone>]`` in whole seconds."""
    moment = datetime.fromtimestamp(ms // 1000, tz=zone)
    delta = moment.utcoffset()
    offset = 0 if delta is None else delta.days * 86_400 + delta.seconds
    sign = "-" if offset < 0 else "+"
    hours, minutes = divmod(abs(offset) // 60, 60)
    # Field by field: a strftime() call costs more than the rest of the rendering together.
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
        f"{sign}{hours:02d}:{minutes:02d}[{zone_name}]"
    )


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
    """Whether ``event`` is a time-context reading (by its source; shadowed or not)."""
    if event.type != "context/message" or type(event.data) is not dict:
        return False
    source = event.data.get("source")
    return (
        type(source) is dict
        and source.get("kind") == "plugin"
        and source.get("plugin") == "time-context"
    )


class ReadingIndex:
    """What the plugin needs from a raw log, kept current event by event."""

    __slots__ = ("last_message_time", "last_reading_seq", "last_reading_time", "turn_start_seq")

    def __init__(self) -> None:
        self.last_message_time: int | None = None
        self.last_reading_time: int | None = None
        self.last_reading_seq = -1
        # Latest ``turn/start`` seq per turn number. Keyed by number: 1.0 finds 1, as JS ``===``
        # does; a boolean, string or missing ``turn`` can never equal the listener's integer.
        self.turn_start_seq: dict[float, int] = {}

    def observe(self, event: Event) -> None:
        kind = event.type
        if kind in SURFACE_TYPES:  # the model-visible message types
            self.last_message_time = event.time
            if kind == "context/message" and is_reading(event):
                self.last_reading_time = event.time
                self.last_reading_seq = event.seq
        elif kind == "turn/start":
            data = event.data
            turn = data.get("turn") if type(data) is dict else None
            if type(turn) is int or type(turn) is float:
                self.turn_start_seq[turn] = event.seq

    def reading_in_turn(self, turn: int) -> int | None:
        """The reference's backward scan: the newest reading unless ``turn/start {turn}`` comes
        first (a missing ``turn/start`` lets an older turn's reading through, as there)."""
        if self.last_reading_seq > self.turn_start_seq.get(turn, -1):
            return self.last_reading_time
        return None


def reading_index(session: Session) -> ReadingIndex:
    index: ReadingIndex = session.attach_index(ReadingIndex, ReadingIndex)
    return index


# -- validation ------------------------------------------------------------------------------


def validate_interval(value: object) -> int:
    """``refreshIntervalMs``: omitted -> 0; else a non-negative JS safe integer."""
    if value is None:
        return 0
    if not (is_safe_integer(value) and value >= 0):
        raise TypeError(
            f"time-context: refreshIntervalMs must be a non-negative safe integer, got {js_string(value)}"
        )
    return int(value)


@cache
def _zone_keys_by_lowercase() -> dict[str, str]:
    return {key.lower(): key for key in _zones.available_keys()}


def _load_zone(key: str) -> tuple[zoneinfo.ZoneInfo, str]:
    """A zone and the name to print; keys match case-insensitively, as ICU does."""
    try:
        zone = _zones.zone(key)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        canonical = _zone_keys_by_lowercase().get(key.lower())
        if canonical is None:
            raise
        key, zone = canonical, _zones.zone(canonical)
    return zone, "UTC" if key in UTC_ALIASES else key


# The process zone (``TZ``, else ``/etc/localtime``, else UTC), shared with every zoned rendering.
system_zone_key = _zones.local_zone_key


def resolve_zone(explicit: str | None) -> tuple[zoneinfo.ZoneInfo, str]:
    if explicit is not None:
        try:
            return _load_zone(explicit)
        except Exception as exc:
            raise ValueError(
                f"time-context: invalid IANA timeZone {json.dumps(explicit, ensure_ascii=False)}"
            ) from exc
    key = system_zone_key()
    try:
        return _load_zone(key)
    except Exception as exc:
        tz = os.environ.get("TZ")
        if tz:
            raise ValueError(
                f"time-context: TZ={json.dumps(tz, ensure_ascii=False)} is not an IANA time zone; "
                "set TZ=Area/City or timeZone in the config"
            ) from exc
        raise ValueError(
            f"time-context: failed to resolve the system time zone ({key!r} from /etc/localtime); "
            "set TZ=Area/City or timeZone in the config"
        ) from exc


# -- the plugin ------------------------------------------------------------------------------


class TimeContext:
    """The resolved settings, provided as ``TIME_CONTEXT`` so other plugins (compaction) can
    render times the way the model is told them."""

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

    def pre_step(self, event: PreStep) -> None:
        self.on_pre_step(event.agent, event.turn, event.step, event.system_prompt, event.session_prefix, event.signal)

    def on_pre_step(
        self, agent: Agent, turn: int, step: int, _system: str, _prefix: object, signal: AbortSignal | None
    ) -> None:
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
    zone, zone_name = resolve_zone(config.time_zone)
    plugin = TimeContext(zone, zone_name, config.refresh_interval_ms)
    # prepend: the reading is appended before compaction (an ordinary pre-step listener)
    # measures the history, whatever order the two plugins were mounted in.
    ctx.on(PRE_STEP, plugin.pre_step, prepend=True)
    # Build each session's index when its agent appears, so no step pays for a full scan.
    ctx.on(AGENT_CREATED, lambda created: reading_index(created.agent.session))
    for agent in ctx.require(AGENTS).list():
        reading_index(agent.session)
    ctx.provide(TIME_CONTEXT, plugin)


TIME_CONTEXT: ServiceKey[TimeContext] = ServiceKey("time_context")
"""The time-context plugin's service (``ctx.get(TIME_CONTEXT)``)."""
