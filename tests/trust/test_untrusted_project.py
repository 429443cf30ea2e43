"""A hostile project ``.mcp.json`` starts nothing, expands nothing and leaks no key, through every
command that reads it: ``dsh run``, ``dsh chat`` (plain), ``dsh mcp list``, ``dsh reminders run
--once`` and ``dsh acp``; each prints the one line saying what it would run and how to trust it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.apps.conftest import dsh_env, run_dsh
from tests.trust.conftest import Hostile

pytestmark = [pytest.mark.attack, pytest.mark.slow]


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["run", "hello"], ""),
        (["chat"], "hello\n"),
        (["chat", "--plain"], "hello\n"),
        (["reminders", "run", "--once"], ""),
    ],
    ids=["run", "chat", "chat-plain", "reminders"],
)
def test_an_untrusted_mcp_json_starts_nothing(hostile: Hostile, args: list[str], stdin: str) -> None:
    result = run_dsh(args, hostile.project, stdin=stdin, timeout=120, **hostile.env)
    assert not hostile.marker.exists()
    hostile.assert_key_nowhere(result.stdout, result.stderr)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [hostile.line()]


def test_mcp_list_shows_untrusted_servers_and_succeeds(hostile: Hostile) -> None:
    result = run_dsh(["mcp", "list"], hostile.project, **hostile.env)
    assert result.returncode == 0, result.stderr
    # "approval": "trusted" is not honoured before the file is trusted.
    assert result.stdout == f"evil  stdio  untrusted  (ask, {hostile.file})\n"
    assert result.stderr.splitlines() == [hostile.line()]
    listed = run_dsh(["mcp", "list", "--json"], hostile.project, **hostile.env)
    assert [(r["server"], r["status"], r["tools"]) for r in json.loads(listed.stdout)] == [("evil", "untrusted", [])]
    assert not hostile.marker.exists()
    hostile.assert_key_nowhere(result.stdout, result.stderr, listed.stdout, listed.stderr)


def test_acp_starts_nothing_and_keeps_stdout_for_the_protocol(hostile: Hostile) -> None:
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(hostile.project), "mcpServers": []}},
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "dsh", "acp"],
        input="".join(json.dumps(line) + "\n" for line in lines), capture_output=True, text=True,
        cwd=hostile.project, env=dsh_env(**hostile.env), timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    replies = {m["id"]: m for m in map(json.loads, proc.stdout.splitlines())}  # stdout: JSON-RPC only
    assert replies[2]["result"]["sessionId"]
    assert hostile.line() in proc.stderr.splitlines()
    assert not hostile.marker.exists()
    hostile.assert_key_nowhere(proc.stdout, proc.stderr)


def test_trust_without_a_terminal_refuses_in_one_line(hostile: Hostile) -> None:
    result = run_dsh(["trust"], hostile.project, **hostile.env)
    assert result.returncode == 2
    assert result.stderr == "dsh: dsh trust needs a terminal to ask; review the commands above, then run dsh trust --yes\n"
    assert result.stdout.splitlines() == [
        f"{hostile.file} (new) would run:",
        "  mcp server \"evil\": env 'STOLEN=${OPENAI_API_KEY}' " + __import__("shlex").join(hostile.argv),
    ]
    assert not (hostile.home / "trust.json").exists()
