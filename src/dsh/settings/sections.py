"""The sections of a settings file: each a top-level key with its own msgspec type.

A section is registered once by the module that uses it (``hooks`` by
:mod:`dsh.plugins.hooks.schema`; ``permissions`` is the next one to plug in here). The loader
(:mod:`dsh.settings.files`) decodes only registered keys and leaves every other key of Claude
Code's files alone, so a file written for Claude Code never fails on a key dsh does not use.
A section that can make dsh run something also lists its commands, which is what the trust gate
shows for an untrusted project file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from dsh.runtime.config import ConfigError
from dsh.trust import Command

__all__ = ["Section", "decode_section", "register_section", "sections"]


@dataclass(frozen=True)
class Section:
    """``key``: the top-level key; ``type``: what msgspec decodes its value into;
    ``commands``: for a section that runs things, what a decoded value would run."""

    key: str
    type: Any
    commands: Callable[[Any], list[Command]] | None = None


_SECTIONS: dict[str, Section] = {}


def register_section(section: Section) -> Section:
    """Add (or replace, by key) a section; returns it for module-level use."""
    _SECTIONS[section.key] = section
    return section


def sections() -> list[Section]:
    return list(_SECTIONS.values())


def decode_section(path: Path, section: Section, value: object) -> Any:
    """``value`` as ``section.type``; ``ConfigError`` with the file and the JSON path otherwise."""
    try:
        return msgspec.convert(value, section.type, strict=True)
    except msgspec.ValidationError as exc:
        message = str(exc)
        # msgspec says "... - at `$.PreToolUse[0]`": name the section in the path.
        message = message.replace("`$", f"`$.{section.key}", 1) if "`$" in message else f"{message} - at `$.{section.key}`"
        raise ConfigError(f"{path}: {message}") from None
