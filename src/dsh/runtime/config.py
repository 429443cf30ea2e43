"""Plugin config validation: ``ConfigError`` and :func:`validate_config`.

This module owns turning a raw config value (from ``ctx.plugin(p, config)`` or a YAML entry) into
the object a plugin's ``apply`` receives. A plugin's ``Config`` is a ``msgspec.Struct`` type;
absent/``None`` config means ``{}`` (so every field's default applies), an unknown key is an
error naming it and the closest valid key (:class:`UnknownKeyError`; this departs from the
reference, whose schemas ignore extra keys: a silently ignored typo such as ``persistanceRoot``
is worse than a refusal), and failures are re-worded from msgspec's
``Expected `int`, got `str` - at `$.x``` into the reference's path-first style
``$.x: expected int, got str``.

A plugin that words its own errors (the reference's ``BasicCompactConfig: … must be …``) keeps
typed fields and subclasses :class:`CheckedConfig`: its ``check_raw`` sees the raw mapping once
no key is unknown or missing, raises with the plugin's message, and returns values of the field
types for msgspec to convert.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = [
    "CheckedConfig",
    "ConfigError",
    "UnknownKeyError",
    "format_validation_error",
    "validate_config",
]


class ConfigError(ValueError):
    """A plugin config failed validation. ``str(err)`` starts with the JSON path."""


class UnknownKeyError(ConfigError):
    """A config key the plugin's schema does not know; ``suggestion`` is the closest valid key."""

    def __init__(self, key: str, suggestion: str | None) -> None:
        self.key = key
        self.suggestion = suggestion
        super().__init__(f'unknown key "{key}"{self.hint}')

    @property
    def hint(self) -> str:
        return f' (did you mean "{self.suggestion}"?)' if self.suggestion else ""

    def in_plugin(self, plugin: str) -> str:
        """``unknown key "timezone" in plugin "clock" (did you mean "timeZone"?)``."""
        return f'unknown key "{self.key}" in plugin "{plugin}"{self.hint}'


class CheckedConfig(msgspec.Struct):
    """A config struct whose plugin checks raw values itself, in its own words.

    :func:`validate_config` calls :meth:`check_raw` with the raw mapping after the unknown-key
    and missing-key checks; a ``ValueError`` it raises becomes a :class:`ConfigError` with the
    message verbatim (any other exception propagates as is), and what it returns is converted
    to the struct, so it must hold values of the field types (``1300.0`` made ``1300``, say).
    """

    @classmethod
    def check_raw(cls, raw: Mapping[str, object]) -> Mapping[str, object]:
        return raw


def _closest(key: str, valid: list[str]) -> str | None:
    squashed = {name.lower().replace("_", ""): name for name in valid}
    same = squashed.get(key.lower().replace("_", "").replace("-", ""))
    if same is not None:  # only case or separators differ: timezone, sqlite_path
        return same
    lowered = {name.lower(): name for name in valid}
    match = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


def _struct_types(annotation: Any) -> list[type[msgspec.Struct]]:
    """The Struct types a value of ``annotation`` may be (directly or inside ``X | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        return [t for arg in typing.get_args(annotation) for t in _struct_types(arg)]
    return []


def _item_struct_types(annotation: Any) -> list[type[msgspec.Struct]]:
    """The Struct types of the items of a ``list[...]``/``tuple[...]`` annotation."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        return [t for arg in typing.get_args(annotation) for t in _item_struct_types(arg)]
    if typing.get_origin(annotation) in (list, tuple, set, frozenset):
        return [t for arg in typing.get_args(annotation) for t in _struct_types(arg)]
    return []


def check_unknown_keys(schema: Any, raw: object, prefix: str = "") -> None:
    """Raise :class:`UnknownKeyError` for the first key of ``raw`` that ``schema`` does not know,
    in nested Struct-typed fields too (``agents[0].nmae``)."""
    structs = _struct_types(schema)
    if len(structs) != 1 or not isinstance(raw, dict):
        return  # a union of several Structs, or not an object: msgspec reports the shape
    fields = msgspec.structs.fields(structs[0])
    by_key = {f.encode_name: f for f in fields}
    for key in raw:
        if key not in by_key:
            raise UnknownKeyError(f"{prefix}{key}", _closest(str(key), list(by_key)))
    for key, value in raw.items():
        annotation = by_key[key].type
        if isinstance(value, dict):
            check_unknown_keys(annotation, value, f"{prefix}{key}.")
        elif isinstance(value, list):
            items = _item_struct_types(annotation)
            if len(items) == 1:
                for index, item in enumerate(value):
                    check_unknown_keys(items[0], item, f"{prefix}{key}[{index}].")


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
    check_unknown_keys(schema, raw)
    if isinstance(schema, type) and issubclass(schema, CheckedConfig) and isinstance(raw, dict):
        raw = _checked(schema, raw)
    try:
        return msgspec.convert(raw, schema)
    except msgspec.ValidationError as exc:
        raise ConfigError(format_validation_error(str(exc))) from None


def _checked(schema: type[CheckedConfig], raw: dict[str, object]) -> Mapping[str, object]:
    # A missing key is reported first, in msgspec's wording, as for any other schema.
    for field in msgspec.structs.fields(schema):
        if field.required and field.encode_name not in raw:
            raise ConfigError(f"{_join_path('$', field.encode_name)}: missing required value")
    try:
        return schema.check_raw(raw)
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
