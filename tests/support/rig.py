"""The one rig builder: :func:`make_rig` mounts the agent spine (``dsh.compose.mount_spine``),
an optional store, scripted models (``dsh.testing.ScriptedAdapter``), the plugins and tools a
test chooses, and returns a typed :class:`Rig`.

A test folder that needs more conveniences subclasses :class:`Rig` (methods only) and passes
``rig_class``; the builder still builds it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from dsh.agent import Agent
from dsh.compose import mount_spine, store_entry
from dsh.persistence.base import SessionStore
from dsh.runtime import Context
from dsh.runtime.loader import PluginEntry
from dsh.session import Event, Session
from dsh.testing import Reply, ReplyFactory, ScriptedAdapter
from dsh.tools import Tool
from tests.support.clock import Clock

MODEL = "scripted"


class _RigModel:
    """The default of :meth:`Rig.agent`'s ``model``: the rig's first model (``None`` means none)."""


_RIG_MODEL = _RigModel()

R = TypeVar("R", bound="Rig")
Store = str | os.PathLike[str] | PluginEntry | SessionStore
PluginSpec = Any  # a plugin (module or object with ``apply``), or ``(plugin, config)``


class Rig:
    """A context with the agent spine, a scripted model and whatever the builder mounted.

    ``model`` serves the rig's model names; ``adapters`` holds every scripted adapter by model
    name. ``main`` is the agent the builder created (``agent_id=``); :meth:`agent` creates more.
    ``bus`` records ``(event, *args)`` for the events named in ``record=``.
    """

    def __init__(self, ctx: Context, model: ScriptedAdapter, clock: Clock | None = None) -> None:
        self.ctx = ctx
        self.model = model
        self.adapters: dict[str, ScriptedAdapter] = {}
        self.bus: list[tuple[Any, ...]] = []
        self._clock = clock
        self._main: Agent | None = None
        self.default_model: str | None = MODEL

    # -- what the builder made ------------------------------------------------------------

    @property
    def clock(self) -> Clock:
        assert self._clock is not None, "this rig was built without clock="
        return self._clock

    @property
    def main(self) -> Agent:
        assert self._main is not None, "this rig was built without agent_id="
        return self._main

    @property
    def session(self) -> Session:
        """The main agent's session."""
        return self.main.session

    @property
    def store(self) -> SessionStore:
        store: SessionStore = self.ctx.session_store
        return store

    @property
    def errors(self) -> list[BaseException]:
        """The errors ``agent/error`` reported (recorded when the builder was given ``record=("agent/error",)``)."""
        return [args[-1] for name, *args in self.bus if name == "agent/error"]

    # -- doing things -----------------------------------------------------------------------

    def agent(
        self,
        agent_id: str = "main",
        *,
        model: str | _RigModel | None = _RIG_MODEL,
        cwd: str | None = "/work",
        session_id: str | None = None,
    ) -> Agent:
        """A new agent on a fresh session (``model`` defaults to the rig's first model; ``None``
        is an agent without one)."""
        chosen = self.default_model if isinstance(model, _RigModel) else model
        agent: Agent = self.ctx.agent_loop.create(agent_id, model=chosen, cwd=cwd, session_id=session_id)
        return agent

    def record(self, *events: str) -> None:
        """Record ``(event, *args)`` for each named bus event into ``self.bus``."""
        for name in events:
            self.ctx.on(name, lambda *args, _n=name: self.bus.append((_n, *args)))

    def events(self, kind: str | None = None) -> list[Event]:
        """The main session's events (of one type)."""
        return [e for e in self.session.events if kind is None or e.type == kind]

    async def say(self, text: str, agent: Agent | None = None) -> None:
        """Send one text message to ``agent`` (default: main) and wait until it is idle."""
        agent = agent or self.main
        agent.send([{"type": "text", "text": text}])
        await agent.when_idle()

    async def dispose(self) -> None:
        await self.ctx.dispose()


async def make_rig(
    *replies: Reply | ReplyFactory | str,
    default: Reply | str | None = None,
    models: Sequence[str] = (MODEL,),
    adapters: Mapping[str, ScriptedAdapter] | None = None,
    loop_config: Mapping[str, Any] | None = None,
    store: Store | None = None,
    record: Sequence[str] = (),
    listeners: Sequence[tuple[str, Callable[..., Any]]] = (),
    plugins: Sequence[PluginSpec] = (),
    tools: Sequence[Tool] = (),
    clock: Clock | None = None,
    agent_id: str | None = None,
    cwd: str | None = "/work",
    session_id: str | None = None,
    rig_class: type[R] = Rig,  # type: ignore[assignment]
) -> R:
    """Build a rig, in this order:

    1. the agent spine with ``loop_config``, and ``store`` (a folder, ``sqlite:///FILE``, a DSN,
       a plugin entry or a store object) mounted before the loop, as the apps do;
    2. a :class:`ScriptedAdapter` with ``replies`` (then ``default``) serving ``models``, and
       each of ``adapters`` (model name → adapter);
    3. bus recording for ``record`` and the ``listeners`` (before the plugins, so an ordinary
       listener here runs after a plugin's early one);
    4. ``plugins`` in order (``plugin`` or ``(plugin, config)``), then ``tools``;
    5. with ``agent_id``, the main agent on the first model (``cwd``, ``session_id``).
    """
    ctx = Context()
    try:
        entry = store_entry(store) if isinstance(store, (str, os.PathLike)) else store
        await mount_spine(ctx, loop_config=loop_config, store=entry)
        model = ScriptedAdapter(replies, default=default)
        rig = rig_class(ctx, model, clock)
        rig.default_model = models[0] if models else None
        if models:
            ctx.defer(model.register(ctx, *models))
            rig.adapters.update(dict.fromkeys(models, model))
        for name, adapter in (adapters or {}).items():
            ctx.defer(adapter.register(ctx, name))
            rig.adapters[name] = adapter
        rig.record(*record)
        for event, listener in listeners:
            ctx.on(event, listener)
        for spec in plugins:
            plugin, config = spec if isinstance(spec, tuple) else (spec, None)
            await ctx.plugin(plugin, config)
        for tool in tools:
            ctx.tools.register(tool)
        if agent_id is not None:
            rig._main = rig.agent(agent_id, cwd=cwd, session_id=session_id)
    except BaseException:
        await ctx.dispose()
        raise
    return rig


class Rigs:
    """The rigs one test built through the ``rigs`` fixture; all disposed when the test ends."""

    def __init__(self) -> None:
        self.made: list[Rig] = []

    async def make(self, *replies: Reply | ReplyFactory | str, rig_class: type[R] = Rig, **options: Any) -> R:  # type: ignore[assignment]
        """:func:`make_rig` with the same arguments."""
        rig = await make_rig(*replies, rig_class=rig_class, **options)
        self.made.append(rig)
        return rig

    async def dispose(self) -> None:
        for rig in reversed(self.made):
            await rig.dispose()
