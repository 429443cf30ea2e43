"""The ``skills`` plugin: the durable skill catalog and the ``skill`` tool.

At the first step of every turn the skills seen from the session's cwd are discovered
(:mod:`dsh.plugins.skills.discovery`) and compared with the catalog last announced in the log
(the newest ``context/message`` from this plugin, its ``meta.entries``). The first non-empty
set appends one durable user-role ``context/message`` (``envelope: "raw"``, ``source {"kind":
"plugin", "plugin": "skills"}``) with the reference's catalog; a changed set appends the
reference's replacement catalog; an unchanged set appends nothing. Nothing goes into the system
prompt, so the prompt cache holds, and a resumed session is not told again.

The ``skill`` tool (the reference's name, description and error strings) returns a skill's
instructions; the catalog also names each ``SKILL.md``, so ``read`` loads it as well.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Any, Final

import msgspec

from dsh.agent.hooks import PRE_STEP, PreStep
from dsh.plugins.skills.catalog import entries_of, render_catalog, render_content, render_update
from dsh.plugins.skills.discovery import NAME, Skill, discover, read_skill, split_front_matter
from dsh.runtime import Context
from dsh.runtime.keys import ServiceKey
from dsh.tools.registry import TOOLS
from dsh.tools.types import ToolCall, ToolError, define_tool

__all__ = ["SKILLS", "SOURCE", "Config", "SkillsService", "apply", "inject", "name"]

log = logging.getLogger("dsh.skills")

name = "skills"
inject: list[str] = ["tools"]

SOURCE: Final = {"kind": "plugin", "plugin": "skills"}
TOOL_DESCRIPTION: Final = (
    "Load the full instructions for an available skill. Call this with the exact skill name from the "
    "session skill catalog before acting on a task that names or clearly matches that skill."
)
TOOL_PARAMETERS: Final = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "The exact skill name from the available skills list."}},
    "required": ["name"],
}


class Config(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``descriptionMaxChars`` (250: a catalog entry stays near 100 tokens), ``tool`` (true:
    register the ``skill`` tool)."""

    description_max_chars: Annotated[int, msgspec.Meta(ge=3)] = 250
    tool: bool = True


def _announced(session: Any) -> list[dict[str, str]] | None:
    """The entries of the newest catalog in the log (``None``: never announced)."""
    for event in reversed(session.events):
        if event.type == "context/message" and event.data.get("source") == SOURCE:
            meta = event.data.get("meta")
            entries = meta.get("entries") if isinstance(meta, dict) else None
            if isinstance(entries, list):
                return [dict(e) for e in entries if isinstance(e, dict)]
    return None


class SkillsService:
    """Discovery for a folder (``dsh skills list``, ``/skills``) and the catalog listener."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._warned: set[str] = set()

    def skills(self, cwd: Path) -> list[Skill]:
        found, warnings = discover(cwd)
        for warning in warnings:
            if warning not in self._warned:
                self._warned.add(warning)
                log.warning("%s", warning)
        return found

    def on_pre_step(self, step: PreStep) -> None:
        if step.step != 1:
            return
        agent = step.agent
        session = agent.session
        cwd = Path(session.header.get("cwd") or os.getcwd())
        entries = entries_of(self.skills(cwd), self.config.description_max_chars)
        previous = _announced(session)
        if previous == entries or (previous is None and not entries):
            return
        text = render_catalog(entries) if previous is None else render_update(entries)
        agent.inject([{"type": "text", "text": text}], source=dict(SOURCE), envelope="raw", meta={"entries": entries})

    def load(self, args: Any, call: ToolCall) -> str:
        wanted = args.get("name") if isinstance(args, dict) else None
        if not isinstance(wanted, str) or not NAME.match(wanted):
            raise ToolError(f'invalid skill name "{wanted}"')
        session = getattr(call.agent, "session", None)
        cwd = Path((session.header.get("cwd") if session is not None else None) or os.getcwd())
        skill = next((s for s in self.skills(cwd) if s.name == wanted), None)
        if skill is None:
            raise ToolError(f'skill "{wanted}" is unknown or no longer available')
        try:
            _, body = split_front_matter(read_skill(skill.path))
        except (OSError, ValueError):
            raise ToolError(f'skill "{wanted}" is unknown or no longer available') from None
        return render_content(skill.name, str(skill.path.parent), body.strip("\n"))


SKILLS: ServiceKey[SkillsService] = ServiceKey("skills")


def apply(ctx: Context, config: Config) -> None:
    service = SkillsService(config)
    ctx.provide(SKILLS, service)
    ctx.on(PRE_STEP, service.on_pre_step)
    if config.tool:
        tool = define_tool(name="skill", description=TOOL_DESCRIPTION, parameters=TOOL_PARAMETERS, execute=service.load)
        ctx.defer(ctx.require(TOOLS).register(tool))
