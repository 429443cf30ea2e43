"""Pure parts of the MCP client: naming, config and ``${VAR}``, backoff, result mapping, guard."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mcp_types as types
import pytest

from dsh.plugins.mcp.client import GUARD
from dsh.plugins.mcp.config import (
    SECRETS,
    Config,
    dsh_home,
    spec_from_config,
)
from dsh.plugins.mcp.mcp_json import discover, load_mcp_json
from dsh.plugins.mcp.naming import public_tool_name, valid_server_name
from dsh.plugins.mcp.results import map_result
from dsh.plugins.mcp.supervision import MAX_FAILURES, Backoff, backoff_delay
from dsh.runtime.config import ConfigError, validate_config
from tests.mcp.conftest import alive, trust_project, wait_for

# Computed with the reference's own function (Node's crypto) for these inputs.
REFERENCE_NAMES = [
    ("gh", "create_issue", "mcp__gh__create_issue"),
    ("gh", "a.b", "mcp__gh__a_b_506b5e9b51cb"),
    ("gh", "x" * 80, "mcp__gh__xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx_65f5ac8b1168"),
    ("s", "\U0001f600", "mcp__s_____5d9186a1f5a2"),
    ("srv", "tool with spaces/and.dots", "mcp__srv__tool_with_spaces_and_dots_cadf8d500676"),
    ("a", "b" * 55, "mcp__a__" + "b" * 55),
    ("a", "b" * 56, "mcp__a__" + "b" * 56),
]


@pytest.mark.parametrize(("server", "raw", "expected"), REFERENCE_NAMES)
def test_public_names_match_the_reference(server: str, raw: str, expected: str) -> None:
    assert public_tool_name(server, raw) == expected
    assert len(expected) <= 64


def test_truncation_keeps_distinct_tools_distinct() -> None:
    a = public_tool_name("srv", "y" * 70 + "1")
    b = public_tool_name("srv", "y" * 70 + "2")
    assert a != b and len(a) == len(b) == 64
    assert a[:51] == b[:51] and a[51] == "_"
    # Replacement collisions ("a.b" vs "a_b") are kept apart by the hash as well.
    assert public_tool_name("s", "a.b") != public_tool_name("s", "a_b") == "mcp__s__a_b"


def test_server_names() -> None:
    assert valid_server_name("github") and valid_server_name("a-b_9") and valid_server_name("x" * 32)
    for bad in ("", "x" * 33, "has space", "dot.ted", "ü"):
        assert not valid_server_name(bad)


def test_backoff_doubles_to_the_cap_and_gives_up_after_ten() -> None:
    assert [backoff_delay(n) for n in range(1, 10)] == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    now = [0.0]
    backoff = Backoff(lambda: now[0])
    delays = [backoff.lost() for _ in range(MAX_FAILURES)]
    assert delays == [0.5, 1, 2, 4, 8, 16, 30, 30, 30, 30]
    assert backoff.lost() is None


def test_backoff_budget_resets_after_a_healthy_period() -> None:
    now = [0.0]
    backoff = Backoff(lambda: now[0])
    for _ in range(5):
        backoff.lost()
    backoff.connected()
    now[0] += 10  # a short-lived connection does not reset the budget
    assert backoff.lost() == 16 and backoff.failures == 6
    backoff.connected()
    now[0] += 61
    assert backoff.lost() == 0.5 and backoff.failures == 1


def _spec(raw: dict[str, object], **environ: str):  # type: ignore[no-untyped-def]
    return spec_from_config(validate_config(Config, raw), source="test", environ=environ)


def test_var_expansion_in_env_and_headers() -> None:
    spec = _spec(
        {"serverName": "s", "url": "http://h/mcp", "headers": {"Authorization": "Bearer ${TOK}", "X": "${NOPE:-dflt}"}},
        TOK="secret-value-1",
    )
    assert spec.transport == "streamable-http"
    assert spec.headers == {"Authorization": "Bearer secret-value-1", "X": "dflt"}
    assert "secret-value-1" not in repr(spec)
    assert SECRETS.scrub("failed: Bearer secret-value-1!") == "failed: Bearer ***!"
    stdio = _spec({"serverName": "s", "command": "srv", "env": {"K": "${TOK}"}}, TOK="v2-secret")
    assert stdio.transport == "stdio" and stdio.env == {"K": "v2-secret"}


def test_missing_variable_names_the_variable_not_a_value() -> None:
    with pytest.raises(ConfigError) as err:
        _spec({"serverName": "s", "command": "srv", "env": {"K": "${UNSET_FOR_TEST}"}})
    assert str(err.value) == 'mcp server "s": env.K: environment variable UNSET_FOR_TEST is not set'


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, 'mcp: "serverName" is required (or "discover: true")'),
        ({"serverName": "bad name", "command": "x"}, "must match [A-Za-z0-9_-]{1,32}"),
        ({"serverName": "s", "command": "x", "bogus": 1}, "bogus"),
        ({"serverName": "s", "command": "x", "toolCallTimeoutMs": 0}, "toolCallTimeoutMs must be a positive"),
        ({"serverName": "s", "command": "x", "approval": "never"}, "approval"),
    ],
)
def test_bad_plugin_config_is_one_clear_error(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_config(Config, raw)
    assert message in str(err.value)


def test_transport_needs_command_or_url() -> None:
    with pytest.raises(ConfigError, match='needs "command"'):
        _spec({"serverName": "s"})
    with pytest.raises(ConfigError, match="not both"):
        _spec({"serverName": "s", "command": "x", "url": "http://h"})


def test_discovery_reads_user_and_project_files_project_wins(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    (home / "mcp.json").write_text(json.dumps({"mcpServers": {
        "shared": {"command": "user-cmd"}, "mine": {"url": "http://u/mcp", "approval": "trusted"}}}))
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "shared": {"command": "project-cmd", "args": ["--x", "${HOME_DIR}"], "cwd": "sub"}}}))
    trust_project(project, home)
    specs = {s.name: s for s in discover(cwd=project, environ={"DSH_HOME": str(home), "HOME_DIR": "/h"})}
    assert specs["shared"].command == "project-cmd"
    assert specs["shared"].args == ("--x", "/h")
    assert specs["shared"].cwd == str(project / "sub")
    assert specs["mine"].transport == "streamable-http" and not specs["mine"].needs_approval
    assert specs["shared"].needs_approval
    assert discover(cwd=tmp_path, environ={"DSH_HOME": str(tmp_path / "none")}) == []


def test_dsh_home() -> None:
    assert dsh_home({"DSH_HOME": "/x/y"}) == Path("/x/y")
    assert dsh_home({"XDG_DATA_HOME": "/data"}) == Path("/data/dsh")
    assert dsh_home({}) == Path("~/.local/share/dsh").expanduser()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "line 1: invalid JSON"),
        ("[]", 'expected an object with "mcpServers"'),
        ('{"mcpServers": {"s": {"command": 3}}}', 'server "s": command must be a string'),
        ('{"mcpServers": {"s": {"type": "sse", "url": "http://h"}}}', 'unsupported transport "sse"'),
        ('{"mcpServers": {"bad name": {"command": "x"}}}', "the name must match"),
        ('{"mcpServers": {"s": {"command": "x", "env": {"A": "${UNSET_FOR_TEST}"}}}}', "UNSET_FOR_TEST is not set"),
    ],
)
def test_bad_mcp_json_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / ".mcp.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_mcp_json(path, environ={})
    assert str(err.value).startswith(str(path))
    assert message in str(err.value)


def test_result_mapping_keeps_order_and_marks_errors() -> None:
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="one"),
            types.AudioContent(type="audio", data="AAAA", mime_type="audio/wav"),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(uri="file:///a.txt", text="x", mime_type="text/plain"),
            ),
        ],
        is_error=True,
    )
    mapped = map_result("t", result)
    assert mapped.is_error
    assert [b["text"] for b in mapped.content] == [
        "Error: one",
        "[audio: audio/wav, 3 bytes; not shown: dsh cannot attach audio yet]",
        "[embedded resource: file:///a.txt (text/plain); not shown: dsh cannot attach resources yet]",
    ]
    structured = map_result("t", types.CallToolResult(content=[], structured_content={"n": 1}))
    assert structured.content == [{"type": "text", "text": '{"n":1}'}] and not structured.is_error
    assert map_result("t", types.CallToolResult(content=[])).content == [
        {"type": "text", "text": "(t returned no content)"}
    ]


@pytest.mark.sigkill
@pytest.mark.slow
def test_guard_takes_its_group_down_when_the_parent_is_killed(tmp_path: Path) -> None:
    """A parent that dies by SIGKILL (no cleanup at all) leaves neither guard nor server."""
    pidfile = tmp_path / "child.pid"
    parent_code = (
        "import os, subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-I', '-S', {str(GUARD)!r}, str(os.getpid()), "
        f"'sh', '-c', 'echo $$ > {pidfile}; exec sleep 300'], start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(300)\n"  # a parent that idles (scripted) until the test kills it
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        guard = int(parent.stdout.readline())
        wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 30, "the server to start")
        server = int(pidfile.read_text())
        assert alive(guard) and alive(server)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        wait_for(lambda: not alive(server) and not alive(guard), 10, "the group to die")
    finally:
        if parent.poll() is None:
            parent.kill()


@pytest.mark.perf
def test_guard_passes_the_exit_status_and_refuses_a_dead_parent() -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), "sh", "-c", "exit 7"],
        start_new_session=True, timeout=30,
    )
    assert done.returncode == 7
    started = time.monotonic()
    orphan = subprocess.run(
        [sys.executable, "-I", "-S", str(GUARD), "1", "sleep", "30"], start_new_session=True, timeout=30
    )
    assert orphan.returncode == -signal.SIGKILL and time.monotonic() - started < 20
