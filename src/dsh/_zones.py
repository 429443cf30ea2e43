"""Which IANA zone data dsh renders times with, and the zone it runs in.

``zoneinfo`` reads the operating system's zone files before the ``tzdata`` package dsh depends
on, so an old distribution silently wins over a newer package: for ``Africa/Casablanca`` in
December 2026, Debian's 2025b data says ``+01:00`` and tzdata 2026f (and the reference harness)
``+00:00``. The rule here: **the newer of the two wins**; on a tie, or when the package's
version is unknown, the system's data is used; when the system's version cannot be read, the
package is. Newer, not "package always", because a distribution that updates its zone data
faster than dsh is released should still be able to correct dsh. Every zoned rendering in dsh
(time-context's readings, compaction's times, ``dsh sessions`` timestamps) loads zones through
:func:`zone`, and ``dsh --version`` reports :func:`zone_data`.

Also owns how a key is *named*: :func:`load_zone` matches keys case-insensitively (as ICU does)
and names the UTC aliases ``UTC``; :func:`canonical_client_zone` is the one check of a prompt's
own zone (``clientTimeZone``, the reference's field), wherever a zone enters (``dsh.Agent.run``,
``--time-zone``, ACP ``_meta``): canonical ``UTC`` or an IANA ``Area/Location`` name.
"""

from __future__ import annotations

import os
import re
import uuid
import zoneinfo
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = [
    "CLIENT_ZONE_KEY",
    "UTC_ALIASES",
    "ZoneData",
    "available_keys",
    "canonical_client_zone",
    "checked_config_zone",
    "client_zone_error",
    "is_area_location",
    "load_zone",
    "local_client_zone",
    "local_zone",
    "local_zone_key",
    "zone",
    "zone_data",
    "zoned_user_source",
]

_VERSION = re.compile(r"(\d{4})([a-z]*)")

