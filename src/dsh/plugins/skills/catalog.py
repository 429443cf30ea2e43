"""What the model sees of the skills: the catalog message and the ``skill`` tool's text.

The frame and sentences are the reference's (``dsh-tool-skill``), verbatim. One addition: each
entry ends with the path of its ``SKILL.md`` in parentheses, so a model can also load a skill
(and the files it names) with ``read``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from dsh.plugins.skills.discovery import Skill

__all__ = ["entries_of", "render_catalog", "render_content", "render_update"]

INTRO: Final = "A skill is a reusable set of task-specific instructions. The following skills are available in this session:"
RULE: Final = (
    "If the user names a skill, or the task clearly matches a skill's description, call the `skill` tool "
    "with the exact skill name before taking task actions. Load all applicable skills, then follow their full "
    "instructions. This catalog contains summaries only; do not infer or follow a skill's instructions until it "
    "has been loaded."
)
DIRECT: Final = (
    "A user may also invoke a skill directly; its <skill_content> block then appears in this conversation. "
    "Follow it, and do not call the `skill` tool again for that skill."
)
UPDATE_INTRO: Final = (
    "The available skill catalog changed. This complete catalog replaces every earlier available-skills list "
    "in this session:"
)
UPDATE_RULE: Final = (
    "Use only names in this replacement catalog. If the user names a listed skill, or the task clearly matches "
    "its description, call the `skill` tool with the exact name before acting."
)
EMPTY_RULE: Final = (
    "No skills are currently available through the `skill` tool. Do not use names from earlier skill catalogs."
)
EMPTY_DIRECT: Final = (
    "A user may still invoke a skill directly; its <skill_content> block then appears in this conversation. "
    "Follow it, and do not call the `skill` tool for it."
)


def escape_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escape_attr(text: str) -> str:
    return escape_text(text).replace('"', "&quot;")


def cap(description: str, limit: int) -> str:
    """Normalised and cut like the reference's ``catalogDescription``."""
    text = " ".join(description.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def entries_of(skills: Sequence[Skill], limit: int) -> list[dict[str, str]]:
    return [{"name": s.name, "description": cap(s.description, limit), "path": str(s.path)} for s in skills]


def _lines(entries: Sequence[dict[str, str]]) -> list[str]:
    return [f"- `{e['name']}`: {escape_text(e['description'])} ({escape_text(e['path'])})" for e in entries]


def render_catalog(entries: Sequence[dict[str, str]]) -> str:
    return "\n".join(
        ["<system-reminder>", INTRO, "", "<available_skills>", *_lines(entries), "</available_skills>", "", RULE, DIRECT, "</system-reminder>"]
    )


def render_update(entries: Sequence[dict[str, str]]) -> str:
    tail = [EMPTY_RULE, EMPTY_DIRECT] if not entries else [UPDATE_RULE, DIRECT]
    return "\n".join(
        ["<system-reminder>", UPDATE_INTRO, "", "<available_skills>", *_lines(entries), "</available_skills>", "", *tail, "</system-reminder>"]
    )


def render_content(name: str, directory: str, body: str) -> str:
    """The ``skill`` tool's result (the reference's ``renderSkillContent``, directory form)."""
    return "\n".join(
        [
            f'<skill_content name="{_escape_attr(name)}">',
            "<skill_resources>",
            f"Base directory for this skill: {escape_text(directory)}",
            "Resolve relative paths mentioned by this skill against the base directory before using them. "
            "Load referenced resources only as needed.",
            "</skill_resources>",
            "",
            "<skill_instructions>",
            body,
            "</skill_instructions>",
            "</skill_content>",
        ]
    )
