"""The pure mappings of dsh acp: turn-end reasons to stop reasons, prompt blocks to content,
events to updates (the same for a live turn and a replay)."""

from __future__ import annotations

from typing import Any

import pytest
from acp import schema
from acp.exceptions import RequestError

from dsh.apps.acp.mapping import prompt_content, stop_reason, updates_for


@pytest.mark.parametrize(
    ("reason", "finish", "expected"),
    [
        ({"kind": "completed"}, "stop", "end_turn"),
        ({"kind": "completed"}, "content-filter", "refusal"),
        ({"kind": "aborted", "reason": "cancelled by the client"}, None, "cancelled"),
        ({"kind": "interrupted"}, None, "cancelled"),
        ({"kind": "disposed"}, None, "cancelled"),
        ({"kind": "max-tokens"}, "max-tokens", "max_tokens"),
        ({"kind": "rejected", "reason": "blocked"}, None, "refusal"),
        ({"kind": "error", "step": 64, "message": "turn 1 exceeded 64 steps", "code": "MAX_STEPS"}, None, "max_turn_requests"),
    ],
)
def test_stop_reasons(reason: dict[str, Any], finish: str | None, expected: str) -> None:
    assert stop_reason(reason, finish) == expected


def test_a_failed_turn_is_a_protocol_error_with_its_message() -> None:
    with pytest.raises(RequestError) as failed:
        stop_reason({"kind": "error", "step": 1, "message": "HTTP 500: boom", "code": "HTTP"}, None)
    assert failed.value.code == -32603 and "HTTP 500: boom" in str(failed.value)


def test_prompt_content() -> None:
    blocks = [
        schema.TextContentBlock(type="text", text="look at"),
        schema.ResourceContentBlock(type="resource_link", name="a.py", uri="file:///w/a.py"),
        schema.EmbeddedResourceContentBlock(
            type="resource", resource=schema.TextResourceContents(uri="file:///w/b.py", text="x = 1")
        ),
    ]
    assert prompt_content(blocks) == [
        {"type": "text", "text": "look at"},
        {"type": "text", "text": "[resource: a.py](file:///w/a.py)"},
        {"type": "text", "text": '<resource uri="file:///w/b.py">\nx = 1\n</resource>'},
    ]
    for bad in (
        schema.AudioContentBlock(type="audio", data="AA", mime_type="audio/wav"),
        schema.EmbeddedResourceContentBlock(
            type="resource", resource=schema.BlobResourceContents(uri="file:///w/c.bin", blob="AA")
        ),
    ):
        with pytest.raises(RequestError) as refused:
            prompt_content([bad])
        assert refused.value.code == -32602 and "prompt block 0" in str(refused.value)
    with pytest.raises(RequestError):
        prompt_content([])


def test_time_readings_and_log_only_events_are_not_chat() -> None:
    reading = {
        "content": [{"type": "text", "text": "Time sampled while preparing turn 1, step 1: ..."}],
        "source": {"kind": "plugin", "plugin": "time-context"},
    }
    for kind, data in (("context/message", reading), ("step/start", {"turn": 1, "step": 1}), ("request/header", {})):
        assert updates_for(kind, data, cwd="/w", tool_names={}, replay=True) == []


def test_prompts_replay_as_user_messages_but_are_not_echoed_live() -> None:
    data = {"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}
    assert updates_for("user/message", data, cwd=None, tool_names={}, replay=False) == []
    (update,) = updates_for("user/message", data, cwd=None, tool_names={}, replay=True)
    assert update.session_update == "user_message_chunk" and update.content.text == "hi"


def test_a_relative_write_path_becomes_an_absolute_diff_path() -> None:
    names: dict[str, str] = {}
    data = {"callId": "c1", "name": "write", "arguments": '{"file_path":"src/a.py","content":"x"}'}
    (start,) = updates_for("tool/call", data, cwd="/w", tool_names=names, replay=False)
    assert start.content[0].path == "/w/src/a.py"
    result = {"callId": "c1", "content": [{"type": "text", "text": "Error: no"}], "isError": True}
    (end,) = updates_for("tool/result", result, cwd="/w", tool_names=names, replay=False)
    assert (end.status, end.kind) == ("failed", "edit")


async def test_the_replay_fast_path_sends_what_the_mapping_sends() -> None:
    from dsh.apps.acp.replay import replay
    from dsh.session import Session

    session = Session("s")
    session.append("turn/start", {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}})
    session.append("user/message", {"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}, surface_op="append")
    session.append("step/start", {"turn": 1, "step": 1})
    for chunk in (
        {"type": "reasoning-delta", "index": 0, "text": "hmm"},
        {"type": "text-delta", "index": 1, "text": "hel"},
        {"type": "text-delta", "index": 1, "text": "lo"},
    ):
        session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": chunk})
    slow: list[dict[str, Any]] = []
    fast: list[dict[str, Any]] = []

    async def send_slow(update: Any) -> None:
        slow.append(update.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True))

    async def send_fast(update: Any) -> None:
        fast.append(update.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True))

    assert await replay(session.events, send_slow, cwd=None, tool_names={}) == 4
    assert await replay(session.events, send_fast, cwd=None, tool_names={}, send_raw=fast.append) == 4
    assert fast == slow
    assert [u["sessionUpdate"] for u in fast] == ["user_message_chunk", "agent_thought_chunk", "agent_message_chunk", "agent_message_chunk"]
