"""Instants and selectors of the schedule plugin: parsing what the model sends, printing what the
log keeps.

Owns the canonical UTC instant text (``2026-11-30T18:00:00.000Z``, JavaScript's
``toISOString()``), the strict RFC 3339 ``at`` string, the ``{date, time, time_zone}`` local form
with its DST rules (a time inside a gap is refused, an overlap takes the earlier instant), the
four-digit-year range every instant must stay in, and :class:`ScheduleInputError`, whose
``code`` and ``message`` are what the model reads. Everything is integer epoch milliseconds.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Final

from dsh.plugins.time_context import _load_zone

MIN_MS: Final = -62_135_596_800_000
"""``0001-01-01T00:00:00.000Z``."""
MAX_MS: Final = 253_402_300_799_999
"""``9999-12-31T23:59:59.999Z``."""
MIN_EVERY_SECONDS: Final = 300

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UTC_INSTANT = re.compile(
    r"(?!0000)\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d\.\d{3}Z"
)
_OFFSET_INSTANT = re.compile(
    r"(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})T(?P<hour>\d{2}):(?P<minute>\d{2}):(?P<second>\d{2})"
    r"(?:\.(?P<fraction>\d{1,3}))?(?P<zone>Z|(?P<sign>[+-])(?P<oh>\d{2}):(?P<om>\d{2}))"
)
_LOCAL_DATE = re.compile(r"(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})")
_LOCAL_TIME = re.compile(r"(?P<hour>\d{2}):(?P<minute>\d{2}):(?P<second>\d{2})(?:\.(?P<fraction>\d{1,3}))?")
_IANA_ZONE = re.compile(r"[A-Za-z][A-Za-z0-9_+.-]*(?:/[A-Za-z0-9_+.-]+)+")

OUT_OF_RANGE: Final = "The scheduled time must be representable as a four-digit-year RFC 3339 UTC instant."
BAD_CALENDAR: Final = "The at value must be a real ISO calendar date and time."


class ScheduleInputError(ValueError):
    """A model-supplied rule that cannot become a record; ``code`` and ``message`` are shown."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- canonical instants ----------------------------------------------------------------------


def format_instant(ms: int) -> str:
    """``toISOString()``: ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (four-digit years only)."""
    moment = _EPOCH + timedelta(milliseconds=ms)
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:"
        f"{moment.minute:02d}:{moment.second:02d}.{moment.microsecond // 1000:03d}Z"
    )


def parse_canonical(text: object) -> int | None:
    """The epoch ms of a canonical instant string, ``None`` for anything else."""
    if type(text) is not str or not _UTC_INSTANT.fullmatch(text):
        return None
    try:
        moment = datetime(
            int(text[0:4]), int(text[5:7]), int(text[8:10]), int(text[11:13]), int(text[14:16]),
            int(text[17:19]), int(text[20:23]) * 1000, tzinfo=UTC,
        )
    except ValueError:  # 2026-02-30
        return None
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _to_ms(moment: datetime) -> int:
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def future_instant(target: int, now: int) -> int:
    """``target`` if it is representable and strictly after ``now``."""
    if target < MIN_MS or target > MAX_MS:
        raise ScheduleInputError("time_out_of_range", OUT_OF_RANGE)
    if target <= now:
        raise ScheduleInputError("not_future", "The scheduled time must be strictly in the future.")
    return target


# -- the at selector -------------------------------------------------------------------------


def _millis(fraction: str | None) -> int:
    return 0 if fraction is None else int(fraction.ljust(3, "0"))


def _calendar(year: int, month: int, day: int, hour: int, minute: int, second: int, ms: int, what: str) -> datetime:
    if year == 0 or hour > 23 or minute > 59 or second > 59:
        raise ScheduleInputError("invalid_rule", what)
    try:
        return datetime(year, month, day, hour, minute, second, ms * 1000)
    except ValueError:
        raise ScheduleInputError("invalid_rule", what) from None


