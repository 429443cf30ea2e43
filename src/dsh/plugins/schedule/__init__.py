"""Reminders for agents, kept in the session log (see README.md); the plugin is :mod:`.plugin`."""

from dsh.plugins.schedule.plugin import Config, CorruptScheduleLog, Schedule, apply, inject, name

__all__ = ["Config", "CorruptScheduleLog", "Schedule", "apply", "inject", "name"]
