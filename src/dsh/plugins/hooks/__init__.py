"""Claude Code command hooks (``hooks`` in the settings files) on dsh's seams; see README.md."""

from dsh.plugins.hooks.plugin import HOOKS, SOURCE, Config, HooksService, apply, inject, name

__all__ = ["HOOKS", "SOURCE", "Config", "HooksService", "apply", "inject", "name"]
