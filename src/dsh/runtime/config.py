"""Plugin config validation: ``ConfigError`` and :func:`validate_config`.

This module owns turning a raw config value (from ``ctx.plugin(p, config)`` or a YAML entry) into
the object a plugin's ``apply`` receives. A plugin's ``Config`` is a ``msgspec.Struct`` type;
absent/``None`` config means ``{}`` (so every field's default applies), unknown keys are tolerated
(msgspec's default), and failures are re-worded from msgspec's
``Expected `int`, got `str` - at `$.x``` into the reference's path-first style
``$.x: expected int, got str``.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

__all__ = ["ConfigError", "format_validation_error", "validate_config"]


class ConfigError(ValueError):
    """A plugin config failed validation. ``str(err)`` starts with the JSON path."""


_AT_RE = re.compile(r"^(?P<msg>.*) - at `(?P<path>\$[^`]*)`$", re.DOTALL)
_MISSING_RE = re.compile(r"^Object missing required field `(?P<field>[^`]*)`$")


def format_validation_error(message: str) -> str:
    """Re-word a msgspec validation message as ``$.path: problem``."""
    m = _AT_RE.match(message)
    if m is None:
        # msgspec omits the location for root-level problems in some versions.
        path, msg = "$", message
    else:
        path, msg = m.group("path"), m.group("msg")
    missing = _MISSING_RE.match(msg)
    if missing is not None:
        # Name the missing key in the path, as the reference does ("missing required value").
        return f"{_join_path(path, missing.group('field'))}: missing required value"
    if msg.startswith(("Expected", "Invalid", "Object ", "Array ")):
        # msgspec's own wording: drop the backticks and lower the first letter.
        msg = msg.replace("`", "")
        return f"{path}: {msg[0].lower()}{msg[1:]}"
    if path == "$":
        # A message raised by the Config's own __post_init__: it is the plugin's wording, keep it
        # verbatim so a plugin can produce its exact reference error text.
        return msg
    return f"{path}: {msg}"


def _join_path(path: str, key: str) -> str:
    if re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$]*", key):
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


def validate_config(schema: type[Any] | None, config: object) -> Any:
    """Validate ``config`` against ``schema`` (a msgspec type) and return the converted value.

    With no schema the raw config is passed through (``None`` becoming ``{}``). An instance of the
    schema is accepted as-is, so programmatic callers can build the struct themselves.
    """
    raw: object = {} if config is None else config
    if schema is None:
        return raw
    if isinstance(schema, type) and isinstance(raw, schema):
        return raw
    try:
        return msgspec.convert(raw, schema)
    except msgspec.ValidationError as exc:
        raise ConfigError(format_validation_error(str(exc))) from None
