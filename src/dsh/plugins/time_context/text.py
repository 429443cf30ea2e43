"""The exact reading text: durations, zoned timestamps, and the two- or three-line reading."""

from __future__ import annotations

import zoneinfo
from datetime import datetime

__all__ = ["format_duration", "format_timestamp", "render_reading"]


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
    turn: int,
    step: int,
    now: int,
    baseline: int | None,
    zone: zoneinfo.ZoneInfo,
    zone_name: str,
    zone_line: str | None = None,
) -> str:
    """The exact reading text (no trailing newline): the seed's two lines, with ``zone_line``
    (the request-zone policy line) between them when given."""
    kind = "model-visible message" if step == 1 else "step context"
    elapsed = "unavailable" if baseline is None else format_duration(now - baseline)
    middle = "" if zone_line is None else f"{zone_line}\n"
    return (
        f"Time sampled while preparing turn {turn}, step {step}: "
        f"{format_timestamp(now, zone, zone_name)}\n"
        f"{middle}"
        f"Elapsed since the preceding {kind}: {elapsed}."
    )