def parse_offset_at(value: str) -> int:
    """A strict ``YYYY-MM-DDTHH:mm:ss[.S{1,3}](Z|±HH:MM)`` string to epoch ms."""
    match = _OFFSET_INSTANT.fullmatch(value)
    if match is None:
        raise ScheduleInputError(
            "invalid_rule",
            "at must use YYYY-MM-DDTHH:mm:ss with optional 1-3 digit fractional seconds and an "
            "explicit Z or numeric offset.",
        )
    g = match.groupdict()
    local = _calendar(
        int(g["year"]), int(g["month"]), int(g["day"]), int(g["hour"]), int(g["minute"]),
        int(g["second"]), _millis(g["fraction"]), BAD_CALENDAR,
    )
    epoch = _to_ms(local.replace(tzinfo=UTC))
    if g["zone"] == "Z":
        return epoch
    hours, minutes = int(g["oh"]), int(g["om"])
    if hours > 23 or minutes > 59 or (g["sign"] == "-" and hours == 0 and minutes == 0):
        raise ScheduleInputError("invalid_rule", "The at numeric offset is invalid.")
    direction = 1 if g["sign"] == "+" else -1
    return epoch - direction * (hours * 60 + minutes) * 60_000


def load_zone(value: object) -> zoneinfo.ZoneInfo:
    """``UTC`` or an IANA Area/Location name (``Europe/Berlin``), else ``invalid_time_zone``."""
    message = "time_zone must be UTC or a valid IANA Area/Location name."
    if type(value) is not str:
        raise ScheduleInputError("invalid_time_zone", message)
    if value.strip() != value or (value != "UTC" and not _IANA_ZONE.fullmatch(value)):
        raise ScheduleInputError("invalid_time_zone", message)
    try:
        return _load_zone(value)[0]
    except Exception:
        raise ScheduleInputError("invalid_time_zone", message) from None


def resolve_local(local: datetime, zone: zoneinfo.ZoneInfo) -> int:
    """The instant a naive local time names in ``zone``: a DST gap is refused, an overlap (the
    hour that repeats when clocks go back) takes the earlier instant."""
    candidates: list[int] = []
    out_of_range = False
    for fold in (0, 1):
        try:
            aware = local.replace(tzinfo=zone, fold=fold)
            instant = aware.astimezone(UTC)
            back = instant.astimezone(zone).replace(tzinfo=None)
        except (OverflowError, ValueError):
            out_of_range = True
            continue
        if back == local:
            candidates.append(_to_ms(instant))
    if not candidates:
        if out_of_range:
            raise ScheduleInputError("time_out_of_range", OUT_OF_RANGE)
        raise ScheduleInputError("invalid_rule", "The local at time does not exist in the selected time zone.")
    return min(candidates)


def parse_local_at(value: Mapping[str, object]) -> int:
    """``{date: YYYY-MM-DD, time: HH:mm:ss[.fff], time_zone}`` to epoch ms."""
    if set(value) != {"date", "time", "time_zone"}:
        raise ScheduleInputError("invalid_rule", "Local at must contain exactly date, time, and time_zone.")
    date, time = value["date"], value["time"]
    if type(date) is not str or type(time) is not str:
        raise ScheduleInputError("invalid_rule", "Local at date and time must be strings.")
    zone = load_zone(value["time_zone"])
    d, t = _LOCAL_DATE.fullmatch(date), _LOCAL_TIME.fullmatch(time)
    if d is None or t is None:
        raise ScheduleInputError(
            "invalid_rule",
            "Local at requires date YYYY-MM-DD and time HH:mm:ss with optional one-to-three digit milliseconds.",
        )
    local = _calendar(
        int(d["year"]), int(d["month"]), int(d["day"]), int(t["hour"]), int(t["minute"]),
        int(t["second"]), _millis(t["fraction"]), "The local at value must be a real ISO calendar date and time.",
    )
    return resolve_local(local, zone)


def parse_at(value: object) -> int:
    """Either form of ``at`` to epoch ms (not yet checked against now)."""
    if type(value) is str:
        return parse_offset_at(value)
    if type(value) is dict:
        return parse_local_at(value)
    raise ScheduleInputError("invalid_rule", "at must be an explicit-offset string or local calendar object.")
