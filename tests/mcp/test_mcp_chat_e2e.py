"""``dsh chat`` with real MCP servers and a scripted model, end to end.

The project's ``.mcp.json`` names a stdio server (spawned by dsh) and a streamable-HTTP server
(started here); the loopback model calls their tools. Checked: public names (the hashed
normalisation, one raw name on two servers), results in the log and in the next request,
``isError``, content mapping, ``list_changed``, a timeout, Ctrl-C during a call, a server killed
mid-session and recovering, servers failing to start, no child left after exit or ``kill -9``,
and the ``${VAR}`` secret nowhere on disk or screen.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from sse_server import Reply, SSEServer, chunk

from tests.apps.conftest import Interactive, run_dsh, session_files
from tests.mcp.conftest import (
    NO_PROXY,
    TOKEN,
    HttpServer,
    alive,
    pids,
    stdio_server,
    wait_for,
    write_mcp_json,
)

pytestmark = pytest.mark.slow

HASHED = "mcp__alpha__do_thing_" + hashlib.sha256(b"alpha\0do.thing").hexdigest()[:12]
FINGERPRINT = "fingerprint " + hashlib.sha256(TOKEN.encode()).hexdigest()[:12]


def calls(*items: tuple[str, str, dict[str, Any]]) -> Reply:
    return Reply.sse(
        [
            chunk(
                role="assistant",
                tool_calls=[
                    {"index": i, "id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                    for i, (cid, name, args) in enumerate(items)
                ],
            ),
            chunk(finish="tool_calls"),
        ]
    )


def text(value: str) -> Reply:
    return Reply.sse([chunk(role="assistant", content=value), chunk(finish="stop")])


def chat_args(server: SSEServer) -> list[str]:
    return ["chat", "--base-url", f"{server.base_url}/v1", "--model", "test-model"]


def env(tmp_path: Path) -> dict[str, str]:
    return {"DSH_HOME": str(tmp_path / "home"), "MCP_TEST_TOKEN": TOKEN, **NO_PROXY}


def events(cwd: Path, tmp_path: Path) -> list[dict[str, Any]]:
    # Sessions live under $DSH_HOME/sessions, and env() points the chat's DSH_HOME at tmp_path/home.
    (log,) = session_files(cwd, tmp_path / "home" / "sessions")
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]


def tool_messages(body: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


def read_stderr_until(chat: Interactive, marker: str, timeout: float = 180) -> str:
    """Read dsh's stderr (without blocking) until ``marker`` appears; returns what was read."""
    stream = chat.proc.stderr
    assert stream is not None
    os.set_blocking(stream.fileno(), False)
    seen = b""

    def found() -> bool:
        nonlocal seen
        seen += stream.read() or b""
        return marker.encode() in seen

    wait_for(found, timeout, repr(marker))
    os.set_blocking(stream.fileno(), True)
    return seen.decode()


def assert_secret_nowhere(root: Path, *texts: str) -> None:
    for value in texts:
        assert TOKEN not in value
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert TOKEN.encode() not in path.read_bytes(), path


