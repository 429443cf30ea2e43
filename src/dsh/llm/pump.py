"""Run an adapter's HTTP reading in a task of its own and hand its chunks to the consumer.

Owns :func:`pumped`: the consumer side of an adapter whose ``pump(emit)`` coroutine reads the
provider's stream and emits dsh chunks. An aborted ``signal`` cancels the pump task at once (its
``finally`` closes the HTTP stream, even when the server is silent) and the iterator ends with
finish ``{kind:'aborted'}``; the pump's own failure is raised to the consumer. Both HTTP
adapters (``openai-llm``, ``anthropic-llm``) use it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Literal

from dsh.llm.types import AbortSignalLike, LlmError, StreamChunk
from dsh.runtime.abort import run_cancellable

__all__ = ["pumped"]


class _PumpAborted(Exception):
    """The pump was cancelled by the request's signal."""


_Item = tuple[Literal[0], StreamChunk] | tuple[Literal[1], asyncio.Future[None]]
Pump = Callable[[Callable[[StreamChunk], None]], Coroutine[Any, Any, None]]


async def pumped(pump: Pump, signal: AbortSignalLike | None) -> AsyncIterator[StreamChunk]:
    """The chunks ``pump`` emits, in order; see the module docstring."""
    if signal is not None and signal.aborted:
        yield {"type": "finish", "reason": {"kind": "aborted"}}
        return
    queue: asyncio.Queue[_Item] = asyncio.Queue()
    put = queue.put_nowait

    def emit(chunk: StreamChunk) -> None:
        put((0, chunk))

    work = pump(emit)
    task = asyncio.ensure_future(work if signal is None else run_cancellable(work, signal, _PumpAborted))
    task.add_done_callback(lambda done: put((1, done)))
    try:
        while True:
            item = await queue.get()
            if signal is not None and signal.aborted:
                yield {"type": "finish", "reason": {"kind": "aborted"}}
                return
            if item[0] == 0:
                yield item[1]
                continue
            done = item[1]
            if done.cancelled():
                raise LlmError("the model stream was cancelled", code="ABORTED")
            exc = done.exception()
            if exc is not None:
                raise exc
            return
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
        elif not task.cancelled():
            task.exception()  # retrieved: raised above or superseded by the abort
