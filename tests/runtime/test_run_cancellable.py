"""run_cancellable: the one cancel-a-task-on-abort helper (loop steps, compaction, openai)."""

from __future__ import annotations

import asyncio

import pytest

from dsh.runtime import AbortController, run_cancellable


class Stopped(Exception):
    pass


async def test_an_abort_cancels_the_work_and_raises_the_abort_error() -> None:
    controller = AbortController()
    started = asyncio.Event()
    cancelled = False

    async def work() -> int:
        nonlocal cancelled
        started.set()
        try:
            await asyncio.Event().wait()  # never watches the signal
        except asyncio.CancelledError:
            cancelled = True
            raise
        return 1

    runner = asyncio.ensure_future(run_cancellable(work(), controller.signal, Stopped))
    await started.wait()
    controller.abort("stop")
    with pytest.raises(Stopped):
        await runner
    assert cancelled


async def test_the_result_comes_through_and_a_late_abort_is_harmless() -> None:
    controller = AbortController()

    async def work() -> str:
        return "done"

    assert await run_cancellable(work(), controller.signal, Stopped) == "done"
    controller.abort("late")  # the listener was removed: nothing to cancel


async def test_grace_lets_cooperative_work_finish_on_its_own() -> None:
    controller = AbortController()
    signal = controller.signal

    async def work() -> str:
        await signal.wait()
        await asyncio.sleep(0)  # finishing up after the abort, within the grace
        return "reported"

    runner = asyncio.ensure_future(run_cancellable(work(), signal, Stopped, grace=lambda: 30.0))
    await asyncio.sleep(0)
    controller.abort("stop")
    assert await runner == "reported"


async def test_cancelling_the_caller_propagates_and_cancels_the_work() -> None:
    controller = AbortController()
    started = asyncio.Event()
    child: list[asyncio.Task[object]] = []

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    runner = asyncio.ensure_future(run_cancellable(work(), controller.signal, Stopped, started=child.append))
    await started.wait()
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    assert child[0].cancelled()
