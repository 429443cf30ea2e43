"""``AbortController`` / ``AbortSignal`` behaviour."""

from __future__ import annotations

import asyncio

import pytest

from dsh.runtime import AbortController, AbortError, AbortSignal


def test_default_reason_is_abort_error() -> None:
    c = AbortController()
    assert not c.signal.aborted
    assert c.signal.reason is None
    c.abort()
    assert c.signal.aborted
    assert isinstance(c.signal.reason, AbortError)
    assert str(c.signal.reason) == "aborted"


def test_reason_is_kept_and_first_abort_wins() -> None:
    c = AbortController()
    c.abort("user cancelled")
    c.abort("second")
    assert c.signal.reason == "user cancelled"


def test_listeners_run_synchronously_once_and_can_be_removed() -> None:
    c = AbortController()
    calls: list[str] = []
    c.signal.add_listener(lambda: calls.append("a"))
    remove = c.signal.add_listener(lambda: calls.append("b"))
    remove()
    c.abort()
    assert calls == ["a"]
    c.abort()
    assert calls == ["a"]
    # Added after the abort: called right away.
    c.signal.add_listener(lambda: calls.append("late"))
    assert calls == ["a", "late"]


def test_failing_listener_does_not_break_abort() -> None:
    c = AbortController()
    calls: list[str] = []

    def bad() -> None:
        raise RuntimeError("x")

    c.signal.add_listener(bad)
    c.signal.add_listener(lambda: calls.append("ok"))
    c.abort()
    assert calls == ["ok"]


def test_throw_if_aborted() -> None:
    c = AbortController()
    c.signal.throw_if_aborted()
    err = ValueError("why")
    c.abort(err)
    with pytest.raises(ValueError, match="why"):
        c.signal.throw_if_aborted()
    c2 = AbortController()
    c2.abort("text reason")
    with pytest.raises(AbortError, match="text reason"):
        c2.signal.throw_if_aborted()


async def test_wait() -> None:
    c = AbortController()
    waiter = asyncio.create_task(c.signal.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    c.abort()
    await asyncio.wait_for(waiter, 1)
    await c.signal.wait()  # already aborted: returns at once


async def test_cancelled_wait_does_not_linger() -> None:
    c = AbortController()
    waiter = asyncio.create_task(c.signal.wait())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert c.signal._waiters == []


def test_any_follows_first_source() -> None:
    a, b = AbortController(), AbortController()
    combined = AbortSignal.any([a.signal, b.signal])
    assert not combined.aborted
    b.abort("b")
    assert combined.aborted and combined.reason == "b"
    assert a.signal._listeners == []  # detached from the other source
    pre = AbortController()
    pre.abort("pre")
    assert AbortSignal.any([pre.signal]).reason == "pre"
