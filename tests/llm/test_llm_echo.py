"""The mock-echo adapter against the reference fixtures, byte for byte, and as a plugin."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from tests.fixtures import FIXTURES

from dsh.llm import echo, service
from dsh.llm.assembler import ChunkAssembler
from dsh.llm.echo import MockEchoAdapter, has_tool_result, last_user_text
from dsh.llm.types import LlmError, LlmRequest, StreamChunk
from dsh.runtime import AbortController, ConfigError, Context

STDIO_FIXTURES = ["stdio-tool-call", "stdio-two-turns", "stdio-tool-call-with-time-context"]


def js(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def collect(adapter: Any, request: LlmRequest) -> list[StreamChunk]:
    return [chunk async for chunk in adapter.stream(request)]


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def load_steps(name: str) -> list[tuple[list[dict[str, Any]], list[str]]]:
    """Per model step: (request messages, raw chunk JSON texts as logged)."""
    derived = json.loads((FIXTURES / f"{name}.derived.json").read_text())
    steps: dict[tuple[int, int], list[str]] = {}
    for line in (FIXTURES / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event.get("type") != "assistant/chunk":
            continue
        key = (event["data"]["turn"], event["data"]["step"])
        start = line.index('"chunk":') + len('"chunk":')
        assert line.endswith("}}")
        steps.setdefault(key, []).append(line[start:-2])
    assistant_positions = [i for i, m in enumerate(derived) if m["role"] == "assistant"]
    assert len(assistant_positions) == len(steps)
    return [
        (derived[:pos], raw) for pos, raw in zip(assistant_positions, steps.values(), strict=True)
    ]


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="reference fixtures not available")
@pytest.mark.parametrize("name", STDIO_FIXTURES)
async def test_chunk_stream_matches_fixture_byte_for_byte(name: str) -> None:
    adapter = MockEchoAdapter(delay_ms=0)
    for messages, raw in load_steps(name):
        chunks = await collect(adapter, LlmRequest(model="mock-echo", messages=messages))
        assert [js(c) for c in chunks] == raw


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="reference fixtures not available")
async def test_tool_call_step_matches_the_fixture_message() -> None:
    derived = json.loads((FIXTURES / "stdio-tool-call.derived.json").read_text())
    chunks = await collect(MockEchoAdapter(0), LlmRequest("mock-echo", derived[:1]))
    assembler = ChunkAssembler()
    for c in chunks:
        assembler.push(c)
    assert assembler.blocks() == derived[1]["content"]
    assert assembler.usage == {"inputTokens": 20, "outputTokens": 10}
    assert assembler.finish == {"kind": "tool-calls"}


async def test_echo_tool_call_exact_sequence() -> None:
    chunks = await collect(
        MockEchoAdapter(0), LlmRequest("mock-echo", [user(text("echo hello world"))])
    )
    deltas = [c for c in chunks if c["type"] == "text-delta"]
    assert "".join(c["text"] for c in deltas) == "Let me echo that for you."
    assert all(len(c["text"]) == 1 for c in deltas)
    assert chunks[0] == {"type": "block-start", "index": 0, "blockType": "text"}
    args = '{"text":"hello world"}'
    assert chunks[-6:] == [
        {"type": "block-end", "index": 0, "block": text("Let me echo that for you.")},
        {"type": "block-start", "index": 1, "blockType": "tool-call"},
        {
            "type": "tool-call-delta",
            "index": 1,
            "id": "call-echo",
            "name": "echo",
            "argumentsDelta": args,
        },
        {
            "type": "block-end",
            "index": 1,
            "block": {"type": "tool-call", "id": "call-echo", "name": "echo", "arguments": args},
        },
        {"type": "usage", "usage": {"inputTokens": 20, "outputTokens": 10}},
        {"type": "finish", "reason": {"kind": "tool-calls"}},
    ]
    assert len(chunks) == 1 + 25 + 6


async def test_arguments_are_compact_json_with_raw_unicode() -> None:
    chunks = await collect(MockEchoAdapter(0), LlmRequest("m", [user(text('echo 你好 "q" ✓'))]))
    delta = next(c for c in chunks if c["type"] == "tool-call-delta")
    assert delta["argumentsDelta"] == '{"text":"你好 \\"q\\" ✓"}'


async def test_plain_reply_and_utf16_output_tokens() -> None:
    chunks = await collect(MockEchoAdapter(0), LlmRequest("m", [user(text("hi 😀"))]))
    reply = 'You said: "hi 😀". Try "echo <something>" to see a tool call.'
    deltas = [c["text"] for c in chunks if c["type"] == "text-delta"]
    assert deltas == list(reply)  # one code point per delta, like JS for-of
    assert chunks[-3:] == [
        {"type": "block-end", "index": 0, "block": text(reply)},
        {"type": "usage", "usage": {"inputTokens": 20, "outputTokens": len(reply) + 1}},
        {"type": "finish", "reason": {"kind": "stop"}},
    ]


async def test_tool_result_reply() -> None:
    messages = [
        user(text("echo x")),
        {"role": "assistant", "content": [text("Let me echo that for you.")]},
        user({"type": "tool-result", "toolCallId": "call-echo", "content": [], "isError": False}),
    ]
    chunks = await collect(MockEchoAdapter(0), LlmRequest("m", messages))
    assert chunks[-3]["block"] == text("The echo tool has spoken.")  # type: ignore[typeddict-item]
    assert chunks[-2]["usage"]["outputTokens"] == 25  # type: ignore[typeddict-item]


def test_last_user_text_rules() -> None:
    ctx_msg = user(text('<context source="plugin">'), text("Time sampled"), text("</context>"))
    assert last_user_text([user(text("echo a")), ctx_msg]) == "Time sampled"
    assert last_user_text([user(text("<x>"), text("first"), text("second"))]) == "first"
    assert last_user_text([user(text("older")), user(text("<only tags>"))]) == "older"
    assert last_user_text([{"role": "assistant", "content": [text("no")]}]) == ""
    assert last_user_text([]) == ""
    tool_only = user({"type": "tool-result", "toolCallId": "c", "content": []})
    assert has_tool_result([tool_only])
    assert not has_tool_result([tool_only, user(text("next"))])
    assert not has_tool_result([])


async def test_echo_with_time_context_answers_the_reading() -> None:
    reading = "Time sampled while preparing turn 1, step 1: now\nElapsed: 0s."
    messages = [
        user(text("echo hello world")),
        user(text('<context source="plugin">'), text(reading), text("</context>")),
    ]
    chunks = await collect(MockEchoAdapter(0), LlmRequest("m", messages))
    assert not any(c["type"] == "tool-call-delta" for c in chunks)
    assert chunks[-3]["block"]["text"].startswith(f'You said: "{reading}"')  # type: ignore[typeddict-item]


@pytest.mark.perf
async def test_default_delay_paces_deltas() -> None:
    start = time.monotonic()
    await collect(MockEchoAdapter(), LlmRequest("m", [user(text("x"))]))
    # 53 deltas at >= 2 ms each
    assert time.monotonic() - start >= 0.1


@pytest.mark.perf
async def test_abort_ends_promptly_with_aborted_finish() -> None:
    controller = AbortController()
    adapter = MockEchoAdapter(delay_ms=200)
    chunks: list[StreamChunk] = []
    start = time.monotonic()
    asyncio.get_running_loop().call_later(0.05, controller.abort)
    async for c in adapter.stream(LlmRequest("m", [user(text("x"))], signal=controller.signal)):
        chunks.append(c)
    assert time.monotonic() - start < 0.2
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "aborted"}}
    assert [c["type"] for c in chunks] == ["block-start", "text-delta", "finish"]


async def test_already_aborted_signal() -> None:
    controller = AbortController()
    controller.abort("stop")
    chunks = await collect(MockEchoAdapter(), LlmRequest("m", signal=controller.signal))
    assert chunks == [{"type": "finish", "reason": {"kind": "aborted"}}]


async def test_plugin_registers_and_unregisters() -> None:
    ctx = Context()
    await ctx.plugin(service)
    fiber = await ctx.plugin(echo)
    assert ctx.llm.has_model("mock-echo")
    chunks = [c async for c in ctx.llm.stream(LlmRequest("mock-echo", [user(text("hey"))]))]
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "stop"}}
    await fiber.dispose()
    assert not ctx.llm.has_model("mock-echo")
    with pytest.raises(LlmError) as info:
        [c async for c in ctx.llm.stream(LlmRequest("mock-echo"))]
    assert info.value.code == "NO_ADAPTER"


async def test_plugin_config() -> None:
    ctx = Context()
    await ctx.plugin(service)
    await ctx.plugin(echo, {"delayMs": 0, "models": ["a", "b"]})
    assert ctx.llm.has_model("a") and ctx.llm.has_model("b")
    assert not ctx.llm.has_model("mock-echo")
    with pytest.raises(ConfigError, match=r"\$\.delayMs"):
        await ctx.plugin(echo, {"delayMs": -1})
    with pytest.raises(LlmError) as info:  # "a" is taken
        await ctx.plugin(echo, {"models": ["a"]})
    assert info.value.code == "DUPLICATE_ADAPTER"
    assert echo.Config().delay_ms == 2
    assert echo.Config().models == ["mock-echo"]


async def test_plugin_waits_for_llm_service() -> None:
    ctx = Context()
    fiber = await ctx.plugin(echo)
    assert fiber.missing() == ["llm"]
    await ctx.plugin(service)
    await fiber.ready()
    assert ctx.llm.has_model("mock-echo")


async def test_user_text_answer_skips_plugin_context_and_unwraps_steering() -> None:
    reading = user(text('<context source="plugin">'), text("Time sampled"), text("</context>"))
    adapter = MockEchoAdapter(0, "userText")
    chunks = await collect(adapter, LlmRequest("m", [user(text("echo hello world")), reading]))
    calls = [c for c in chunks if c["type"] == "tool-call-delta"]
    assert [c["argumentsDelta"] for c in calls] == [js({"text": "hello world"})]  # type: ignore[typeddict-item]
    # After the tool result a reading follows; the mock still sees the result, not "echo" again.
    result = user({"type": "tool-result", "toolCallId": "call-echo", "content": [], "isError": False})
    after = [
        user(text("echo hello world")),
        reading,
        {"role": "assistant", "content": [text("Let me echo that for you.")]},
        result,
        reading,
    ]
    chunks = await collect(adapter, LlmRequest("m", after))
    assert chunks[-3]["block"] == text("The echo tool has spoken.")  # type: ignore[typeddict-item]
    steering = user(text('<steering source="user">'), text("echo steer"), text("</steering>"))
    chunks = await collect(adapter, LlmRequest("m", [user(text("first")), steering, reading]))
    assert any(c["type"] == "tool-call-delta" for c in chunks)
    # The reference rule stays the default.
    assert MockEchoAdapter(0).answer == "lastUserBlock"


async def test_answer_option_comes_from_plugin_config() -> None:
    ctx = Context()
    await ctx.plugin(service)
    await ctx.plugin(echo, {"delayMs": 0, "answer": "userText"})
    reading = user(text('<context source="plugin">'), text("Time sampled"), text("</context>"))
    request = LlmRequest("mock-echo", [user(text("hi")), reading])
    chunks = [c async for c in ctx.llm.stream(request)]
    assert chunks[-3]["block"]["text"].startswith('You said: "hi"')  # type: ignore[typeddict-item]
    with pytest.raises(ConfigError):
        await Context().plugin(echo, {"answer": "newest"})
    await ctx.dispose()