def test_stdio_and_http_tools_in_a_chat(
    sse_server: SSEServer, workdir: Path, tmp_path: Path, http_server: Any
) -> None:
    beta: HttpServer = http_server("beta")
    write_mcp_json(
        workdir,
        {
            "alpha": stdio_server("alpha", tmp_path, env={"TOKEN": "${MCP_TEST_TOKEN}"}, approval="trusted"),
            # A server of its own, so that the short timeout cannot hit the other calls.
            "slow": stdio_server("slow", tmp_path, approval="trusted", toolCallTimeoutMs=1500),
            "beta": {"type": "http", "url": beta.url, "headers": {"Authorization": "Bearer ${MCP_TEST_TOKEN}"},
                     "approval": "trusted"},
        },
        trusted_in=tmp_path / "home",
    )
    sse_server.push(
        calls(
            ("c1", "mcp__alpha__search", {"q": "cats"}),
            ("c2", "mcp__beta__search", {"q": "dogs"}),
            ("c3", HASHED, {}),
            ("c4", "mcp__alpha__check_token", {}),
            ("c5", "mcp__beta__check_token", {}),
            ("c6", "mcp__alpha__fail", {}),
            ("c7", "mcp__beta__media", {}),
            ("c8", "mcp__slow__hang", {}),
        ),
        text("turn one done"),
        calls(("g1", "mcp__alpha__grow", {})),
        calls(("g2", "mcp__alpha__extra", {"x": "y"})),
        text("turn two done"),
    )
    chat = Interactive(chat_args(sse_server), workdir, **env(tmp_path))
    try:
        chat.read_until("> ", timeout=180)
        chat.send("first\n")
        chat.read_until("turn one done", timeout=120)
        chat.send("second\n")
        chat.read_until("turn two done", timeout=120)
        started = pids(tmp_path / "alpha.pids") + pids(tmp_path / "slow.pids")
        rc, out, err = chat.close()
    finally:
        if chat.proc.poll() is None:
            chat.proc.kill()
    assert rc == 0, err
    assert err == ""

    first, second, third, fourth, fifth = (r.json for r in sse_server.requests)
    names = [t["function"]["name"] for t in first["tools"]]
    for expected in ("mcp__alpha__search", "mcp__beta__search", HASHED, "mcp__beta__do_thing_"
                     + hashlib.sha256(b"beta\0do.thing").hexdigest()[:12], "echo"):
        assert expected in names
    assert all(len(n) <= 64 for n in names)
    assert "mcp__alpha__extra" not in names

    results = tool_messages(second)
    assert results["c1"] == "alpha found cats"
    assert results["c2"] == "beta found dogs"
    assert results["c3"] == "alpha did the thing"
    assert results["c4"] == FINGERPRINT  # env ${VAR} reached the stdio server
    assert results["c5"] == FINGERPRINT  # header ${VAR} reached the HTTP server
    assert results["c6"] == "Error: Error executing tool fail: the input was rejected"
    # Four blocks in order; the OpenAI wire joins a tool message's text blocks.
    assert results["c7"] == (
        "before[image: image/png, 8 bytes; not shown: dsh cannot attach images yet]"
        "[resource link: file:///tmp/report.txt (report)]after"
    )
    assert results["c8"] == 'Error: MCP tool "hang" on server "slow" timed out after 1.5s'
    wait_for(lambda: "cancelled" in (tmp_path / "slow.marker").read_text(), 60, "the courtesy cancel")

    # list_changed: the request after grow lists the new tool, once.
    fourth_names = [t["function"]["name"] for t in fourth["tools"]]
    assert fourth_names.count("mcp__alpha__extra") == 1
    assert len(fourth_names) == len(names) + 1
    assert tool_messages(fifth)["g2"] == "extra y"
    del third

    logged = {e["data"]["callId"]: e["data"] for e in events(workdir, tmp_path) if e["type"] == "tool/result"}
    assert logged["c1"]["content"] == [{"type": "text", "text": "alpha found cats"}]
    assert logged["c6"]["isError"] is True
    assert [b["text"] for b in logged["c7"]["content"]] == [
        "before",
        "[image: image/png, 8 bytes; not shown: dsh cannot attach images yet]",
        "[resource link: file:///tmp/report.txt (report)]",
        "after",
    ]
    assert "[tool result] alpha found cats" in out

    # Nothing left running, and the secret is nowhere.
    assert len(started) == 2
    wait_for(lambda: not any(alive(p) for pair in started for p in pair), 10, "the stdio servers to stop")
    assert_secret_nowhere(workdir, out, err)
    assert_secret_nowhere(tmp_path / "home")


@pytest.mark.sigkill
def test_server_killed_mid_session_recovers(sse_server: SSEServer, workdir: Path, tmp_path: Path) -> None:
    write_mcp_json(workdir, {"alpha": stdio_server("alpha", tmp_path, approval="trusted")}, trusted_in=tmp_path / "home")
    sse_server.push(
        calls(("k1", "mcp__alpha__search", {"q": "after restart"})),
        text("recovered"),
    )
    chat = Interactive(chat_args(sse_server), workdir, **env(tmp_path))
    try:
        chat.read_until("> ", timeout=180)
        (old, old_guard), = pids(tmp_path / "alpha.pids")
        os.kill(old, signal.SIGKILL)
        # The guard exits with its server, dsh notices and starts a new one after 0.5 s.
        wait_for(lambda: len(pids(tmp_path / "alpha.pids")) == 2, 180, "the server to be restarted")
        new, new_guard = pids(tmp_path / "alpha.pids")[1]
        err_seen = read_stderr_until(chat, 'mcp: server "alpha" reconnected')
        chat.send("go\n")
        chat.read_until("recovered", timeout=120)
        rc, _out, _err = chat.close()
    finally:
        if chat.proc.poll() is None:
            chat.proc.kill()
    assert rc == 0
    assert 'mcp: server "alpha" disconnected' in err_seen
    assert tool_messages(sse_server.requests[1].json)["k1"] == "alpha found after restart"
    assert not alive(old) and not alive(old_guard)
    wait_for(lambda: not alive(new) and not alive(new_guard), 10, "the restarted server to stop")


