"""Tracing is on for every front end: ``dsh chat`` (here through a ``telemetry`` plugin entry in
a config), ``dsh reminders run``, ``dsh acp`` and the library (through the standard variables)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.apps.acp.acp_support import dsh_acp, initialize, stderr_of, text
from tests.apps.conftest import dsh_env, run_dsh, session_files
from tests.llm.sse_server import Reply, SSEServer, chunk
from tests.observability.otlp_receiver import OtlpReceiver

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
CONFIG = """\
- id: echo
  name: echo-llm
  config: {{delayMs: 0, answer: userText}}
- id: tel
  name: telemetry
  config: {{endpoint: "{url}", serviceName: my-dsh}}
- id: app
  name: stdio-app
  config: {{model: mock-echo}}
"""


@pytest.mark.slow
def test_chat_with_a_telemetry_plugin_entry(workdir: Path) -> None:
    with OtlpReceiver() as receiver:
        (workdir / "c.yml").write_text(CONFIG.format(url=receiver.url))
        result = run_dsh(["chat", "--config", "c.yml"], workdir, stdin="hello\n", **NO_PROXY)
        assert result.returncode == 0, result.stderr
        spans = receiver.wait_for(2)
    assert sorted(s.name for s in spans) == ["chat mock-echo", "invoke_agent main"]
    assert {s.resource["service.name"] for s in spans} == {"my-dsh"}


def test_a_bad_telemetry_config_is_one_line_and_exit_2(workdir: Path) -> None:
    (workdir / "c.yml").write_text(CONFIG.format(url="http://127.0.0.1:9").replace("serviceName", "servicename"))
    result = run_dsh(["chat", "--config", "c.yml"], workdir, stdin="hello\n")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        'dsh: unknown key "servicename" in plugin "tel" (did you mean "serviceName"?)'
    ]


def tool_call(name: str, arguments: dict[str, object]) -> Reply:
    return Reply.sse([chunk(role="assistant", tool_calls=[{"index": 0, "id": "call_1", "type": "function",
                      "function": {"name": name, "arguments": json.dumps(arguments)}}]), chunk(finish="tool_calls")])


@pytest.mark.slow
def test_reminders_run_traces_the_delivered_turn(workdir: Path) -> None:
    with SSEServer() as server, OtlpReceiver() as receiver:
        server.push(tool_call("schedule_create", {"prompt": "check", "after_seconds": 1}),
                    Reply.sse([chunk(content="Set."), chunk(finish="stop")]))
        opts = ["--base-url", server.base_url, "--model", "test-model"]
        chat = run_dsh(["chat", *opts], workdir, stdin="remind me\n", OPENAI_API_KEY="k", **NO_PROXY)
        assert chat.returncode == 0, chat.stderr
        [log] = session_files(workdir)
        created = [json.loads(line) for line in log.read_text().splitlines()[1:]]
        [due] = [e["data"]["schedule"]["scheduledAt"] for e in created if e["type"] == "schedule/change"]
        while time.time() < datetime.fromisoformat(due).timestamp():
            time.sleep(0.1)
        server.push(Reply.sse([chunk(content="Reminder: check."), chunk(finish="stop")]))
        worker = run_dsh(["reminders", "run", "--once", *opts], workdir, OPENAI_API_KEY="k",
                         OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, **NO_PROXY)
        assert worker.returncode == 0, worker.stderr
        assert "delivered" in worker.stdout
        spans = receiver.wait_for(2)
    [turn] = [s for s in spans if s.name == "invoke_agent main"]
    assert turn.attributes["dsh.turn"] == 2 and turn.attributes["dsh.trigger.source"] == "plugin"
    assert [s.name for s in spans if s.parent_id == turn.span_id] == ["chat test-model"]


@pytest.mark.slow
async def test_acp_sessions_are_traced(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with OtlpReceiver() as receiver:
        async with dsh_acp(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_BSP_SCHEDULE_DELAY="50") as (conn, _proc, _rec, log):
            await initialize(conn)
            new = await conn.new_session(cwd=str(ws), mcp_servers=[])
            reply = await asyncio.wait_for(conn.prompt(session_id=new.session_id, prompt=[text("echo hi")]), 60)
            assert reply.stop_reason == "end_turn", stderr_of(log)
            spans = await asyncio.to_thread(receiver.wait_for, 4)
    names = sorted(s.name for s in spans)
    assert names == ["chat mock-echo", "chat mock-echo", "execute_tool echo", "invoke_agent main"]
    assert {s.attributes["gen_ai.conversation.id"] for s in spans} == {new.session_id}


@pytest.mark.slow
@pytest.mark.parametrize("closed", [True, False], ids=["closed", "never-closed"])
def test_the_library_is_traced(tmp_path: Path, closed: bool) -> None:
    # Never closed: the agent is left open at interpreter exit; what is queued still goes out.
    code = (
        "import asyncio, dsh\n"
        "async def main():\n"
        "    agent = dsh.Agent(model='mock-echo', store='./s', time_context=False)\n"
        "    r = await agent.run('echo hi', session_id='demo')\n"
        f"    {'await agent.aclose()' if closed else 'pass'}\n"
        "    print(r.reason)\n"
        "asyncio.run(main())\n"
    )
    with OtlpReceiver() as receiver:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                                env=dsh_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, **NO_PROXY), timeout=120)
        assert result.returncode == 0, result.stderr
        spans = receiver.wait_for(4)
    [turn] = [s for s in spans if s.name.startswith("invoke_agent")]
    assert turn.attributes["gen_ai.conversation.id"] == "demo"
    assert sorted(s.name for s in spans if s.parent_id == turn.span_id) == ["chat mock-echo", "chat mock-echo", "execute_tool echo"]
