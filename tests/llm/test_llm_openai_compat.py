"""The OpenAI-compatible adapter against a real loopback SSE server (through the openai SDK)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import traceback
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sse_server import Reply, SSEServer, chunk, usage_chunk

from dsh.llm import openai_compat, service
from dsh.llm.assembler import ChunkAssembler
from dsh.llm.openai_compat import (
    Config,
    OpenAICompatAdapter,
    build_messages,
    map_finish_reason,
    map_usage,
)
from dsh.llm.types import LlmError, LlmRequest, StreamChunk
from dsh.runtime import AbortController, Context

KEY = "sk-test-SECRET-0123456789abcdef"
USAGE = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}


@pytest.fixture
async def adapter(sse_server: SSEServer) -> AsyncIterator[OpenAICompatAdapter]:
    a = OpenAICompatAdapter(api_key=KEY, base_url=sse_server.base_url, max_retries=0)
    yield a
    await a.aclose()


def request(text: str = "hi", **kw: Any) -> LlmRequest:
    messages = [{"role": "user", "content": [{"type": "text", "text": text}]}]
    return LlmRequest(model="deepseek-v4-flash", messages=messages, **kw)


async def collect(a: OpenAICompatAdapter, req: LlmRequest) -> list[StreamChunk]:
    return [c async for c in a.stream(req)]


async def fail(a: OpenAICompatAdapter, req: LlmRequest) -> tuple[LlmError, list[StreamChunk]]:
    got: list[StreamChunk] = []
    with pytest.raises(LlmError) as info:
        async for c in a.stream(req):
            got.append(c)
    return info.value, got


def no_key_anywhere(err: BaseException) -> None:
    text = "".join(traceback.format_exception(err)) + repr(err) + str(err)
    assert KEY not in text
    # not even in a suppressed context or cause
    assert err.__context__ is None and err.__cause__ is None


# --------------------------------------------------------------------------- streaming


async def test_text_stream(sse_server: SSEServer, adapter: OpenAICompatAdapter) -> None:
    sse_server.push(
        Reply.sse(
            [
                chunk(role="assistant", content=""),
                chunk(content="Hel"),
                chunk(content="lo"),
                chunk(finish="stop"),
                usage_chunk(USAGE),
            ]
        )
    )
    assert await collect(adapter, request()) == [
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "text-delta", "index": 0, "text": "Hel"},
        {"type": "text-delta", "index": 0, "text": "lo"},
        {"type": "block-end", "index": 0, "block": {"type": "text", "text": "Hello"}},
        {"type": "usage", "usage": {"inputTokens": 12, "outputTokens": 3}},
        {"type": "finish", "reason": {"kind": "stop"}},
    ]
    (seen,) = sse_server.requests
    assert (seen.method, seen.path) == ("POST", "/chat/completions")
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.json["stream"] is True
    assert seen.json["stream_options"] == {"include_usage": True}


async def test_reasoning_then_text(sse_server: SSEServer, adapter: OpenAICompatAdapter) -> None:
    sse_server.push(
        Reply.sse(
            [
                chunk(role="assistant", reasoning=""),  # an empty string opens no block
                chunk(reasoning="Let me "),
                chunk(reasoning="think."),
                chunk(content="Answer", reasoning=None),
                chunk(content="", finish="stop", usage=USAGE),
            ]
        )
    )
    chunks = await collect(adapter, request())
    assert chunks == [
        {"type": "block-start", "index": 0, "blockType": "reasoning"},
        {"type": "reasoning-delta", "index": 0, "text": "Let me "},
        {"type": "reasoning-delta", "index": 0, "text": "think."},
        {"type": "block-start", "index": 1, "blockType": "text"},
        {"type": "text-delta", "index": 1, "text": "Answer"},
        {"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "Let me think."}},
        {"type": "block-end", "index": 1, "block": {"type": "text", "text": "Answer"}},
        {"type": "usage", "usage": {"inputTokens": 12, "outputTokens": 3}},
        {"type": "finish", "reason": {"kind": "stop"}},
    ]


async def test_parallel_tool_call_deltas(
    sse_server: SSEServer, adapter: OpenAICompatAdapter
) -> None:
    def call(
        index: int, args: str, id_: str | None = None, name: str | None = None
    ) -> dict[str, Any]:
        c: dict[str, Any] = {"index": index, "function": {"arguments": args}}
        if id_ is not None:
            c["id"] = id_
            c["type"] = "function"
            c["function"]["name"] = name
        return c

    sse_server.push(
        Reply.sse(
            [
                chunk(content="Calling."),
                chunk(tool_calls=[call(0, "", "call_a", "read")]),
                chunk(tool_calls=[call(1, '{"p":', "call_b", "grep")]),
                chunk(tool_calls=[call(0, '{"path":"a"}')]),
                chunk(tool_calls=[call(1, '"x"}')]),
                chunk(finish="tool_calls"),
                usage_chunk(USAGE),
            ]
        )
    )
    chunks = await collect(adapter, request())
    assert chunks[:8] == [
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "text-delta", "index": 0, "text": "Calling."},
        {"type": "block-start", "index": 1, "blockType": "tool-call"},
        {
            "type": "tool-call-delta",
            "index": 1,
            "id": "call_a",
            "name": "read",
            "argumentsDelta": "",
        },
        {"type": "block-start", "index": 2, "blockType": "tool-call"},
        {
            "type": "tool-call-delta",
            "index": 2,
            "id": "call_b",
            "name": "grep",
            "argumentsDelta": '{"p":',
        },
        {
            "type": "tool-call-delta",
            "index": 1,
            "id": "call_a",
            "name": "read",
            "argumentsDelta": '{"path":"a"}',
        },
        {
            "type": "tool-call-delta",
            "index": 2,
            "id": "call_b",
            "name": "grep",
            "argumentsDelta": '"x"}',
        },
    ]
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "tool-calls"}}
    assembler = ChunkAssembler()
    for c in chunks:
        assembler.push(c)
    assert assembler.blocks() == [
        {"type": "text", "text": "Calling."},
        {"type": "tool-call", "id": "call_a", "name": "read", "arguments": '{"path":"a"}'},
        {"type": "tool-call", "id": "call_b", "name": "grep", "arguments": '{"p":"x"}'},
    ]
    # block-ends are authoritative and agree with the deltas
    ends = [c["block"] for c in chunks if c["type"] == "block-end"]
    assert ends == assembler.blocks()


async def test_usage_with_cache_hits(sse_server: SSEServer, adapter: OpenAICompatAdapter) -> None:
    openai_style = {
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "total_tokens": 140,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 25},
    }
    deepseek_style = {
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "total_tokens": 140,
        "prompt_cache_hit_tokens": 80,
        "prompt_cache_miss_tokens": 20,
    }
    sse_server.push(
        Reply.sse([chunk(content="a"), chunk(finish="stop"), usage_chunk(openai_style)]),
        Reply.sse([chunk(content="b", finish="stop", usage=deepseek_style)]),
    )
    first = await collect(adapter, request())
    assert first[-2] == {
        "type": "usage",
        "usage": {
            "inputTokens": 36,
            "outputTokens": 40,
            "cacheReadTokens": 64,
            "reasoningTokens": 25,
        },
    }
    second = await collect(adapter, request())
    assert second[-2] == {
        "type": "usage",
        "usage": {"inputTokens": 20, "outputTokens": 40, "cacheReadTokens": 80},
    }


async def test_length_and_other_finish_reasons(
    sse_server: SSEServer, adapter: OpenAICompatAdapter
) -> None:
    sse_server.push(
        Reply.sse([chunk(content="trunc"), chunk(finish="length"), usage_chunk(USAGE)]),
        Reply.sse([chunk(content="x"), chunk(finish="content_filter")]),
    )
    assert (await collect(adapter, request()))[-1] == {
        "type": "finish",
        "reason": {"kind": "max-tokens"},
    }
    chunks = await collect(adapter, request())
    assert chunks[-1] == {
        "type": "finish",
        "reason": {
            "kind": "error",
            "message": "model stopped: content_filter",
            "code": "CONTENT_FILTER",
        },
    }
    assert not any(c["type"] == "usage" for c in chunks)


def test_finish_and_usage_mapping_units() -> None:
    assert map_finish_reason("stop") == {"kind": "stop"}
    assert map_finish_reason("tool_calls") == {"kind": "tool-calls"}
    assert map_finish_reason("length") == {"kind": "max-tokens"}
    assert map_finish_reason("insufficient_system_resource")["kind"] == "error"
    assert map_usage({"prompt_tokens": 5, "completion_tokens": 1}) == {
        "inputTokens": 5,
        "outputTokens": 1,
    }
    # the OpenAI field wins over DeepSeek's when both are present
    both = {
        "prompt_tokens": 10,
        "completion_tokens": 1,
        "prompt_tokens_details": {"cached_tokens": 3},
        "prompt_cache_hit_tokens": 7,
    }
    assert map_usage(both)["cacheReadTokens"] == 3


# --------------------------------------------------------------------------- request mapping


async def test_request_mapping_on_the_wire(sse_server: SSEServer) -> None:
    adapter = OpenAICompatAdapter(
        api_key=KEY,
        base_url=sse_server.base_url,
        max_retries=0,
        thinking="enabled",
        reasoning_effort="high",
        extra_body={"custom": 1},
    )
    sse_server.push(Reply.sse([chunk(content="ok", finish="stop")]))
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "echo hello"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": '<context source="plugin">'},
                {"type": "text", "text": "Time sampled at noon"},
                {"type": "text", "text": "</context>"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "reasoning", "text": "need a tool"},
                {"type": "text", "text": "Let me."},
                {"type": "tool-call", "id": "c1", "name": "echo", "arguments": '{"text":"a"}'},
                {"type": "tool-call", "id": "c2", "name": "echo", "arguments": "{}"},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "c1",
                    "content": [{"type": "text", "text": "A"}],
                    "isError": False,
                },
                {"type": "tool-result", "toolCallId": "c2", "content": [], "isError": True},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "reasoning", "text": "plain turn"},
                {"type": "text", "text": "Done."},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool-call", "id": "c3", "name": "t", "arguments": ""}],
        },
    ]
    tools = [
        {
            "name": "echo",
            "description": "Echo text.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        }
    ]
    req = LlmRequest(
        model="deepseek-v4-pro",
        messages=messages,
        system="You are dsh.",
        tools=tools,
        temperature=0.5,
        max_tokens=256,
        stop=["END"],
        session_id="s-1",
    )
    await collect(adapter, req)
    body = sse_server.requests[0].json
    assert body["model"] == "deepseek-v4-pro"
    assert body["messages"] == [
        {"role": "system", "content": "You are dsh."},
        {"role": "user", "content": "echo hello"},
        {"role": "user", "content": '<context source="plugin">Time sampled at noon</context>'},
        {
            "role": "assistant",
            "content": "Let me.",
            "reasoning_content": "need a tool",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "echo", "arguments": '{"text":"a"}'},
                },
                {"id": "c2", "type": "function", "function": {"name": "echo", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {"role": "tool", "tool_call_id": "c2", "content": "(no output)"},
        {"role": "assistant", "content": "Done."},  # no reasoning_content without tool calls
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c3", "type": "function", "function": {"name": "t", "arguments": ""}}
            ],
        },
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "echo",
                "description": "Echo text.",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
            },
        }
    ]
    assert body["temperature"] == 0.5
    assert body["max_tokens"] == 256
    assert body["stop"] == ["END"]
    assert body["stream_options"] == {"include_usage": True}
    assert body["thinking"] == {"type": "enabled"}
    assert body["reasoning_effort"] == "high"
    assert body["custom"] == 1
    await adapter.aclose()


def test_optional_fields_are_omitted() -> None:
    adapter = OpenAICompatAdapter(api_key=KEY, base_url="http://127.0.0.1:9")
    kwargs = adapter.request_kwargs(LlmRequest(model="m"))
    assert kwargs == {
        "model": "m",
        "messages": [],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert build_messages("", []) == [{"role": "system", "content": ""}]
    assert build_messages(None, [{"role": "user", "content": []}]) == [
        {"role": "user", "content": ""}
    ]


# --------------------------------------------------------------------------- HTTP errors


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "INVALID_REQUEST"),
        (401, "AUTH"),
        (403, "AUTH"),
        (404, "HTTP_404"),
        (429, "RATE_LIMIT"),
        (500, "SERVER"),
        (503, "SERVER"),
    ],
)
async def test_http_errors(
    sse_server: SSEServer, adapter: OpenAICompatAdapter, status: int, code: str
) -> None:
    sse_server.push(Reply.error(status, f"provider says {status}"))
    err, got = await fail(adapter, request())
    causes = {
        "INVALID_REQUEST": "request rejected",
        "AUTH": "authentication failed",
        "HTTP_404": "not found (is the model name or the base URL wrong?)",
        "RATE_LIMIT": "rate limited",
        "SERVER": "server error",
    }
    # The endpoint, then the cause, then the provider's words (max_retries=0: no "after N").
    line = f"{sse_server.base_url}: {causes[code]} (HTTP {status}: provider says {status})"
    assert (err.code, err.status, str(err)) == (code, status, line)
    assert got == []
    assert len(sse_server.requests) == 1  # max_retries=0


async def test_error_without_a_json_body(
    sse_server: SSEServer, adapter: OpenAICompatAdapter
) -> None:
    sse_server.push(Reply.json(502, b""))
    err, _ = await fail(adapter, request())
    assert (err.code, err.status, str(err)) == ("SERVER", 502, f"{sse_server.base_url}: server error (HTTP 502)")


async def test_5xx_is_retried_up_to_max_retries(sse_server: SSEServer) -> None:
    adapter = OpenAICompatAdapter(api_key=KEY, base_url=sse_server.base_url, max_retries=2)
    fast = {"retry-after-ms": "5"}
    for _ in range(3):
        sse_server.push(Reply.error(503, "overloaded", headers=fast))
    err, _ = await fail(adapter, request())
    assert (err.code, err.status) == ("SERVER", 503)
    assert len(sse_server.requests) == 3
    await adapter.aclose()


async def test_429_then_success_is_retried(sse_server: SSEServer) -> None:
    adapter = OpenAICompatAdapter(api_key=KEY, base_url=sse_server.base_url, max_retries=2)
    sse_server.push(
        Reply.error(429, "slow down", headers={"retry-after-ms": "10"}),
        Reply.sse([chunk(content="ok"), chunk(finish="stop"), usage_chunk(USAGE)]),
    )
    chunks = await collect(adapter, request())
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "stop"}}
    assert [c for c in chunks if c["type"] == "text-delta"] == [
        {"type": "text-delta", "index": 0, "text": "ok"}
    ]
    assert len(sse_server.requests) == 2
    assert sse_server.requests[0].json == sse_server.requests[1].json
    await adapter.aclose()


async def test_nothing_is_retried_after_output_started(sse_server: SSEServer) -> None:
    adapter = OpenAICompatAdapter(api_key=KEY, base_url=sse_server.base_url, max_retries=3)
    sse_server.push(
        Reply.sse([chunk(content="partial"), chunk(content="more")], drop_after=1),
        Reply.sse([chunk(content="should not be used", finish="stop")]),
    )
    err, got = await fail(adapter, request())
    assert err.code == "STREAM_CLOSED"
    assert got == [
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "text-delta", "index": 0, "text": "partial"},
    ]
    assert len(sse_server.requests) == 1
    await adapter.aclose()


# --------------------------------------------------------------------------- broken streams


async def test_malformed_json(sse_server: SSEServer, adapter: OpenAICompatAdapter) -> None:
    sse_server.push(Reply.sse([chunk(content="fine"), "{not json"]))
    err, got = await fail(adapter, request())
    assert err.code == "MALFORMED_RESPONSE"
    assert "{not json" in str(err)
    assert [c["type"] for c in got] == ["block-start", "text-delta"]


async def test_tool_calls_that_are_not_a_list(
    sse_server: SSEServer, adapter: OpenAICompatAdapter
) -> None:
    bad = chunk(content="a")
    bad["choices"][0]["delta"] = {"tool_calls": {"index": 0, "id": "call-1"}}
    sse_server.push(Reply.sse([chunk(content="a"), bad, chunk(finish="stop")]))
    err, got = await fail(adapter, request())
    assert err.code == "MALFORMED_RESPONSE"
    assert str(err).endswith(": malformed chunk: tool_calls is not a list")
    assert [c["type"] for c in got] == ["block-start", "text-delta"]


async def test_connection_dropped_mid_stream(
    sse_server: SSEServer, adapter: OpenAICompatAdapter
) -> None:
    sse_server.push(
        Reply.sse([chunk(content="a"), chunk(content="b"), chunk(finish="stop")], drop_after=2)
    )
    err, got = await fail(adapter, request())
    assert err.code == "STREAM_CLOSED"
    assert [c.get("text") for c in got if c["type"] == "text-delta"] == ["a", "b"]


async def test_clean_eof_without_finish_or_done(
    sse_server: SSEServer, adapter: OpenAICompatAdapter
) -> None:
    sse_server.push(Reply.sse([chunk(content="a")], done=False, chunked=False))
    err, _ = await fail(adapter, request())
    assert err.code == "STREAM_CLOSED"


async def test_in_stream_error_event(sse_server: SSEServer, adapter: OpenAICompatAdapter) -> None:
    sse_server.push(
        Reply.sse([chunk(content="a"), {"error": {"message": "overloaded mid-stream"}}])
    )
    err, _ = await fail(adapter, request())
    assert (err.code, str(err)) == (
        "SERVER",
        f"{sse_server.base_url}: the model reported an error: overloaded mid-stream",
    )


async def test_connection_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    adapter = OpenAICompatAdapter(api_key=KEY, base_url=f"http://127.0.0.1:{port}", max_retries=0)
    err, _ = await fail(adapter, request())
    assert err.code == "CONNECTION"
    no_key_anywhere(err)
    await adapter.aclose()


@pytest.mark.perf
async def test_timeout_before_headers(sse_server: SSEServer) -> None:
    adapter = OpenAICompatAdapter(
        api_key=KEY, base_url=sse_server.base_url, max_retries=0, timeout_seconds=0.2
    )
    sse_server.push(Reply.hanging(2))
    start = time.monotonic()
    err, _ = await fail(adapter, request())
    assert err.code == "TIMEOUT"
    assert time.monotonic() - start < 1.5
    await adapter.aclose()


async def test_timeout_mid_stream(sse_server: SSEServer) -> None:
    adapter = OpenAICompatAdapter(
        api_key=KEY, base_url=sse_server.base_url, max_retries=0, timeout_seconds=0.2
    )
    sse_server.push(Reply.sse([chunk(content="a"), chunk(finish="stop")], delay=2))
    err, got = await fail(adapter, request())
    assert err.code == "TIMEOUT"
    assert len(got) == 2
    await adapter.aclose()


# --------------------------------------------------------------------------- cancellation


@pytest.mark.perf
async def test_slow_stream_cancelled_from_the_client(
    sse_server: SSEServer, adapter: OpenAICompatAdapter
) -> None:
    sse_server.push(Reply.sse([chunk(content=str(i)) for i in range(50)], delay=1.0))
    controller = AbortController()
    got: list[StreamChunk] = []
    aborted_at = 0.0

    def abort() -> None:
        nonlocal aborted_at
        aborted_at = time.monotonic()
        controller.abort("user pressed ctrl-c")

    async for c in adapter.stream(request(signal=controller.signal)):
        got.append(c)
        if len(got) == 2:  # block-start + first delta; the next delta is a second away
            asyncio.get_running_loop().call_later(0.05, abort)
    ended = time.monotonic()
    assert ended - aborted_at < 0.2, ended - aborted_at
    assert got[-1] == {"type": "finish", "reason": {"kind": "aborted"}}
    assert [c["type"] for c in got] == ["block-start", "text-delta", "finish"]
    # the HTTP stream really was closed: the server sees the disconnect promptly
    disconnected = await asyncio.to_thread(sse_server.wait_for_disconnect, 0, 1.0)
    assert disconnected is not None
    assert disconnected - aborted_at < 0.2


@pytest.mark.perf
async def test_cancel_while_waiting_for_headers(
    sse_server: SSEServer, adapter: OpenAICompatAdapter
) -> None:
    sse_server.push(Reply.hanging(5))
    controller = AbortController()
    asyncio.get_running_loop().call_later(0.05, controller.abort)
    start = time.monotonic()
    got = await collect(adapter, request(signal=controller.signal))
    assert got == [{"type": "finish", "reason": {"kind": "aborted"}}]
    assert time.monotonic() - start < 0.3


@pytest.mark.perf
async def test_cancel_during_retry_backoff(sse_server: SSEServer) -> None:
    adapter = OpenAICompatAdapter(api_key=KEY, base_url=sse_server.base_url, max_retries=2)
    sse_server.push(Reply.error(503, "busy", headers={"retry-after": "30"}))
    controller = AbortController()
    asyncio.get_running_loop().call_later(0.1, controller.abort)
    start = time.monotonic()
    got = await collect(adapter, request(signal=controller.signal))
    assert got == [{"type": "finish", "reason": {"kind": "aborted"}}]
    assert time.monotonic() - start < 0.4
    await adapter.aclose()


async def test_already_aborted_makes_no_request(
    sse_server: SSEServer, adapter: OpenAICompatAdapter
) -> None:
    controller = AbortController()
    controller.abort()
    assert await collect(adapter, request(signal=controller.signal)) == [
        {"type": "finish", "reason": {"kind": "aborted"}}
    ]
    assert sse_server.requests == []


@pytest.mark.perf
async def test_consumer_break_closes_the_http_stream(
    sse_server: SSEServer, adapter: OpenAICompatAdapter
) -> None:
    sse_server.push(Reply.sse([chunk(content=str(i)) for i in range(50)], delay=1.0))
    it = adapter.stream(request())
    async for c in it:
        if c["type"] == "text-delta":
            break
    start = time.monotonic()
    await it.aclose()  # type: ignore[attr-defined]
    assert time.monotonic() - start < 0.2
    assert await asyncio.to_thread(sse_server.wait_for_disconnect, 0, 1.0) is not None


# --------------------------------------------------------------------------- the API key


async def test_key_never_appears_in_errors_or_logs(
    sse_server: SSEServer, adapter: OpenAICompatAdapter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sse_server.push(
        Reply.error(401, f"Incorrect API key provided: {KEY}. Check your key."),
        Reply.sse([chunk(content="x"), f"{{bad json {KEY}"]),
        Reply.sse([chunk(content="x"), {"error": {"message": f"key {KEY} revoked"}}]),
    )
    errors = []
    for _ in range(3):
        err, _ = await fail(adapter, request())
        errors.append(err)
    assert [e.code for e in errors] == ["AUTH", "MALFORMED_RESPONSE", "SERVER"]
    assert str(errors[0]) == (
        f"{sse_server.base_url}: authentication failed "
        "(HTTP 401: Incorrect API key provided: [redacted]. Check your key.)"
    )
    for err in errors:
        no_key_anywhere(err)
    assert caplog.records  # the SDK did log at debug level
    assert KEY not in caplog.text
    assert KEY not in repr(adapter)


# --------------------------------------------------------------------------- the plugin


async def test_plugin_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    ctx = Context()
    await ctx.plugin(service)
    with pytest.raises(LlmError) as info:
        await ctx.plugin(openai_compat)
    assert str(info.value) == (
        "openai-llm: an API key is required (config apiKey or $DEEPSEEK_API_KEY)"
    )
    assert not ctx.llm.has_model("deepseek-v4-flash")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "")
    with pytest.raises(LlmError):
        await ctx.plugin(openai_compat)


async def test_plugin_env_fallbacks_and_dispose(
    sse_server: SSEServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
    monkeypatch.setenv("DEEPSEEK_BASE_URL", sse_server.base_url)
    ctx = Context()
    await ctx.plugin(service)
    fiber = await ctx.plugin(openai_compat, {"maxRetries": 0})
    assert ctx.llm.has_model("deepseek-v4-flash") and ctx.llm.has_model("deepseek-v4-pro")
    sse_server.push(Reply.sse([chunk(content="hey", finish="stop")]))
    chunks = [c async for c in ctx.llm.stream(request())]
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "stop"}}
    assert sse_server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    adapter = ctx.llm.adapter_for("deepseek-v4-flash")
    await fiber.dispose()
    assert not ctx.llm.has_model("deepseek-v4-flash")
    assert adapter.client.is_closed()


async def test_plugin_config_keys(sse_server: SSEServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.delenv("DEEPSEEK_BASE_URL", raising=False)
    monkeypatch.setenv("MY_KEY", "sk-from-named-env")
    ctx = Context()
    await ctx.plugin(service)
    await ctx.plugin(
        openai_compat,
        {
            "apiKeyEnv": "MY_KEY",
            "baseURL": sse_server.base_url,
            "models": ["local-model"],
            "thinking": "disabled",
            "maxRetries": 0,
            "timeoutSeconds": 5,
            "extraBody": {"top_k": 3},
        },
    )
    assert ctx.llm.models() == ["local-model"]
    sse_server.push(Reply.sse([chunk(content="hey", finish="stop")]))
    _ = [c async for c in ctx.llm.stream(LlmRequest(model="local-model"))]
    seen = sse_server.requests[0]
    assert seen.headers["authorization"] == "Bearer sk-from-named-env"
    assert seen.json["thinking"] == {"type": "disabled"}
    assert seen.json["top_k"] == 3
    assert "reasoning_effort" not in seen.json
    monkeypatch.delenv("MY_KEY")
    with pytest.raises(LlmError, match=r"\(config apiKey or \$MY_KEY\)"):
        await ctx.plugin(openai_compat, {"apiKeyEnv": "MY_KEY", "models": ["other"]})
    await ctx.dispose()


def test_config_defaults() -> None:
    cfg = Config()
    assert cfg.models == ["deepseek-v4-flash", "deepseek-v4-pro"]
    assert cfg.max_retries == 2
    assert cfg.api_key is None and cfg.thinking is None and cfg.timeout_seconds is None
    assert KEY not in repr(Config(api_key=KEY))
    assert openai_compat.resolve_base_url(cfg) in (
        "https://api.deepseek.com",
        __import__("os").environ.get("DEEPSEEK_BASE_URL"),
    )


async def test_retried_failures_say_how_many_attempts(sse_server: SSEServer) -> None:
    adapter = OpenAICompatAdapter(api_key=KEY, base_url=sse_server.base_url, max_retries=2)
    fast = {"retry-after-ms": "5"}
    sse_server.push(*[Reply.error(429, "slow down", headers=fast) for _ in range(3)])
    err, _ = await fail(adapter, request())
    assert str(err) == f"{sse_server.base_url}: rate limited after 3 attempts (HTTP 429: slow down)"
    # Not retried by the SDK, so no attempt count.
    sse_server.push(Reply.error(401, "bad key"))
    err, _ = await fail(adapter, request())
    assert str(err) == f"{sse_server.base_url}: authentication failed (HTTP 401: bad key)"
    await adapter.aclose()


async def test_idle_timeout_is_on_by_default_and_names_itself(sse_server: SSEServer) -> None:
    adapter = OpenAICompatAdapter(api_key=KEY, base_url=sse_server.base_url, max_retries=0)
    assert adapter.timeout == openai_compat.DEFAULT_TIMEOUT_SECONDS == 120
    short = OpenAICompatAdapter(
        api_key=KEY, base_url=sse_server.base_url, max_retries=0, timeout_seconds=0.3
    )
    # One chunk, then silence: the turn must not hang.
    sse_server.push(Reply.sse([chunk(content="a"), chunk(content="b", finish="stop")], delay=5))
    err, got = await fail(short, request())
    assert [c.get("text") for c in got if c["type"] == "text-delta"] == ["a"]
    assert err.code == "TIMEOUT"
    assert str(err) == f"{sse_server.base_url}: the model sent nothing for 0.3 s (idle timeout)"
    await adapter.aclose()
    await short.aclose()
