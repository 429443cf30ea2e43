"""The ``schedule`` plugin: session-scoped reminders whose whole state is the session log.

Owns the wiring: it registers the three tools on the ``TOOLS`` registry, checks each agent's schedule log
when the agent appears (a malformed ``schedule/change`` is recorded as corruption and the agent
gets no deliveries; :meth:`Schedule.check` raises it so an app can refuse the session), starts
one delivery :class:`~dsh.plugins.schedule.delivery.Owner` per agent when ``live`` is on, and
provides the ``schedule`` service (:data:`SCHEDULE`).

Config: ``live`` (default ``true``): deliver due reminders while the session is open in this
process. ``dsh reminders run`` mounts the plugin with ``live: false`` and delivers itself.
"""

from __future__ import annotations

import msgspec

from dsh.agent.agent import AGENTS, Agent
from dsh.agent.hooks import AGENT_CREATED, AGENT_DISPOSED
from dsh.persistence.base import CorruptSessionLog
from dsh.plugins.schedule.delivery import Owner
from dsh.plugins.schedule.fold import ScheduleLogError, fold_session
from dsh.plugins.schedule.tools import ScheduleTools
from dsh.runtime import Context, ServiceKey
from dsh.session import Session
from dsh.tools.registry import TOOLS

name = "schedule"
inject = ["agents", "tools", "sessions"]


class Config(msgspec.Struct, forbid_unknown_fields=True):
    live: bool = True


class CorruptScheduleLog(CorruptSessionLog):
    """A session whose ``schedule/change`` events cannot be replayed."""

    def __init__(self, session_id: str, error: ScheduleLogError) -> None:
        super().__init__(f'corrupt schedule log in session "{session_id}": {error}')
        self.session_id = session_id
        self.error = error


def check_session(session: Session) -> None:
    """Raise :class:`CorruptScheduleLog` when ``session``'s schedule events do not fold."""
    try:
        fold_session(session)
    except ScheduleLogError as exc:
        raise CorruptScheduleLog(session.id, exc) from None


class Schedule:
    """The ``schedule`` service: the owners of live agents and the corruption found at load."""

    def __init__(self, ctx: Context, live: bool) -> None:
        self._ctx = ctx
        self.live = live
        self.owners: dict[str, Owner] = {}
        self.corrupt: dict[str, CorruptScheduleLog] = {}

    def check(self, agent: Agent) -> None:
        """Raise the corruption found when ``agent`` appeared, if any."""
        error = self.corrupt.get(agent.id)
        if error is not None and error.session_id == agent.session.id:
            raise error

    def on_agent(self, agent: Agent) -> None:
        try:
            check_session(agent.session)
        except CorruptScheduleLog as exc:
            self.corrupt[agent.id] = exc
            return
        self.corrupt.pop(agent.id, None)
        if self.live:
            owner = Owner(self._ctx, agent)
            self.owners[agent.id] = owner
            owner.start()

    async def on_disposed(self, agent: Agent) -> None:
        owner = self.owners.get(agent.id)
        if owner is not None and owner.agent is agent:
            del self.owners[agent.id]
            await owner.stop()

    def poke(self, agent: Agent) -> None:
        owner = self.owners.get(agent.id)
        if owner is not None and owner.agent is agent:
            owner.poke()

    async def dispose(self) -> None:
        owners, self.owners = list(self.owners.values()), {}
        for owner in owners:
            await owner.stop()


SCHEDULE: ServiceKey[Schedule] = ServiceKey("schedule")


def apply(ctx: Context, config: Config) -> None:
    schedule = Schedule(ctx, config.live)
    tools = ScheduleTools(ctx, schedule.poke)
    registry = ctx.require(TOOLS)
    for tool in tools.tools():
        ctx.defer(registry.register(tool))
    ctx.on(AGENT_CREATED, lambda created: schedule.on_agent(created.agent))
    ctx.on(AGENT_DISPOSED, lambda disposed: schedule.on_disposed(disposed.agent))
    ctx.defer(schedule.dispose)
    for agent in ctx.require(AGENTS).list():
        schedule.on_agent(agent)
    ctx.provide(SCHEDULE, schedule)
