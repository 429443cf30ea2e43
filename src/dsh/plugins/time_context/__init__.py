"""time-context: a durable, zoned wall-clock reading before every model step.

Owns the ``time-context`` plugin: its config (``timeZone``, ``refreshIntervalMs``, ``zoneLine``,
``stepOneBaseline``), the prepended ``agent/pre-step`` listener that decides from the durable log
alone whether to take a reading and appends it with ``agent.inject``, and the zone it renders:
the open turn's own zone when its prompts carry one (:mod:`.request_zone`), else the configured
one. The exact text is :mod:`.text`; the per-session :class:`ReadingIndex` (:mod:`.index`)
answers the backward scans in constant time. It provides ``TIME_CONTEXT`` (the configured zone
and ``format_timestamp``) so other plugins render times as the model is told them.

The contract (when a reading is taken, its exact text, what the model sees, config errors) is
``docs/time-context.md``; the cost per firing is in ``BENCHMARKS.md`` (prestep_depth).
"""

from __future__ import annotations

import json
import os
import zoneinfo
from collections.abc import Mapping
from typing import Final

from dsh import _clock, _zones
from dsh._js import is_safe_integer, js_string
from dsh._zones import UTC_ALIASES
from dsh.agent.agent import AGENTS, Agent
from dsh.agent.hooks import AGENT_CREATED, PRE_STEP, PreStep
from dsh.plugins.time_context.index import ReadingIndex, is_reading, reading_index
from dsh.plugins.time_context.request_zone import RequestZone, derive, render_zone_line
from dsh.plugins.time_context.text import format_duration, format_timestamp, render_reading
from dsh.runtime import AbortSignal, Context, ServiceKey
from dsh.runtime.config import CheckedConfig

__all__ = [
    "SOURCE",
    "STEP_ONE_BASELINES",
    "TIME_CONTEXT",
    "UTC_ALIASES",
    "Config",
    "ReadingIndex",
    "RequestZone",
    "TimeContext",
    "apply",
    "format_duration",
    "format_timestamp",
    "inject",
    "is_reading",
    "name",
    "reading_index",
    "render_reading",
    "resolve_zone",
    "system_zone_key",
]

name = "time-context"
inject = ["agents"]

SOURCE: Final = {"kind": "plugin", "plugin": "time-context"}
STEP_ONE_BASELINES: Final = ("prompt", "previousExchange")


class Config(
    CheckedConfig,
    rename={
        "time_zone": "timeZone",
        "refresh_interval_ms": "refreshIntervalMs",
        "zone_line": "zoneLine",
        "step_one_baseline": "stepOneBaseline",
    },
):
    time_zone: str | None = None
    refresh_interval_ms: int = 0
    zone_line: bool = False
    step_one_baseline: str = "prompt"

    @classmethod
    def check_raw(cls, raw: Mapping[str, object]) -> Mapping[str, object]:
        # Checked here, before msgspec's type check, so every bad value gets the plugin's own
        # message (a TypeError, as the reference throws).
        checked = dict(raw)
        if "refreshIntervalMs" in raw:
            checked["refreshIntervalMs"] = validate_interval(raw["refreshIntervalMs"])
        if "zoneLine" in raw and raw["zoneLine"] is not None and type(raw["zoneLine"]) is not bool:
            raise TypeError(f"time-context: zoneLine must be true or false, got {js_string(raw['zoneLine'])}")
        if "stepOneBaseline" in raw:
            checked["stepOneBaseline"] = validate_baseline(raw["stepOneBaseline"])
        if checked.get("zoneLine") is None:
            checked.pop("zoneLine", None)
        return checked

    def __post_init__(self) -> None:
        self.refresh_interval_ms = validate_interval(self.refresh_interval_ms)
        self.step_one_baseline = validate_baseline(self.step_one_baseline)


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


def validate_baseline(value: object) -> str:
    """``stepOneBaseline``: omitted -> ``prompt``; else ``prompt`` or ``previousExchange``."""
    if value is None:
        return "prompt"
    if value not in STEP_ONE_BASELINES:
        raise TypeError(
            'time-context: stepOneBaseline must be "prompt" or "previousExchange", got '
            + (json.dumps(value, ensure_ascii=False) if type(value) is str else js_string(value))
        )
    return str(value)


# Kept under its old name: the schedule plugin's zone parsing shares the rule.
_load_zone = _zones.load_zone

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
    render times the way the model is told them (``zone``: the configured zone)."""

    def __init__(
        self,
        zone: zoneinfo.ZoneInfo,
        zone_name: str,
        refresh_interval_ms: int,
        *,
        zone_line: bool = False,
        step_one_baseline: str = "prompt",
    ) -> None:
        self.zone = zone
        self.zone_name = zone_name
        self.refresh_interval_ms = refresh_interval_ms
        self.zone_line = zone_line
        self.previous_exchange = step_one_baseline == "previousExchange"

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
        session = agent.session
        index = reading_index(session)
        if not self.due(index, now):
            return
        if step != 1:
            baseline = index.reading_in_turn(turn)
        elif self.previous_exchange:
            baseline = index.previous_exchange(turn)
        else:
            baseline = index.last_message_time
        request = derive(index.zones_in_turn(turn, session.events))
        zone, zone_name = self.zone, self.zone_name
        resolved = request.resolved
        if resolved is not None:
            # The request's own zone formats the clock; mixed or missing keep the configured one.
            zone, zone_name = _zones.load_zone(resolved)
        line = render_zone_line(request) if self.zone_line else None
        text = render_reading(turn, step, now, baseline, zone, zone_name, line)
        agent.inject([{"type": "text", "text": text}], source=SOURCE)


def apply(ctx: Context, config: Config) -> None:
    zone, zone_name = resolve_zone(config.time_zone)
    plugin = TimeContext(
        zone,
        zone_name,
        config.refresh_interval_ms,
        zone_line=config.zone_line,
        step_one_baseline=config.step_one_baseline,
    )
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