CLIENT_ZONE_KEY = "clientTimeZone"
"""The key of a prompt's zone in its event source (``{kind, rpcId, clientTimeZone}``)."""
UTC_ALIASES = frozenset(
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
# The reference's profile of a request zone: UTC, or an Area/Location-style identifier.
_AREA_LOCATION = re.compile(r"[A-Za-z][A-Za-z0-9_+.-]*(?:/[A-Za-z0-9_+.-]+)+")


@dataclass(frozen=True)
class ZoneData:
    """The zone data in use: its IANA version (``2026f``) and where it comes from."""

    version: str | None
    source: str
    from_package: bool

    def describe(self) -> str:
        return f"{self.version or 'unknown version'} ({self.source})"


def _version_key(version: str | None) -> tuple[int, str]:
    match = _VERSION.fullmatch(version or "")
    return (int(match.group(1)), match.group(2)) if match else (-1, "")


def system_data() -> tuple[str | None, str | None]:
    """The version and folder of the first system zone folder ``zoneinfo`` would read."""
    for folder in zoneinfo.TZPATH:
        if not os.path.isdir(folder):
            continue
        try:
            with open(os.path.join(folder, "tzdata.zi"), encoding="utf-8") as handle:
                first = handle.readline()
            if first.startswith("# version "):
                return first.removeprefix("# version ").strip(), folder
        except OSError:
            pass
        try:
            with open(os.path.join(folder, "+VERSION"), encoding="utf-8") as handle:
                return handle.read().strip() or None, folder
        except OSError:
            return None, folder
    return None, None


def package_version() -> str | None:
    try:
        import tzdata  # type: ignore[import-untyped]
    except ImportError:
        return None
    version = getattr(tzdata, "IANA_VERSION", None)
    return version if isinstance(version, str) else None


@cache
def zone_data() -> ZoneData:
    """Which data wins, decided once per process (see the module docstring)."""
    return choose(*system_data(), package_version())


def choose(system: str | None, folder: str | None, package: str | None) -> ZoneData:
    """The rule: the newer wins; a tie or an unknown package version keeps the system's."""
    if package is not None and (folder is None or _version_key(package) > _version_key(system)):
        return ZoneData(package, "tzdata package", True)
    return ZoneData(system, f"system, {folder}" if folder else "system", False)


@cache
def zone(key: str) -> zoneinfo.ZoneInfo:
    """The zone ``key`` from the winning data (raises as ``ZoneInfo(key)`` does)."""
    found = zoneinfo.ZoneInfo(key)  # validates the key; the system's or the package's data
    if not zone_data().from_package:
        return found
    try:
        with resources.files("tzdata.zoneinfo").joinpath(*key.split("/")).open("rb") as handle:
            return zoneinfo.ZoneInfo.from_file(handle, key=key)
    except (OSError, ValueError, ModuleNotFoundError):
        return found  # a key only the system knows


@cache
def available_keys() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def local_zone_key() -> str:
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


def local_zone() -> zoneinfo.ZoneInfo:
    """The process zone from the winning data; UTC when it cannot be resolved."""
    try:
        return zone(local_zone_key())
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return zoneinfo.ZoneInfo("UTC")


@cache
def _keys_by_lowercase() -> dict[str, str]:
    return {key.lower(): key for key in available_keys()}


def load_zone(key: str) -> tuple[zoneinfo.ZoneInfo, str]:
    """A zone and the name to print; keys match case-insensitively, as ICU does, and the UTC
    aliases print as ``UTC`` (raises as ``ZoneInfo(key)`` does for an unknown key)."""
    try:
        found = zone(key)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        canonical = _keys_by_lowercase().get(key.lower())
        if canonical is None:
            raise
        key, found = canonical, zone(canonical)
    return found, "UTC" if key in UTC_ALIASES else key


def is_area_location(value: str) -> bool:
    """Whether ``value`` has the reference's ``Area/Location`` shape (not whether it exists)."""
    return _AREA_LOCATION.fullmatch(value) is not None


def canonical_client_zone(value: object) -> str | None:
    """The canonical spelling of a prompt's zone, or ``None`` when it is not one.

    Accepted: ``UTC`` or an ``Area/Location`` name (the reference's pattern) that the zone data
    knows, in any letter case; returned as the data spells it, a UTC alias as ``UTC``
    (``asia/tokyo`` -> ``Asia/Tokyo``, ``Etc/UTC`` -> ``UTC``). Refused: anything else
    (``""``, `` UTC``, ``CST``, ``+09:00``, ``Not/A_Real_Zone``)."""
    if type(value) is not str or (value != "UTC" and not _AREA_LOCATION.fullmatch(value)):
        return None
    try:
        _, name = load_zone(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return None
    return name if name == "UTC" or _AREA_LOCATION.fullmatch(name) else None


def local_client_zone() -> str | None:
    """The process zone as a prompt's zone (``None`` when it is not ``UTC`` or an
    ``Area/Location`` name, e.g. ``TZ=EST5EDT``: then the prompt carries none)."""
    key = local_zone_key()
    return "UTC" if key in UTC_ALIASES else canonical_client_zone(key)


def client_zone_error(what: str, value: object) -> str:
    """The one-line refusal of a prompt zone, e.g. ``--time-zone must be UTC or a valid IANA
    Area/Location name, got "CST"``."""
    import json

    shown = json.dumps(value, ensure_ascii=False) if type(value) is str else repr(value)
    return f"{what} must be UTC or a valid IANA Area/Location name, got {shown}"


def checked_config_zone(plugin: str, value: str | None) -> str | None:
    """An app config's ``timeZone``, canonical; a bad one fails the load in one line."""
    if value is None:
        return None
    zone = canonical_client_zone(value)
    if zone is None:
        raise ValueError(client_zone_error(f"{plugin}: timeZone", value))
    return zone


def zoned_user_source(zone: str) -> dict[str, object]:
    """A prompt's source carrying its zone, in the reference's user-rpc form and key order:
    ``{"kind": "user", "rpcId": "<uuid4>", "clientTimeZone": zone}`` (``zone`` already
    canonical)."""
    return {"kind": "user", "rpcId": str(uuid.uuid4()), CLIENT_ZONE_KEY: zone}