def test_ctrl_c_cancels_the_mcp_call(sse_server: SSEServer, workdir: Path, tmp_path: Path) -> None:
    write_mcp_json(workdir, {"alpha": stdio_server("alpha", tmp_path, approval="trusted")}, trusted_in=tmp_path / "home")
    sse_server.push(calls(("h1", "mcp__alpha__hang", {})), text("after cancel"))
    chat = Interactive(chat_args(sse_server), workdir, **env(tmp_path))
    try:
        chat.read_until("> ", timeout=180)
        chat.send("wait forever\n")
        marker = tmp_path / "alpha.marker"
        wait_for(lambda: marker.exists() and "started" in marker.read_text(), 120, "the call to start")
        chat.proc.send_signal(signal.SIGINT)
        wait_for(lambda: "cancelled" in marker.read_text(), 60, "the server to see the cancel")
        rc, _out, err = chat.close()
    finally:
        if chat.proc.poll() is None:
            chat.proc.kill()
    assert rc == 0, err
    ends = [e["data"]["reason"] for e in events(workdir, tmp_path) if e["type"] == "turn/end"]
    assert ends[-1]["kind"] == "aborted"
    result = next(e["data"] for e in events(workdir, tmp_path) if e["type"] == "tool/result")
    assert result["isError"] is True


@pytest.mark.sigkill
def test_kill_9_of_dsh_leaves_no_server(sse_server: SSEServer, workdir: Path, tmp_path: Path) -> None:
    write_mcp_json(
        workdir,
        {"alpha": stdio_server("alpha", tmp_path), "gamma": stdio_server("gamma", tmp_path)},
        trusted_in=tmp_path / "home",
    )
    chat = Interactive(chat_args(sse_server), workdir, **env(tmp_path))
    try:
        chat.read_until("> ", timeout=180)  # discovery finished before the prompt
        started = pids(tmp_path / "alpha.pids") + pids(tmp_path / "gamma.pids")
        assert len(started) == 2 and all(alive(p) for pair in started for p in pair)
        chat.proc.kill()
        chat.proc.wait(timeout=10)
    finally:
        if chat.proc.poll() is None:
            chat.proc.kill()
    wait_for(lambda: not any(alive(p) for pair in started for p in pair), 10, "the servers to die with dsh")


def test_servers_failing_to_start(sse_server: SSEServer, workdir: Path, tmp_path: Path) -> None:
    write_mcp_json(
        workdir,
        {
            "missing": {"command": "/nonexistent/mcp-server"},
            "refuses": stdio_server("refuses", tmp_path, env={"MCP_FAIL_START": "1"}),
            "nohttp": {"url": "http://127.0.0.1:9/mcp?key=${MCP_TEST_TOKEN}"},
            "alpha": stdio_server("alpha", tmp_path, approval="trusted"),
        },
        trusted_in=tmp_path / "home",
    )
    sse_server.push(calls(("a1", "mcp__alpha__search", {"q": "still works"})), text("fine"))
    result = run_dsh(chat_args(sse_server), workdir, stdin="hi\n", timeout=240, **env(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 3, lines
    assert (
        'dsh: mcp: server "missing" failed to start: command not found: /nonexistent/mcp-server; '
        "continuing without its tools"
    ) in lines
    assert any('server "refuses" failed to start' in line for line in lines)
    assert any('server "nohttp" failed to start' in line for line in lines)
    assert "Traceback" not in result.stderr
    assert tool_messages(sse_server.requests[1].json)["a1"] == "alpha found still works"
    names = [t["function"]["name"] for t in sse_server.requests[0].json["tools"]]
    assert not any(n.startswith(("mcp__missing", "mcp__refuses", "mcp__nohttp")) for n in names)
    assert_secret_nowhere(workdir, result.stdout, result.stderr)

    listing = run_dsh(["mcp", "list"], workdir, timeout=240, **env(tmp_path))
    assert listing.returncode == 1
    assert "missing  stdio  failed: command not found: /nonexistent/mcp-server" in listing.stdout
    assert "alpha  stdio  connected" in listing.stdout
    assert "  mcp__alpha__search" in listing.stdout
    assert TOKEN not in listing.stdout + listing.stderr

    # failOnStartupError: the chat does not start, with one line and exit 2.
    write_mcp_json(
        workdir,
        {"missing": {"command": "/nonexistent/mcp-server", "failOnStartupError": True}},
        trusted_in=tmp_path / "home",
    )
    fatal = run_dsh(chat_args(sse_server), workdir, stdin="hi\n", timeout=240, **env(tmp_path))
    assert fatal.returncode == 2
    assert fatal.stderr.strip().count("\n") == 0
    assert 'mcp: server "missing" failed to start: command not found' in fatal.stderr
