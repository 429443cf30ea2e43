"""The plugin host and event bus: ``Context`` and ``Fiber``.

This module owns three tightly coupled things that share one table per root ``Context``:

* the **event bus** (ordered listener lists with ``serial``/``waterfall``/``parallel``/``emit``
  dispatch, prepend, snapshots, and subject-scoped listeners, as in the reference's Cordis bus);
* the **service table** (``ctx.provide("agents", registry)`` makes ``ctx.agents`` resolve on every
  view of the same root);
* **fibers**: one per plugin, owning everything registered through the plugin's context view, so
  disposal (or a failed ``apply``) undoes exactly that plugin's effects, children first.

Dependency gating also lives here: a plugin whose ``inject`` services are missing is parked as a
pending fiber and applied as soon as they all exist; when a service it injected is withdrawn, the
plugin is un-applied (back to pending) and re-applied when the service returns.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from typing import Any, Literal, TypeVar, cast, overload

from dsh.runtime.config import validate_config
from dsh.runtime.keys import Chain, Hook, MissingServiceError, ServiceKey, check_declared

__all__ = ["Context", "Fiber", "FiberState", "NotAPluginError"]

_log = logging.getLogger("dsh.runtime")

T = TypeVar("T")
D = TypeVar("D")
P = TypeVar("P")
R = TypeVar("R")
FiberState = Literal["pending", "active", "failed", "disposed"]
Listener = Callable[..., Any]
Disposer = Callable[[], object]

# Marks a listener registered on an unscoped view: it receives every dispatch.
_UNSCOPED: Any = object()

# The fiber whose apply() the current task is running, if any (see _Host.service_added).
_current_apply: ContextVar[Fiber | None] = ContextVar("dsh_current_apply", default=None)


class _Hook:
    """One registered listener. ``removed`` lets an in-flight dispatch skip listeners that were
    removed after its snapshot was taken (a disposed plugin is never called again)."""

    __slots__ = ("fn", "removed", "subject")

    def __init__(self, fn: Listener, subject: object) -> None:
        self.fn = fn
        self.subject = subject
        self.removed = False

    def accepts(self, args: tuple[Any, ...]) -> bool:
        if self.subject is _UNSCOPED:
            return True
        return bool(args) and args[0] is self.subject


class _Service:
    __slots__ = ("owner", "value")

    def __init__(self, value: object, owner: Fiber) -> None:
        self.value = value
        self.owner = owner


class _Host:
    """State shared by every ``Context`` view and ``Fiber`` under one root."""

    def __init__(self) -> None:
        self.hooks: dict[str, list[_Hook]] = {}
        self.services: dict[str, _Service] = {}
        # Plugin fibers waiting for injected services, in load order (applied in that order).
        self.pending: list[Fiber] = []
        # Every live plugin fiber, to find dependents when a service is withdrawn.
        self.fibers: list[Fiber] = []
        # Strong references to fire-and-forget tasks (asyncio only keeps weak ones).
        self.tasks: set[asyncio.Task[Any]] = set()
        self.settle_scheduled = False

    def spawn(self, coro: Awaitable[Any], what: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            _log.error("%s: returned a coroutine outside a running event loop; dropped", what)
            if inspect.iscoroutine(coro):
                coro.close()
            return
        task = loop.create_task(_await(coro))
        self.tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self.tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                _log.error("%s failed", what, exc_info=t.exception())

        task.add_done_callback(done)

    def service_added(self) -> None:
        current = _current_apply.get()
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

    async def withdraw(self, name: str, entry: _Service) -> None:
        if self.services.get(name) is not entry:
            return
        # Un-apply dependents *before* the service disappears so their disposers can still use it.
        for fiber in list(self.fibers):
            if fiber.state == "active" and name in fiber.inject:
                await fiber._suspend()
        if self.services.get(name) is entry:
            del self.services[name]


async def _await(aw: Awaitable[Any]) -> Any:
    return await aw


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
        host: _Host,
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
        self.ctx = Context._view(host, self, _UNSCOPED) if ctx is None else ctx

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
        token = _current_apply.set(self)
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
            _current_apply.reset(token)
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


def _plugin_name(plugin: object) -> str:
    name = getattr(plugin, "name", None)
    if isinstance(name, str) and name:
        return name
    fallback = getattr(plugin, "__name__", None)
    return fallback if isinstance(fallback, str) else type(plugin).__name__


class NotAPluginError(TypeError):
    """``ctx.plugin(x)`` with something that is not a plugin; the text names what is missing."""


def _check_plugin(plugin: object) -> None:
    """Refuse a non-plugin in one line naming what it lacks, before the runtime calls into it.

    A plugin has ``name`` (a non-empty string; a module or class may rely on its own name) and a
    callable ``apply(ctx, config)``; a class without ``apply`` is applied by constructing it
    with ``(ctx, config)``, so its constructor must accept that.
    """
    is_type = isinstance(plugin, type)
    name = getattr(plugin, "name", None)
    has_name = (isinstance(name, str) and bool(name)) or is_type or inspect.ismodule(plugin)
    apply = getattr(plugin, "apply", None)
    what = repr(name) if isinstance(name, str) and name else _describe_object(plugin)
    if apply is not None and not callable(apply):
        raise NotAPluginError(f"{what} is not a plugin: its apply is not callable")
    if apply is None and isinstance(plugin, type):
        try:
            inspect.signature(plugin).bind(None, None)
        except (TypeError, ValueError):
            raise NotAPluginError(
                f"{what} is not a plugin: it has no apply(ctx, config) and its constructor does "
                "not take (ctx, config)"
            ) from None
        apply = plugin
    missing = [part for part, ok in (("name", has_name), ("apply(ctx, config)", apply is not None)) if not ok]
    if missing:
        hint = " (load a plugin by name with dsh.runtime.resolve_plugin)" if isinstance(plugin, str) else ""
        raise NotAPluginError(f"{what} is not a plugin: it has no {' and '.join(missing)}{hint}")


def _describe_object(value: object) -> str:
    text = repr(value)
    if len(text) > 60 or "\n" in text:
        text = f"<{type(value).__name__} object>"
    return text


def _plugin_inject(plugin: object, name: str) -> tuple[str, ...]:
    inject = getattr(plugin, "inject", None)
    if inject is None:
        return ()
    if isinstance(inject, str) or not isinstance(inject, Iterable):
        raise TypeError(f'plugin "{name}": inject must be a list of service names')
    items = tuple(inject)
    if not all(isinstance(i, str) for i in items):
        raise TypeError(f'plugin "{name}": inject must be a list of service names')
    return cast(tuple[str, ...], items)


class Context:
    """The plugin host and event bus.

    ``Context()`` creates a root. Each plugin's ``apply(ctx, config)`` receives a view of the same
    root bound to the plugin's own :class:`Fiber`; :meth:`scoped` makes a view whose listeners only
    see dispatches about one subject. Services are attributes: ``ctx.agents`` looks up the
    ``"agents"`` service and raises ``AttributeError`` naming it when nobody provides it.
    """

    _host: _Host
    _fiber: Fiber
    _subject: object

    def __init__(self) -> None:
        host = _Host()
        object.__setattr__(self, "_host", host)
        object.__setattr__(self, "_subject", _UNSCOPED)
        # The root fiber's view is this very object.
        object.__setattr__(self, "_fiber", Fiber(host, "root", state="active", ctx=self))

    @classmethod
    def _view(cls, host: _Host, fiber: Fiber, subject: object) -> Context:
        view = cls.__new__(cls)
        object.__setattr__(view, "_host", host)
        object.__setattr__(view, "_fiber", fiber)
        object.__setattr__(view, "_subject", subject)
        return view

    def __repr__(self) -> str:
        scope = "" if self._subject is _UNSCOPED else f" scoped={self._subject!r}"
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
        """Publish ``service`` as ``ctx.<name>``, owned by this view's fiber.

        Providing a name that another live fiber provides is an error (two plugins silently
        fighting over ``ctx.llm`` is a configuration bug); the owner may replace its own value.
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
        entry = _Service(service, fiber)
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
        _check_plugin(plugin)
        name = _plugin_name(plugin)
        inject = _plugin_inject(plugin, name)
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

    # -- bus ------------------------------------------------------------------------------------

    @overload
    def on(
        self, event: Hook[P], listener: Callable[[P], object], *, prepend: bool = False
    ) -> Callable[[], None]: ...

    @overload
    def on(
        self,
        event: Chain[P, R],
        listener: Callable[[P, Callable[[], Awaitable[R]]], Awaitable[R] | R],
        *,
        prepend: bool = False,
    ) -> Callable[[], None]: ...

    @overload
    def on(self, event: str, listener: Listener, *, prepend: bool = False) -> Callable[[], None]: ...

    def on(
        self, event: str | Hook[object] | Chain[object, object], listener: Listener, *, prepend: bool = False
    ) -> Callable[[], None]:
        """Register ``listener`` (plain or async) for ``event``; returns a remover.

        ``event`` is a declared :class:`Hook`/:class:`Chain` (the listener gets its payload) or a
        string name (the listener gets the payload's fields positionally). A namespaced name
        (``agent/...``) that no hook declares is refused here, so a misspelling cannot go
        unnoticed. ``prepend=True`` puts the listener in front of every listener registered so
        far (the most recent prepend runs first). The listener is removed automatically when
        this fiber is disposed.
        """
        fiber = self._fiber
        fiber._check_alive()
        if isinstance(event, (Hook, Chain)):
            listener = _payload_listener(event, listener)
            event = event.name
        else:
            check_declared(event)
        hook = _Hook(listener, self._subject)
        hooks = self._host.hooks.setdefault(event, [])
        if prepend:
            hooks.insert(0, hook)
        else:
            hooks.append(hook)

        def remove() -> None:
            if hook.removed:
                return
            hook.removed = True
            for i, h in enumerate(hooks):
                if h is hook:
                    del hooks[i]
                    break
            fiber._drop_effect(token)

        token = fiber._add_effect(remove)
        return remove

    def _snapshot(self, event: str, args: tuple[Any, ...]) -> list[_Hook]:
        return [h for h in self._host.hooks.get(event, ()) if h.accepts(args)]

    @overload
    async def serial(self, event: Hook[P], payload: P, /) -> object: ...

    @overload
    async def serial(self, event: str, *args: Any) -> Any: ...

    async def serial(self, event: str | Hook[object], *args: Any) -> Any:
        """Await listeners in order. An exception propagates and stops the dispatch; a result
        other than ``None``/``False`` stops it and is returned (else ``None``)."""
        event, args = _dispatch_args(event, args)
        for hook in self._snapshot(event, args):
            if hook.removed:
                continue
            result = hook.fn(*args)
            if inspect.isawaitable(result):
                result = await result
            if result is not None and result is not False:
                return result
        return None

    # Two overloads so both `default=async_fn` and `default=lambda: value` infer T; a single
    # `Callable[[], Awaitable[T] | T]` makes mypy solve T as the coroutine type or Never.
    @overload
    async def waterfall(
        self, event: Chain[P, R], payload: P, /, *, default: Callable[[], Awaitable[R]]
    ) -> R: ...

    @overload
    async def waterfall(self, event: Chain[P, R], payload: P, /, *, default: Callable[[], R]) -> R: ...

    @overload
    async def waterfall(self, event: str, *args: Any, default: Callable[[], Awaitable[T]]) -> T: ...

    @overload
    async def waterfall(self, event: str, *args: Any, default: Callable[[], T]) -> T: ...

    async def waterfall(self, event: str | Chain[object, object], *args: Any, default: Callable[[], Any]) -> Any:
        """Middleware chain: each listener is called ``listener(*args, next)``; ``await next()``
        runs the rest of the chain, which ends in ``default()`` (plain or async). Returns the
        chain's result."""
        event, args = _dispatch_args(event, args)
        hooks = self._snapshot(event, args)

        async def run(index: int) -> Any:
            while index < len(hooks) and hooks[index].removed:
                index += 1
            if index >= len(hooks):
                value = default()
                return await value if inspect.isawaitable(value) else value

            async def next_() -> Any:
                return await run(index + 1)

            result = hooks[index].fn(*args, next_)
            return await result if inspect.isawaitable(result) else result

        return await run(0)

    @overload
    async def parallel(self, event: Hook[P], payload: P, /) -> None: ...

    @overload
    async def parallel(self, event: str, *args: Any) -> None: ...

    async def parallel(self, event: str | Hook[object], *args: Any) -> None:
        """Run all listeners concurrently and wait for all of them; if any failed, raise the
        first failure (in listener order) once every listener has settled."""
        event, args = _dispatch_args(event, args)
        hooks = self._snapshot(event, args)

        async def call(hook: _Hook) -> None:
            if hook.removed:
                return
            result = hook.fn(*args)
            if inspect.isawaitable(result):
                await result

        results = await asyncio.gather(*(call(h) for h in hooks), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    @overload
    def emit(self, event: Hook[P], payload: P, /) -> None: ...

    @overload
    def emit(self, event: str, *args: Any) -> None: ...

    def emit(self, event: str | Hook[object], *args: Any) -> None:
        """Fire and forget: call listeners synchronously; a listener's exception is logged, and a
        coroutine result runs as a task whose failure is logged."""
        event, args = _dispatch_args(event, args)
        for hook in self._snapshot(event, args):
            if hook.removed:
                continue
            what = f'listener for "{event}"'
            try:
                result = hook.fn(*args)
            except Exception:
                _log.exception("%s failed", what)
                continue
            if inspect.isawaitable(result):
                self._host.spawn(result, what)

    def listeners(self, event: str | Hook[object] | Chain[object, object]) -> int:
        """How many listeners are registered for ``event`` (all scopes); for diagnostics."""
        name = event if isinstance(event, str) else event.name
        return len(self._host.hooks.get(name, ()))


def _service_name(name: str | ServiceKey[object]) -> str:
    return name.name if isinstance(name, ServiceKey) else name


def _dispatch_args(
    event: str | Hook[object] | Chain[object, object], args: tuple[object, ...]
) -> tuple[str, tuple[object, ...]]:
    """A typed dispatch ``(hook, payload)`` as the positional arguments every listener list
    holds; a string dispatch unchanged."""
    if isinstance(event, str):
        return event, args
    if len(args) != 1:
        raise TypeError(f'hook "{event.name}" is dispatched with exactly one payload')
    return event.name, event.args(args[0])


def _payload_listener(event: Hook[object] | Chain[object, object], listener: Listener) -> Listener:
    def call(*args: object) -> object:
        payload, rest = event.build(args)
        return listener(payload, *rest)

    call.__qualname__ = getattr(listener, "__qualname__", "listener")
    return call
