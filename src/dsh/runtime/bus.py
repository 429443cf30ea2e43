"""The event bus: ordered listener lists per event name, and the four ways to dispatch.

This module owns listener registration (``prepend``, subject-scoped listeners, removal when the
owning fiber is disposed) and ``serial``/``waterfall``/``parallel``/``emit`` dispatch, as in the
reference's Cordis bus. :class:`EventBus` is the bus half of
:class:`~dsh.runtime.context.Context`; every view of one root shares one :class:`BusState`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar, overload

from dsh.runtime.keys import Chain, Hook, check_declared

__all__ = ["UNSCOPED", "BusState", "Disposer", "EffectOwner", "EventBus", "Listener"]

_log = logging.getLogger("dsh.runtime")

T = TypeVar("T")
P = TypeVar("P")
R = TypeVar("R")
# Listener arguments and results are whatever the event carries; the typed overloads of
# ``on``/``serial``/``waterfall`` check them for declared hooks.
Listener = Callable[..., object]
Disposer = Callable[[], object]


# Marks a listener registered on an unscoped view: it receives every dispatch.
UNSCOPED = object()


class _Registration:
    """One registered listener. ``removed`` lets an in-flight dispatch skip listeners that were
    removed after its snapshot was taken (a disposed plugin is never called again)."""

    __slots__ = ("fn", "removed", "subject")

    def __init__(self, fn: Listener, subject: object) -> None:
        self.fn = fn
        self.subject = subject
        self.removed = False

    def accepts(self, args: tuple[object, ...]) -> bool:
        if self.subject is UNSCOPED:
            return True
        return bool(args) and args[0] is self.subject


class BusState:
    """The listener table and background tasks shared by every view of one root."""

    def __init__(self) -> None:
        self.hooks: dict[str, list[_Registration]] = {}
        # Strong references to fire-and-forget tasks (asyncio only keeps weak ones).
        self.tasks: set[asyncio.Task[object]] = set()

    def spawn(self, coro: Awaitable[object], what: str) -> None:
        """Run ``coro`` as a task that nobody awaits; its failure is logged as ``what``."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            _log.error("%s: returned a coroutine outside a running event loop; dropped", what)
            if inspect.iscoroutine(coro):
                coro.close()
            return
        task = loop.create_task(_await(coro))
        self.tasks.add(task)

        def done(t: asyncio.Task[object]) -> None:
            self.tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                _log.error("%s failed", what, exc_info=t.exception())

        task.add_done_callback(done)


async def _await(aw: Awaitable[object]) -> object:
    return await aw


class EffectOwner(Protocol):
    """What a listener's owner (a :class:`~dsh.runtime.context.Fiber`) offers the bus."""

    def _check_alive(self) -> None: ...

    def _add_effect(self, disposer: Disposer) -> int: ...

    def _drop_effect(self, token: int) -> None: ...


class EventBus:
    """Registration and dispatch; a subclass binds ``_host``, ``_fiber`` and ``_subject``."""

    _host: BusState
    _fiber: EffectOwner
    _subject: object

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
        hook = _Registration(listener, self._subject)
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

    def _snapshot(self, event: str, args: tuple[object, ...]) -> list[_Registration]:
        return [h for h in self._host.hooks.get(event, ()) if h.accepts(args)]

    @overload
    async def serial(self, event: Hook[P], payload: P, /) -> object: ...

    @overload
    async def serial(self, event: str, *args: object) -> object: ...

    async def serial(self, event: str | Hook[object], *args: object) -> object:
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
    async def waterfall(self, event: str, *args: object, default: Callable[[], Awaitable[T]]) -> T: ...

    @overload
    async def waterfall(self, event: str, *args: object, default: Callable[[], T]) -> T: ...

    async def waterfall(
        self, event: str | Chain[object, object], *args: object, default: Callable[[], object]
    ) -> object:
        """Middleware chain: each listener is called ``listener(*args, next)``; ``await next()``
        runs the rest of the chain, which ends in ``default()`` (plain or async). Returns the
        chain's result."""
        event, args = _dispatch_args(event, args)
        hooks = self._snapshot(event, args)

        async def run(index: int) -> object:
            while index < len(hooks) and hooks[index].removed:
                index += 1
            if index >= len(hooks):
                value = default()
                return await value if inspect.isawaitable(value) else value

            async def next_() -> object:
                return await run(index + 1)

            result = hooks[index].fn(*args, next_)
            return await result if inspect.isawaitable(result) else result

        return await run(0)

    @overload
    async def parallel(self, event: Hook[P], payload: P, /) -> None: ...

    @overload
    async def parallel(self, event: str, *args: object) -> None: ...

    async def parallel(self, event: str | Hook[object], *args: object) -> None:
        """Run all listeners concurrently and wait for all of them; if any failed, raise the
        first failure (in listener order) once every listener has settled."""
        event, args = _dispatch_args(event, args)
        hooks = self._snapshot(event, args)

        async def call(hook: _Registration) -> None:
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
    def emit(self, event: str, *args: object) -> None: ...

    def emit(self, event: str | Hook[object], *args: object) -> None:
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
