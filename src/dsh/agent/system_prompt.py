"""System prompt assembly (``SYSTEM_PROMPT``): ordered sections with strict variables.

Sections are sorted by ``order`` and joined with a blank line; empty sections are dropped. Text
may use ``{{name}}`` variables; an unknown or valueless variable raises, which fails the turn
with a message naming it (docs/agent-loop.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dsh.runtime import Context, ServiceKey

name = "system-prompt"

IDENTITY_TEXT = "You are an AI agent powered by the DeepSeek Harness SDK."
IDENTITY_ID = "harness:identity"
_VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*\}\}")


class PromptVariableError(ValueError):
    code = "PROMPT_VARIABLE"


@dataclass(frozen=True)
class Section:
    id: str
    order: int
    text: str


class SystemPrompt:
    """The registered sections; ``render`` produces the full system prompt text."""

    def __init__(self) -> None:
        self._sections: dict[str, Section] = {}

    def add_section(self, id: str, text: str, *, order: int = 0) -> Callable[[], None]:
        if id in self._sections:
            raise ValueError(f'system prompt section "{id}" is already registered')
        section = Section(id, order, text)
        self._sections[id] = section

        def remove() -> None:
            if self._sections.get(id) is section:
                del self._sections[id]

        return remove

    def remove_section(self, id: str) -> bool:
        """Drop section ``id`` (e.g. ``harness:identity`` when instructions replace it); returns
        whether it was there."""
        return self._sections.pop(id, None) is not None

    def sections(self) -> list[Section]:
        return sorted(self._sections.values(), key=lambda s: s.order)

    def render(self, variables: Mapping[str, str | None]) -> str:
        parts = []
        for section in self.sections():
            text = _substitute(section, variables)
            if text:
                parts.append(text)
        return "\n\n".join(parts)


def _substitute(section: Section, variables: Mapping[str, str | None]) -> str:
    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        value = variables.get(key)
        if value is None:
            known = ", ".join(sorted(k for k, v in variables.items() if v is not None)) or "none"
            raise PromptVariableError(
                f'system prompt section "{section.id}" uses unknown variable "{{{{{key}}}}}" '
                f"(known: {known})"
            )
        return value

    return _VARIABLE.sub(replace, section.text)


SYSTEM_PROMPT: ServiceKey[SystemPrompt] = ServiceKey("system_prompt")
"""The system prompt service (``ctx.require(SYSTEM_PROMPT)``)."""


def apply(ctx: Context, config: object = None) -> None:
    prompt = SystemPrompt()
    prompt.add_section(IDENTITY_ID, IDENTITY_TEXT, order=-100)
    ctx.provide(SYSTEM_PROMPT, prompt)
