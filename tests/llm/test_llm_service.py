"""The ``llm`` service: adapter registry, routing, the ``llm/stream`` waterfall, cleanup."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from dsh.llm import service
from dsh.llm.service import LlmService
from dsh.llm.types import LlmError, LlmRequest, StreamChunk
from dsh.runtime import Context


class Scripted:
    """An adapter that replays fixed chunks and records requests and closes."""

    def __init__(self, *texts: str) -> None:
        self.texts = texts
        self.requests: list[LlmRequest] = []
        self.closed = 0

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        self.requests.append(request)
        try:
            yield {"type": "block-start", "index": 0, "blockType": "text"}
            for t in self.texts:
                yield {"type": "text-delta", "index": 0, "text": t}
            yield {"type": "finish", "reason": {"kind": "stop"}}
        finally:
            self.closed += 1


async def collect(it: AsyncIterator[StreamChunk]) -> list[StreamChunk]:
    return [c async for c in it]


async def test_routes_by_model() -> None:
    llm = LlmService()
    a, b = Scripted("a"), Scripted("b")
    llm.register_adapter(["m1", "m2"], a)
    llm.register_adapter(["m3"], b)
    assert llm.has_model("m2") and llm.has_model("m3") and not llm.has_model("m4")
    assert llm.models() == ["m1", "m2", "m3"]
    request = LlmRequest(model="m3", messages=[], session_id="s")
    chunks = await collect(llm.stream(request))
    assert chunks[1] == {"type": "text-delta", "index": 0, "text": "b"}
    assert b.requests == [request] and a.requests == []


async def test_missing_adapter() -> None:
    llm = LlmService()
    with pytest.raises(LlmError) as info:
        await collect(llm.stream(LlmRequest(model="nope")))
    assert str(info.value) == 'no adapter registered for model "nope"'
    assert info.value.code == "NO_ADAPTER"
    assert info.value.status is None


def test_duplicates_are_rejected_all_or_nothing() -> None:
    llm = LlmService()
    llm.register_adapter(["m1"], Scripted())
    with pytest.raises(LlmError) as info:
        llm.register_adapter(["m0", "m1"], Scripted())
    assert info.value.code == "DUPLICATE_ADAPTER"
    assert not llm.has_model("m0")
    with pytest.raises(LlmError):
        llm.register_adapter(["x", "x"], Scripted())
    assert not llm.has_model("x")


def test_unregister_is_idempotent_and_only_removes_its_own() -> None:
    llm = LlmService()
    first = Scripted()
    off = llm.register_adapter(["m"], first)
    off()
    off()
    assert not llm.has_model("m")
    second = Scripted()
    llm.register_adapter(["m"], second)
    off()  # stale remover: must not remove the new registration
    assert llm.adapter_for("m") is second


def test_rejects_non_adapters() -> None:
    llm = LlmService()
    with pytest.raises(TypeError):
        llm.register_adapter(["m"], object())  # type: ignore[arg-type]


async def test_early_exit_closes_the_adapter_stream() -> None:
    llm = LlmService()
    adapter = Scripted("a", "b", "c")
    llm.register_adapter(["m"], adapter)
    it = llm.stream(LlmRequest(model="m"))
    async for chunk in it:
        if chunk["type"] == "text-delta":
            break
    await it.aclose()  # type: ignore[attr-defined]
    assert adapter.closed == 1


async def test_plugin_provides_ctx_llm_and_waterfall_wraps_streams() -> None:
    ctx = Context()
    fiber = await ctx.plugin(service)
    assert isinstance(ctx.llm, LlmService)
    adapter = Scripted("x")
    ctx.llm.register_adapter(["m"], adapter)

    seen: list[str] = []

    async def upper(
        request: LlmRequest, next_: Callable[[], Awaitable[AsyncIterator[StreamChunk]]]
    ) -> AsyncIterator[StreamChunk]:
        seen.append(request.model)
        inner = await next_()

        async def wrapped() -> AsyncIterator[StreamChunk]:
            async for c in inner:
                if c["type"] == "text-delta":
                    yield {"type": "text-delta", "index": c["index"], "text": c["text"].upper()}
                else:
                    yield c

        return wrapped()

    off = ctx.on("llm/stream", upper)
    chunks = await collect(ctx.llm.stream(LlmRequest(model="m")))
    assert seen == ["m"]
    assert chunks[1] == {"type": "text-delta", "index": 0, "text": "X"}
    off()
    chunks = await collect(ctx.llm.stream(LlmRequest(model="m")))
    assert chunks[1]["text"] == "x"  # type: ignore[typeddict-item]
    await fiber.dispose()
    with pytest.raises(AttributeError):
        _ = ctx.llm


async def test_waterfall_listener_can_replace_the_stream() -> None:
    ctx = Context()
    await ctx.plugin(service)

    async def canned(request: LlmRequest, next_: Any) -> AsyncIterator[StreamChunk]:
        async def gen() -> AsyncIterator[StreamChunk]:
            yield {"type": "finish", "reason": {"kind": "stop"}}

        return gen()

    ctx.on("llm/stream", canned)
    # no adapter at all: the listener answers without calling next()
    assert await collect(ctx.llm.stream(LlmRequest(model="ghost"))) == [
        {"type": "finish", "reason": {"kind": "stop"}}
    ]


def test_request_is_frozen_and_defaults() -> None:
    request = LlmRequest(model="m")
    assert request.messages == () and request.tools == () and request.system is None
    assert request.signal is None and request.max_tokens is None
    with pytest.raises(AttributeError):
        request.model = "other"  # type: ignore[misc]


def test_llm_error_fields() -> None:
    err = LlmError("rate limited", code="RATE_LIMIT", status=429)
    assert str(err) == "rate limited"
    assert (err.code, err.status, err.message) == ("RATE_LIMIT", 429, "rate limited")
    assert "RATE_LIMIT" in repr(err)
