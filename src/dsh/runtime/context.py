"""The plugin host: ``Context`` (the view plugins receive) and ``Fiber`` (one plugin's lifetime).

This module owns the service methods (``provide``/``require``/``get``/``has``), loading a plugin
as a child fiber (``ctx.plugin``), and fibers: one per plugin, owning everything registered
through the plugin's context view, so disposal (or a failed ``apply``) undoes exactly that
plugin's effects, children first. The bus methods come from :mod:`dsh.runtime.bus`, the shared
tables and dependency gating from :mod:`dsh.runtime.host`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, TypeVar, cast, overload

from dsh.runtime.bus import UNSCOPED, Disposer, EventBus
from dsh.runtime.config import validate_config
from dsh.runtime.host import FiberState, Host, Service, current_apply
from dsh.runtime.keys import MissingServiceError, ServiceKey
from dsh.runtime.plugin_shape import NotAPluginError, check_plugin, plugin_inject, plugin_name

__all__ = ["Context", "Fiber", "FiberState", "NotAPluginError"]

_log = logging.getLogger("dsh.runtime")

T = TypeVar("T")
D = TypeVar("D")


async def _run_disposer(disposer: Disposer, owner: str) -> None:
    try:
        result = disposer()
        if inspect.isawaitable(result):
            await result
    except Exception:
        # Disposal keeps going: one broken disposer must not leak every other registration.
        _log.exception('disposer of "%s" failed', owner)


class Fiber:
    """The lifetime of one plugin (or of the root): owns its listeners, services, disposers and
    child plugins, and undoes them in reverse order (children first) on ``dispose()``."""

    def __init__(
        self,
        host: Host,
        name: str,
        *,
        plugin: object = None,
        config: object = None,
        parent: Fiber | None = None,
        inject: tuple[str, ...] = (),
        state: FiberState = "pending",
        ctx: Context | None = None,
    ) -> None:
        self._host = host
        self.name = name
        self.plugin = plugin
        self.config = config
        self.parent = parent
        self.inject = inject
        self.state: FiberState = state
        self.error: BaseException | None = None
        self._effects: dict[int, Disposer] = {}
        self._next_token = 0
        self._children: list[Fiber] = []
        self._applying = False
        self._changed = asyncio.Event()
        self.ctx = Context._view(host, self, UNSCOPED) if ctx is None else ctx

    def __repr__(self) -> str:
        return f"<Fiber {self.name!r} {self.state}>"

    @property
    def children(self) -> tuple[Fiber, ...]:
        return tuple(self._children)

    def missing(self) -> list[str]:
        """Injected services that are not currently provided."""
        return [n for n in self.inject if n not in self._host.services]

    async def ready(self) -> None:
        """Wait until the plugin is applied. Raises its error if it failed, or ``RuntimeError``
        if it was disposed first."""
        while True:
            if self.state == "active":
                return
            if self.state == "failed":
                assert self.error is not None
                raise self.error
            if self.state == "disposed":
                raise RuntimeError(f'plugin "{self.name}" was disposed before it was applied')
            await self._changed.wait()

    async def dispose(self) -> None:
        """Undo everything this fiber registered (children first, then its own effects in reverse
        order) and detach it from its parent. Idempotent."""
        if self.state == "disposed":
            return
        self._set_state("disposed")
        host = self._host
        if self in host.pending:
            host.pending.remove(self)
        await self._undo()
        if self in host.fibers:
            host.fibers.remove(self)
        if self.parent is not None and self in self.parent._children:
            self.parent._children.remove(self)

    # -- internals ------------------------------------------------------------------------------

    def _set_state(self, state: FiberState) -> None:
        self.state = state
        # Wake every ready() waiter; they re-check the state in a loop.
        ev, self._changed = self._changed, asyncio.Event()
        ev.set()

    def _check_alive(self) -> None:
        if self.state in ("disposed", "failed"):
            raise RuntimeError(f'plugin "{self.name}" is {self.state}; cannot register on it')

    def _add_effect(self, disposer: Disposer) -> int:
        self._check_alive()
        token = self._next_token
        self._next_token += 1
        self._effects[token] = disposer
        return token

    def _drop_effect(self, token: int) -> None:
        self._effects.pop(token, None)

    async def _undo(self) -> None:
        for child in reversed(list(self._children)):
            await child.dispose()
        while self._effects:
            # Pop one at a time: a disposer may itself register or drop effects.
            token = next(reversed(self._effects))
            disposer = self._effects.pop(token)
            await _run_disposer(disposer, self.name)

    async def _apply(self) -> None:
        host = self._host
        apply = getattr(self.plugin, "apply", None)
        self._applying = True
        token = current_apply.set(self)
        try:
            if apply is not None:
                result = apply(self.ctx, self.config)
            elif isinstance(self.plugin, type):
                # Class form: constructing the class is the apply step.
                result = self.plugin(self.ctx, self.config)
            else:
                raise TypeError(f'plugin "{self.name}" has no apply()')
            if inspect.isawaitable(result):
                await result
        except BaseException as exc:
            # Roll back whatever the plugin managed to register before failing.
            await self._undo()
            self.error = exc
            if self in host.fibers:
                host.fibers.remove(self)
            if self.parent is not None and self in self.parent._children:
                self.parent._children.remove(self)
            # Disposed mid-apply (its parent went away): stay disposed rather than "failed".
            if self.state != "disposed":
                self._set_state("failed")
            raise
        finally:
            self._applying = False
            current_apply.reset(token)
        if self.state == "disposed":
            # Disposed while apply() was still running: undo what it registered before that.
            await self._undo()
            return
        self.error = None
        self._set_state("active")

    async def _suspend(self) -> None:
        """A dependency went away: undo our registrations and wait for it to come back."""
        if self.state != "active":
            return
        self._set_state("pending")
        await self._undo()
        # Re-read through a cast: mypy keeps the "active" narrowing across the await, but a
        # disposer may have disposed this fiber meanwhile.
        if cast(FiberState, self.state) == "pending" and self not in self._host.pending:
            self._host.pending.append(self)


class Context(EventBus):
    """The plugin host and event bus.

    ``Context()`` creates a root. Each plugin's ``apply(ctx, config)`` receives a view of the same
    root bound to the plugin's own :class:`Fiber`; :meth:`scoped` makes a view whose listeners only
    see dispatches about one subject. Services are looked up by typed key
    (``ctx.require(AGENTS)``); attribute access (``ctx.agents``) remains as sugar for scripts and
    tests, and raises ``AttributeError`` naming the service when nobody provides it.
    """

    _host: Host
    _fiber: Fiber
    _subject: object

    def __init__(self) -> None:
        host = Host()
        object.__setattr__(self, "_host", host)
        object.__setattr__(self, "_subject", UNSCOPED)
        # The root fiber's view is this very object.
        object.__setattr__(self, "_fiber", Fiber(host, "root", state="active", ctx=self))

    @classmethod
    def _view(cls, host: Host, fiber: Fiber, subject: object) -> Context:
        view = cls.__new__(cls)
        object.__setattr__(view, "_host", host)
        object.__setattr__(view, "_fiber", fiber)
        object.__setattr__(view, "_subject", subject)
        return view

    def __repr__(self) -> str:
        scope = "" if self._subject is UNSCOPED else f" scoped={self._subject!r}"
        return f"<Context fiber={self._fiber.name!r}{scope}>"

    # -- services -------------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails. Private names never resolve to services, which
        # also keeps copy/pickle probing from recursing through a half-built instance.
        if name.startswith("_"):
            raise AttributeError(name)
        entry = self._host.services.get(name)
        if entry is None:
            raise AttributeError(f'service "{name}" is not available on this context')
        return entry.value

    @property
    def fiber(self) -> Fiber:
        """The fiber that owns registrations made through this view."""
        return self._fiber

    @property
    def root(self) -> Context:
        """A view of the root fiber."""
        fiber = self._fiber
        while fiber.parent is not None:
            fiber = fiber.parent
        return fiber.ctx

    def has(self, name: str | ServiceKey[object]) -> bool:
        """Whether service ``name`` (a name or a :class:`ServiceKey`) is currently provided."""
        return _service_name(name) in self._host.services

    @overload
    def get(self, name: ServiceKey[T]) -> T | None: ...

    @overload
    def get(self, name: ServiceKey[T], default: D) -> T | D: ...

    @overload
    def get(self, name: str, default: Any = None) -> Any: ...

    def get(self, name: str | ServiceKey[object], default: Any = None) -> Any:
        """Service ``name`` or ``default``; with a :class:`ServiceKey` the result is typed."""
        entry = self._host.services.get(_service_name(name))
        return default if entry is None else entry.value

    def require(self, key: ServiceKey[T]) -> T:
        """The service ``key`` names; :class:`MissingServiceError` naming it when nobody
        provides it (a plugin that needs it lists it in ``inject``)."""
        entry = self._host.services.get(key.name)
        if entry is None:
            raise MissingServiceError(f'service "{key.name}" is not available on this context')
        return cast(T, entry.value)

    @overload
    def provide(self, name: ServiceKey[T], service: T) -> None: ...

    @overload
    def provide(self, name: str, service: object) -> None: ...

    def provide(self, name: str | ServiceKey[object], service: object) -> None:
        """Publish ``service`` under ``name`` (a :class:`ServiceKey` or its name), owned by this
        view's fiber.

        Providing a name that another live fiber provides is an error (two plugins silently
        fighting over ``LLM`` is a configuration bug); the owner may replace its own value.
        """
        name = _service_name(name)
        if not name.isidentifier() or name.startswith("_") or hasattr(Context, name):
            raise ValueError(f'invalid service name "{name}"')
        fiber = self._fiber
        fiber._check_alive()
        host = self._host
        existing = host.services.get(name)
        if existing is not None:
            if existing.owner is fiber:
                existing.value = service
                return
            raise RuntimeError(
                f'service "{name}" is already provided by plugin "{existing.owner.name}"'
            )
        entry = Service(service, fiber)
        fiber._add_effect(lambda: host.withdraw(name, entry))
        host.services[name] = entry
        host.service_added()

    def defer(self, disposer: Disposer) -> None:
        """Run ``disposer()`` (awaited if it returns an awaitable) when this fiber is disposed."""
        self._fiber._add_effect(disposer)

    # -- plugins --------------------------------------------------------------------------------

    async def plugin(self, plugin: object, config: object = None) -> Fiber:
        """Load ``plugin`` as a child of this view's fiber and return its fiber.

        The config is validated first (``ConfigError``). If every ``inject`` service exists the
        plugin is applied before this returns and any failure raises here, with everything the
        plugin registered rolled back. Otherwise the fiber is returned ``pending`` and applied
        when its services appear (``await fiber.ready()`` to wait for that).
        """
        parent = self._fiber
        parent._check_alive()
        host = self._host
        check_plugin(plugin)
        name = plugin_name(plugin)
        inject = plugin_inject(plugin, name)
        validated = validate_config(getattr(plugin, "Config", None), config)
        fiber = Fiber(host, name, plugin=plugin, config=validated, parent=parent, inject=inject)
        parent._children.append(fiber)
        host.fibers.append(fiber)
        if fiber.missing():
            host.pending.append(fiber)
            return fiber
        await fiber._apply()
        # Services this plugin provided may unblock pending plugins: apply them now, so that
        # once a sequence of ctx.plugin() calls returns everything satisfiable is applied.
        await host.settle()
        return fiber

    async def dispose(self) -> None:
        """Dispose this view's fiber (for the root: every plugin and registration)."""
        await self._fiber.dispose()

    def scoped(self, subject: object) -> Context:
        """A view whose ``on`` registrations only receive dispatches with ``args[0] is subject``.
        Everything else (services, fiber ownership, dispatching) is shared with this view."""
        return Context._view(self._host, self._fiber, subject)


def _service_name(name: str | ServiceKey[object]) -> str:
    return name.name if isinstance(name, ServiceKey) else name
