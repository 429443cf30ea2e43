"""The state one root ``Context`` shares with all its views and fibers, and dependency gating.

This module owns the service table (name -> value and the fiber that provides it) and the
gating around it: a plugin whose ``inject`` services are missing is parked as a pending fiber
and applied as soon as they all exist; when a service it injected is withdrawn, the plugin is
un-applied (back to pending) and re-applied when the service returns. The listener table comes
from :class:`~dsh.runtime.bus.BusState`.
"""

from __future__ import annotations

import asyncio
import logging
from contextvars import ContextVar
from typing import Literal, Protocol

from dsh.runtime.bus import BusState

__all__ = ["FiberState", "GatedFiber", "Host", "Service", "current_apply"]

_log = logging.getLogger("dsh.runtime")

FiberState = Literal["pending", "active", "failed", "disposed"]


class GatedFiber(Protocol):
    """What gating needs of a :class:`~dsh.runtime.context.Fiber`."""

    name: str
    inject: tuple[str, ...]
    state: FiberState
    _applying: bool

    def missing(self) -> list[str]: ...

    async def _apply(self) -> None: ...

    async def _suspend(self) -> None: ...


# The fiber whose apply() the current task is running, if any (see Host.service_added).
current_apply: ContextVar[GatedFiber | None] = ContextVar("dsh_current_apply", default=None)


class Service:
    """A provided service and the fiber that owns it."""

    __slots__ = ("owner", "value")

    def __init__(self, value: object, owner: GatedFiber) -> None:
        self.value = value
        self.owner = owner


class Host(BusState):
    """State shared by every ``Context`` view and ``Fiber`` under one root."""

    def __init__(self) -> None:
        super().__init__()
        self.services: dict[str, Service] = {}
        # Plugin fibers waiting for injected services, in load order (applied in that order).
        self.pending: list[GatedFiber] = []
        # Every live plugin fiber, to find dependents when a service is withdrawn.
        self.fibers: list[GatedFiber] = []
        self.settle_scheduled = False

    def service_added(self) -> None:
        current = current_apply.get()
        if current is not None and current._applying:
            # Provided from inside an apply(): whoever is applying that fiber (ctx.plugin() or
            # settle()) settles right after it, so dependents apply after their provider is
            # complete. Checked per task via a ContextVar, so a long-running apply elsewhere
            # does not delay unrelated plugins, and a task spawned by an apply (which inherits the
            # variable) schedules normally once that apply has finished.
            return
        if self.settle_scheduled:
            return
        if not any(not f.missing() for f in self.pending):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # No loop: the next ctx.plugin() call settles.
            return
        self.settle_scheduled = True

        async def run() -> None:
            self.settle_scheduled = False
            await self.settle()

        task = loop.create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def settle(self) -> None:
        """Apply every pending fiber whose injected services all exist, until none is left.

        A failure is the pending plugin's own problem: it is logged and recorded on the fiber
        (``fiber.error``, ``await fiber.ready()`` raises it), never raised into whichever plugin
        happened to provide the last missing service.
        """
        progressed = True
        while progressed:
            progressed = False
            for fiber in list(self.pending):
                if fiber not in self.pending or fiber.missing():
                    continue
                self.pending.remove(fiber)
                progressed = True
                try:
                    await fiber._apply()
                except Exception:
                    # Kept on ``fiber.error`` and reported by whoever awaits it (the loader
                    # names the entry); a traceback here would print the failure twice.
                    _log.debug('plugin "%s" failed to apply', fiber.name, exc_info=True)

    async def withdraw(self, name: str, entry: Service) -> None:
        if self.services.get(name) is not entry:
            return
        # Un-apply dependents *before* the service disappears so their disposers can still use it.
        for fiber in list(self.fibers):
            if fiber.state == "active" and name in fiber.inject:
                await fiber._suspend()
        if self.services.get(name) is entry:
            del self.services[name]
