"""Cancellation primitives: ``AbortController``, ``AbortSignal`` and ``AbortError``.

This module owns the cooperative-cancellation objects the harness passes around (per-step signals,
tool calls, LLM requests). They mirror the web platform's AbortController closely enough that the
reference semantics carry over: a signal is aborted at most once, keeps the reason it was given,
and notifies listeners synchronously at the moment of abort. That synchronous notification matters:
``agent.cancel()`` aborts the current step's signal *before* later ``agent/pre-step`` listeners run,
and they must observe ``signal.aborted`` immediately.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Protocol, TypeVar

__all__ = ["AbortController", "AbortError", "AbortSignal", "run_cancellable"]

T = TypeVar("T")

_log = logging.getLogger("dsh.runtime")


class AbortError(Exception):
    """The default abort reason, and what :meth:`AbortSignal.throw_if_aborted` raises for a
    reason that is not itself an exception."""

    def __init__(self, message: str = "aborted") -> None:
        super().__init__(message)


class AbortSignal:
    """Read side of an :class:`AbortController`.

    Listeners are zero-argument callables (read ``signal.reason`` for the why). A listener added
    after the abort is called right away, so "add a listener, then wait" never misses an abort.
    """

    __slots__ = ("_aborted", "_listeners", "_reason", "_waiters")

    def __init__(self) -> None:
        self._aborted = False
        self._reason: object = None
        self._listeners: list[Callable[[], object]] = []
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def reason(self) -> object:
        """The reason given to ``abort()`` (``None`` until aborted)."""
        return self._reason

    def add_listener(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` once when the signal aborts; returns a function that removes it."""
        if self._aborted:
            _call_listener(callback)
            return _noop
        self._listeners.append(callback)

        def remove() -> None:
            # Identity-based removal: the same callable may legitimately be added twice.
            for i, cb in enumerate(self._listeners):
                if cb is callback:
                    del self._listeners[i]
                    return

        return remove

    async def wait(self) -> None:
        """Return once the signal is aborted (immediately if it already is)."""
        if self._aborted:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        finally:
            # A cancelled waiter must not linger in the list and keep its loop alive.
            if fut in self._waiters:
                self._waiters.remove(fut)

    def throw_if_aborted(self) -> None:
        """Raise the abort reason (or an :class:`AbortError` describing it) if aborted."""
        if not self._aborted:
            return
        reason = self._reason
        if isinstance(reason, BaseException):
            raise reason
        raise AbortError(str(reason))

    def _abort(self, reason: object) -> None:
        if self._aborted:
            return
        self._aborted = True
        self._reason = reason
        listeners, self._listeners = self._listeners, []
        for cb in listeners:
            _call_listener(cb)
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                # Futures may belong to a loop in another thread only in misuse; call_soon_threadsafe
                # would hide that, so resolve directly.
                fut.set_result(None)

    @staticmethod
    def any(signals: Iterable[AbortSignal]) -> AbortSignal:
        """A signal that aborts as soon as any of ``signals`` does, with that signal's reason."""
        controller = AbortController()
        sources = list(signals)
        for s in sources:
            if s.aborted:
                controller.abort(s.reason)
                return controller.signal
        removers: list[Callable[[], None]] = []

        def make(src: AbortSignal) -> Callable[[], None]:
            def on_abort() -> None:
                controller.abort(src.reason)
                # Detach from the other sources so a long-lived parent signal does not keep
                # accumulating listeners from short-lived combined signals.
                for r in removers:
                    r()

            return on_abort

        for s in sources:
            removers.append(s.add_listener(make(s)))
        return controller.signal

    def __repr__(self) -> str:
        if self._aborted:
            return f"<AbortSignal aborted reason={self._reason!r}>"
        return "<AbortSignal>"


class AbortController:
    """Write side: owns one :class:`AbortSignal` and aborts it."""

    __slots__ = ("_signal",)

    def __init__(self) -> None:
        self._signal = AbortSignal()

    @property
    def signal(self) -> AbortSignal:
        return self._signal

    def abort(self, reason: object = None) -> None:
        """Abort the signal. ``reason`` defaults to ``AbortError("aborted")``; a second call is a
        no-op and keeps the first reason."""
        self._signal._abort(AbortError("aborted") if reason is None else reason)


class Abortable(Protocol):
    """What :func:`run_cancellable` needs of a signal (an :class:`AbortSignal` or a look-alike)."""

    @property
    def aborted(self) -> bool: ...

    def add_listener(self, callback: Callable[[], object], /) -> Callable[[], None]: ...


async def run_cancellable(
    work: Coroutine[object, object, T],
    signal: Abortable,
    aborted: Callable[[], BaseException],
    *,
    grace: Callable[[], float] | None = None,
    started: Callable[[asyncio.Task[T]], object] | None = None,
) -> T:
    """Run ``work`` as its own task and cancel it when ``signal`` aborts.

    Cancelling one child task interrupts code that does not watch the signal (a stream read, a
    tool) without racing every await. When the abort cancelled the task, ``aborted()`` is raised
    instead of :class:`asyncio.CancelledError`; a cancellation of the caller itself propagates
    (and cancels the child). ``grace()``, read at the moment of abort, delays the cancel by that
    many seconds so cooperative code can finish on its own; ``started`` receives the task.
    """
    loop = asyncio.get_running_loop()
    task = loop.create_task(work)
    if started is not None:
        started(task)
    timers: list[asyncio.TimerHandle] = []

    def on_abort() -> None:
        delay = grace() if grace is not None else 0.0
        if delay > 0:
            timers.append(loop.call_later(delay, task.cancel))
        else:
            task.cancel()

    remove = signal.add_listener(on_abort)
    try:
        return await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if signal.aborted and (current is None or not current.cancelling()):
            raise aborted() from None
        raise
    finally:
        remove()
        for timer in timers:
            timer.cancel()
        if not task.done():
            task.cancel()


def _call_listener(cb: Callable[[], object]) -> None:
    # An abort is triggered from arbitrary code (a cancel button, a tool); one faulty listener must
    # neither break the others nor blow up in the aborting caller.
    try:
        cb()
    except Exception:
        _log.exception("abort listener failed")


def _noop() -> None:
    return None
