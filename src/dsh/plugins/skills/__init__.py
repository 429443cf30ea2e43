"""Skills (folders with a ``SKILL.md``) for the model: discovery, the durable catalog and the
``skill`` tool; see README.md."""

from dsh.plugins.skills.plugin import SKILLS, SOURCE, Config, SkillsService, apply, inject, name

__all__ = ["SKILLS", "SOURCE", "Config", "SkillsService", "apply", "inject", "name"]
