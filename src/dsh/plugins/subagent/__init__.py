"""Subagents: delegation into durable child sessions (see ``README.md`` in this folder).

The plugin is :mod:`dsh.plugins.subagent.plugin`; this package module stays empty so readers of
:mod:`.lineage` (``dsh sessions``) load nothing of the agent spine.
"""
