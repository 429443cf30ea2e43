"""Event bus semantics of ``dsh.runtime.Context`` (docs/agent-loop.md)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.runtime import Context


async def test_prepend_inserts_in_front_and_latest_prepend_runs_first() -> None:
    ctx = Context()
    order: list[str] = []
    ctx.on("e", lambda: order.append("a"))
    ctx.on("e", lambda: order.append("p1"), prepend=True)
    ctx.on("e", lambda: order.append("b"))
    ctx.on("e", lambda: order.append("p2"), prepend=True)
    await ctx.serial("e")
    assert order == ["p2", "p1", "a", "b"]


@given(st.lists(st.booleans(), max_size=12))
def test_prepend_order_matches_deque_model(prepends: list[bool]) -> None:
    async def run() -> list[int]:
        ctx = Context()
        seen: list[int] = []
        for i, prepend in enumerate(prepends):
            ctx.on("e", lambda i=i: seen.append(i), prepend=prepend)
        await ctx.serial("e")
        return seen

    model: list[int] = []
    for i, prepend in enumerate(prepends):
        if prepend:
            model.insert(0, i)
        else:
            model.append(i)
    assert asyncio.run(run()) == model


async def test_serial_awaits_in_order_and_mixes_sync_and_async() -> None:
    ctx = Context()
    order: list[str] = []

    async def slow(x: int) -> None:
        await asyncio.sleep(0.01)  # a slow handler (scripted): serial must wait for it
        order.append(f"slow{x}")

    ctx.on("e", slow)
    ctx.on("e", lambda x: order.append(f"sync{x}"))
    assert await ctx.serial("e", 1) is None
    assert order == ["slow1", "sync1"]


@pytest.mark.parametrize("value", [1, 0, "", "x", True, [], {"a": 1}])
async def test_serial_bails_on_anything_but_none_and_false(value: object) -> None:
    ctx = Context()
    later: list[bool] = []
    ctx.on("e", lambda: None)
    ctx.on("e", lambda: False)
    ctx.on("e", lambda: value)
    ctx.on("e", lambda: later.append(True))
    assert await ctx.serial("e") == value
    assert later == []


async def test_serial_async_bail_value_is_returned() -> None:
    ctx = Context()

    async def bail() -> str:
        return "stop"

    ctx.on("e", bail)
    assert await ctx.serial("e") == "stop"


async def test_serial_exception_propagates_and_stops() -> None:
    ctx = Context()
    later: list[bool] = []

    async def boom() -> None:
        raise KeyError("bad")

    ctx.on("e", boom)
    ctx.on("e", lambda: later.append(True))
    with pytest.raises(KeyError):
        await ctx.serial("e")
    assert later == []


async def test_serial_without_listeners_returns_none() -> None:
    assert await Context().serial("nothing", 1, 2) is None


async def test_waterfall_chains_middleware_to_default() -> None:
    ctx = Context()
    calls: list[str] = []

    async def outer(x: int, next_: Any) -> int:
        calls.append("outer-in")
        result: int = await next_()
        calls.append("outer-out")
        return result * 10

    def inner(x: int, next_: Any) -> Any:
        calls.append("inner")
        return next_()  # a plain listener may return the awaitable

    async def default() -> int:
        calls.append("default")
        return 7

    ctx.on("w", outer)
    ctx.on("w", inner)
    assert await ctx.waterfall("w", 1, default=default) == 70
    assert calls == ["outer-in", "inner", "default", "outer-out"]


async def test_waterfall_short_circuit_and_sync_default() -> None:
    ctx = Context()
    assert await ctx.waterfall("w", default=lambda: "d") == "d"
    ran_default: list[bool] = []

    def default() -> str:
        ran_default.append(True)
        return "d"

    ctx.on("w", lambda _next: "short")
    assert await ctx.waterfall("w", default=default) == "short"
    assert ran_default == []


async def test_waterfall_exception_propagates() -> None:
    ctx = Context()

    async def bad(next_: Any) -> None:
        raise RuntimeError("nope")

    ctx.on("w", bad)
    with pytest.raises(RuntimeError, match="nope"):
        await ctx.waterfall("w", default=lambda: None)


async def test_parallel_runs_concurrently() -> None:
    ctx = Context()
    gate = asyncio.Event()
    started: list[str] = []

    async def first() -> None:
        started.append("first")
        await gate.wait()

    async def second() -> None:
        started.append("second")
        gate.set()  # would deadlock if run after first() completed

    ctx.on("p", first)
    ctx.on("p", second)
    await asyncio.wait_for(ctx.parallel("p"), 1)
    assert started == ["first", "second"]


async def test_parallel_raises_first_failure_after_all_settle() -> None:
    ctx = Context()
    finished: list[str] = []

    async def fails_late() -> None:
        await asyncio.sleep(0.02)  # scripted: fails after the early failure
        raise ValueError("late")

    async def fails_early() -> None:
        raise KeyError("early")

    async def succeeds() -> None:
        await asyncio.sleep(0.04)  # scripted: settles last, and parallel must wait for it
        finished.append("ok")

    ctx.on("p", fails_late)
    ctx.on("p", fails_early)
    ctx.on("p", succeeds)
    with pytest.raises(ValueError, match="late"):
        await ctx.parallel("p")
    assert finished == ["ok"]


async def test_emit_contains_and_logs_failures(caplog: pytest.LogCaptureFixture) -> None:
    ctx = Context()
    seen: list[str] = []
    done = asyncio.Event()

    def bad() -> None:
        raise RuntimeError("sync failure")

    async def bad_async() -> None:
        done.set()
        raise RuntimeError("async failure")

    ctx.on("e", bad)
    ctx.on("e", bad_async)
    ctx.on("e", lambda: seen.append("after"))
    with caplog.at_level(logging.ERROR, logger="dsh.runtime"):
        ctx.emit("e")
        assert seen == ["after"]
        await done.wait()
        for _ in range(3):
            await asyncio.sleep(0)
    messages = [r.getMessage() for r in caplog.records if r.name == "dsh.runtime"]
    assert any("failed" in m for m in messages)
    errors = [str(r.exc_info[1]) for r in caplog.records if r.exc_info]
    assert "sync failure" in errors
    assert "async failure" in errors


async def test_dispatch_uses_a_snapshot() -> None:
    ctx = Context()
    order: list[str] = []
    removers: dict[str, Any] = {}

    def a() -> None:
        order.append("a")
        ctx.on("e", lambda: order.append("added-late"))
        removers["c"]()

    ctx.on("e", a)
    ctx.on("e", lambda: order.append("b"))
    removers["c"] = ctx.on("e", lambda: order.append("c"))
    await ctx.serial("e")
    # The listener added during dispatch does not run; the one removed mid-dispatch is skipped
    # (a removed listener is never called again), and iteration is not disturbed.
    assert order == ["a", "b"]
    order.clear()
    await ctx.serial("e")
    assert order == ["a", "b", "added-late"]


async def test_listener_removing_itself_does_not_skip_next() -> None:
    ctx = Context()
    order: list[str] = []

    def once() -> None:
        order.append("once")
        remove()

    remove = ctx.on("e", once)
    ctx.on("e", lambda: order.append("next"))
    ctx.emit("e")
    ctx.emit("e")
    assert order == ["once", "next", "next"]


async def test_remover_is_idempotent() -> None:
    ctx = Context()
    remove = ctx.on("e", lambda: "x")
    remove()
    remove()
    assert await ctx.serial("e") is None
    assert ctx.listeners("e") == 0


async def test_scoped_listeners_only_see_their_subject() -> None:
    ctx = Context()
    a, b = object(), object()
    seen: list[tuple[str, object]] = []
    ctx.scoped(a).on("scoped", lambda s: seen.append(("a", s)))
    ctx.scoped(b).on("scoped", lambda s: seen.append(("b", s)))
    ctx.on("scoped", lambda s: seen.append(("global", s)))
    await ctx.serial("scoped", a)
    assert seen == [("a", a), ("global", a)]
    seen.clear()
    ctx.emit("scoped", b)
    assert seen == [("b", b), ("global", b)]
    seen.clear()
    await ctx.parallel("scoped", None)  # another subject: only the global listener matches
    assert seen == [("global", None)]


async def test_scoped_view_dispatches_to_everyone_and_shares_services() -> None:
    ctx = Context()
    subject = object()
    scoped = ctx.scoped(subject)
    seen: list[str] = []
    ctx.on("e", lambda *_: seen.append("global"))
    await scoped.serial("e", subject)
    assert seen == ["global"]
    ctx.provide("thing", 42)
    assert scoped.thing == 42
    assert scoped.fiber is ctx.fiber


async def test_scoped_waterfall_filters_by_subject() -> None:
    ctx = Context()
    a, b = object(), object()

    async def double(subject: object, next_: Any) -> int:
        return 2 * int(await next_())

    ctx.scoped(a).on("w", double)
    assert await ctx.waterfall("w", a, default=lambda: 3) == 6
    assert await ctx.waterfall("w", b, default=lambda: 3) == 3
