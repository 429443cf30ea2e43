"""``dsh acp`` with the keyless mock-echo model, driven by the acp package's own client over the
child's stdio: initialize, a new session, two prompts streamed as chunks (one with the echo tool as
tool_call + tool_call_update), protocol errors that leave the process serving, cancel mid-turn,
then ``kill -9`` and a fresh ``dsh acp`` that loads the session, replays it in order and continues
it; the session is visible to ``dsh sessions show`` and resumable with ``dsh chat --resume``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest
from acp import schema
from acp.exceptions import RequestError

from tests.apps.acp.acp_support import dsh_acp, initialize, kill9, stderr_of, text
from tests.apps.conftest import run_dsh

pytestmark = pytest.mark.slow


@pytest.mark.sigkill
async def test_echo_session_survives_kill9(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    async with dsh_acp(tmp_path) as (conn, proc, rec, log):
        init = await initialize(conn)
        caps = init.agent_capabilities
        assert init.protocol_version == 1
        assert caps is not None and caps.load_session
        assert caps.prompt_capabilities is not None and caps.prompt_capabilities.embedded_context
        assert not caps.prompt_capabilities.image
        assert caps.session_capabilities is not None and caps.session_capabilities.list is not None
        assert caps.session_capabilities.resume is not None

        new = await conn.new_session(cwd=str(ws), mcp_servers=[])
        sid = new.session_id

        # Prompt 1: a plain answer, streamed as several agent_message_chunk updates.
        r1 = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("hello there")]), 60)
        assert r1.stop_reason == "end_turn", stderr_of(log)
        chunks = [u for _, u in rec.updates if u.session_update == "agent_message_chunk"]
        assert len(chunks) > 1
        assert rec.text() == 'You said: "hello there". Try "echo <something>" to see a tool call.'
        # The time reading is durable but not chat: no update carries it.
        assert "Time sampled" not in json.dumps([u.model_dump(mode="json") for _, u in rec.updates])
        assert all(s == sid for s, _ in rec.updates)

        # Prompt 2: the echo tool, as tool_call then tool_call_update.
        rec.clear()
        r2 = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("echo hi")]), 60)
        assert r2.stop_reason == "end_turn"
        kinds = rec.kinds()
        assert kinds.index("tool_call") < kinds.index("tool_call_update")
        call = next(u for _, u in rec.updates if u.session_update == "tool_call")
        done = next(u for _, u in rec.updates if u.session_update == "tool_call_update")
        assert (call.title, call.kind, call.status, call.raw_input) == ("echo", "other", "in_progress", {"text": "hi"})
        assert done.tool_call_id == call.tool_call_id and done.status == "completed"
        assert done.content[0].content.text == "ECHO: HI"
        assert rec.text() == "Let me echo that for you.The echo tool has spoken."

        # Bad input gets protocol errors; the process keeps serving.
        with pytest.raises(RequestError) as unknown:
            await conn.prompt(session_id="no-such-session", prompt=[text("hi")])
        assert "unknown session" in str(unknown.value)
        with pytest.raises(RequestError) as image:
            await conn.prompt(
                session_id=sid, prompt=[schema.ImageContentBlock(type="image", data="AAAA", mime_type="image/png")]
            )
        assert 'content type "image" is not supported' in str(image.value)
        with pytest.raises(RequestError) as bad_cwd:
            await conn.new_session(cwd="relative/path", mcp_servers=[])
        assert "absolute" in str(bad_cwd.value)
        with pytest.raises(RequestError) as no_method:
            await conn._conn.send_request("session/frobnicate", {"sessionId": sid})
        assert no_method.value.code == -32601

        # Cancel mid-turn: a long answer (2 ms per character), a second prompt refused while it runs.
        rec.clear()
        long = "x" * 3000
        running = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text(long)]))
        await rec.wait_for(lambda: "agent_message_chunk" in rec.kinds())
        with pytest.raises(RequestError) as busy:
            await conn.prompt(session_id=sid, prompt=[text("me too")])
        assert "already running a prompt" in str(busy.value)
        await conn.cancel(session_id=sid)
        r3 = await asyncio.wait_for(running, 60)
        assert r3.stop_reason == "cancelled"
        streamed_before_kill = rec.text()
        assert 0 < len(streamed_before_kill) < len(long)

        # A prompt after the cancel works, then the process is killed mid-answer.
        rec.clear()
        r4 = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("after cancel")]), 60)
        assert r4.stop_reason == "end_turn"
        rec.clear()
        killed = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text("y" * 3000)]))
        await rec.wait_for(lambda: "agent_message_chunk" in rec.kinds())
        kill9(proc)
        await proc.wait()
        with pytest.raises(ConnectionError):  # the connection is gone: the prompt never answers
            await asyncio.wait_for(killed, 30)

    # A new process loads the session: the whole log replayed in order, user messages included.
    async with dsh_acp(tmp_path) as (conn, proc, rec, log):
        await initialize(conn)
        listed = await conn.list_sessions(cwd=str(ws))
        assert [s.session_id for s in listed.sessions] == [sid]
        await asyncio.wait_for(conn.load_session(cwd=str(ws), session_id=sid, mcp_servers=[]), 60)
        users = [u.content.text for _, u in rec.updates if u.session_update == "user_message_chunk"]
        assert users == ["hello there", "echo hi", long, "after cancel", "y" * 3000]
        kinds = rec.kinds()
        assert kinds[0] == "user_message_chunk"
        replayed = rec.text()
        assert replayed.startswith('You said: "hello there".')
        assert "Let me echo that for you.The echo tool has spoken." in replayed
        assert 'You said: "after cancel"' in replayed
        tool_updates = [u for _, u in rec.updates if u.session_update == "tool_call_update"]
        assert [u.status for u in tool_updates] == ["completed"]
        # ...and continues it.
        rec.clear()
        r5 = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("still there?")]), 60)
        assert r5.stop_reason == "end_turn", stderr_of(log)
        assert rec.text() == 'You said: "still there?". Try "echo <something>" to see a tool call.'

    shown = run_dsh(["sessions", "show", sid], tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "still there?" in shown.stdout and "hello there" in shown.stdout
    assert "interrupted" in run_dsh(["sessions", "show", sid, "--events"], tmp_path).stdout
    # The terminal continues it in the folder it was recorded in (its workspace).
    resumed = run_dsh(["chat", "--resume", sid], ws, stdin="and from the terminal\n")
    assert resumed.returncode == 0, resumed.stderr
    assert 'You said: "and from the terminal"' in resumed.stdout

    # session/resume: the same session, continued without a replay.
    async with dsh_acp(tmp_path) as (conn, _proc, rec, log):
        await initialize(conn)
        await asyncio.wait_for(conn.resume_session(cwd=str(ws), session_id=sid, mcp_servers=[]), 60)
        assert rec.updates == []
        r6 = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("resumed")]), 60)
        assert r6.stop_reason == "end_turn", stderr_of(log)
        assert rec.kinds()[0] == "agent_message_chunk"
        with pytest.raises(RequestError) as missing:
            await conn.load_session(cwd=str(ws), session_id="main-session-missing", mcp_servers=[])
        assert 'cannot load session "main-session-missing"' in str(missing.value)


async def test_sigterm_ends_the_running_turn_aborted_and_flushes(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    async with dsh_acp(tmp_path) as (conn, proc, rec, log):
        await initialize(conn)
        sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
        running = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text("z" * 3000)]))
        await rec.wait_for(lambda: "agent_message_chunk" in rec.kinds())
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0, stderr_of(log)
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(running, 30)
    log_path = next((Path(os.environ["DSH_HOME"]) / "sessions").glob("*/*.jsonl"))
    events = [json.loads(line) for line in log_path.read_text().splitlines()[1:]]
    assert events[-1]["type"] == "turn/end"
    assert events[-1]["data"]["reason"] == {"kind": "aborted", "reason": "dsh acp stopped (end of input or a signal)"}
