"""Every path to a terminal goes through the one sanitiser (``dsh.apps.escape``), bidi controls
included, and pipes stay byte-exact.

On a real pseudo-terminal: ``dsh run`` with a scripted model on loopback whose reply holds a
window-title OSC, an OSC 52 clipboard write, a screen clear, a one-byte C1 CSI and bidi
overrides (text, ``--output-format json`` and ``stream-json``); ``dsh sessions list`` in a folder
whose name holds ESC sequences and a right-to-left override; ``dsh mcp list`` with a user-level
server (``$DSH_HOME/mcp.json``) whose failure text carries the same. To a pipe, ``dsh run``
prints the reply byte for byte.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests.apps.conftest import dsh_env, run_dsh
from tests.llm.sse_server import Reply, SSEServer, chunk

pytestmark = pytest.mark.attack

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}

HOSTILE = (
    "title\x1b]0;pwned\x07 clip\x1b]52;c;cHduZWQ=\x07 clear\x1b[2J c1\x9b31m "
    "bidi\u202eesrever\u202c iso\u2066x\u2069 marks\u200e\u200f\u061c done"
)
# What must never reach the terminal raw (ESC, BEL, C1 CSI, every bidi control).
RAW = ["\x1b", "\x07", "\x9b", "\u202e", "\u202c", "\u2066", "\u2069", "\u200e", "\u200f", "\u061c"]
SHOWN = ["\\x1b]0;pwned\\x07", "\\x1b]52;c;cHduZWQ=\\x07", "\\x1b[2J", "\\x9b31m", "\\u202eesrever\\u202c"]


def in_pty(args: list[str], cwd: Path, timeout: float = 60, **env: str) -> tuple[int, str]:
    """``dsh ARGS`` with stdin, stdout and stderr on a pseudo-terminal; its exit status and
    everything it wrote there (the terminal's CRLF made LF)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsh", *args], cwd=cwd, env=dsh_env(TERM="xterm-256color", **env),
        stdin=slave, stdout=slave, stderr=slave,
    )
    os.close(slave)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            assert ready, f"dsh wrote nothing for {timeout}s: {out[-2000:]!r}"
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            out += data
    finally:
        os.close(master)
        rc = proc.wait(timeout=timeout)
    return rc, out.decode("utf-8", "replace").replace("\r\n", "\n")


def assert_shown_not_obeyed(screen: str) -> None:
    for raw in RAW:
        assert raw not in screen, (raw, screen[-3000:])


def _reply(server: SSEServer) -> None:
    server.push(Reply.sse([chunk(content=HOSTILE[:40]), chunk(content=HOSTILE[40:]), chunk(finish="stop")]))


def _run(server: SSEServer, *extra: str) -> list[str]:
    return ["run", "--base-url", server.base_url, "--model", "test-model", *extra, "say it"]


@pytest.mark.pty
def test_dsh_run_to_a_terminal_shows_control_sequences(workdir: Path) -> None:
    with SSEServer() as server:
        _reply(server)
        rc, screen = in_pty(_run(server), workdir, **NO_PROXY)
    assert rc == 0, screen
    assert_shown_not_obeyed(screen)
    for shown in SHOWN:
        assert shown in screen


@pytest.mark.pty
@pytest.mark.parametrize("fmt", ["json", "stream-json"])
def test_dsh_run_json_to_a_terminal_is_escaped_and_still_the_same_json(workdir: Path, fmt: str) -> None:
    with SSEServer() as server:
        _reply(server)
        rc, screen = in_pty(_run(server, "--output-format", fmt), workdir, **NO_PROXY)
    assert rc == 0, screen
    assert_shown_not_obeyed(screen)
    lines = [json.loads(line) for line in screen.splitlines() if line.startswith("{")]
    if fmt == "json":
        [result] = lines
        assert result["text"] == HOSTILE  # the escapes decode to the model's exact text
    else:
        [message] = [e for e in lines if e["type"] == "assistant/message"]
        assert message["data"]["content"][0]["text"] == HOSTILE


def test_dsh_run_to_a_pipe_is_byte_exact(workdir: Path) -> None:
    with SSEServer() as server:
        _reply(server)
        text = run_dsh(_run(server), workdir, **NO_PROXY)
        _reply(server)
        as_json = run_dsh(_run(server, "--output-format", "json"), workdir, **NO_PROXY)
    assert text.returncode == 0, text.stderr
    assert text.stdout == HOSTILE + "\n"
    assert json.loads(as_json.stdout)["text"] == HOSTILE
    assert "\u202e" in as_json.stdout and "\x9b" in as_json.stdout  # unchanged: json.dumps' own output


@pytest.mark.pty
def test_sessions_list_shows_an_escaping_folder_name(tmp_path: Path) -> None:
    folder = tmp_path / "proj\x1b]0;pwned\x07\x1b[2J\u202eevil"
    folder.mkdir()
    empty = tmp_path / "empty\x1b[2J\u2066x"
    empty.mkdir()
    home = str(tmp_path / "home")
    assert run_dsh(["run", "hello \x1b[2J\u202e there"], folder, DSH_HOME=home).returncode == 0
    rc, screen = in_pty(["sessions", "list", "--all"], folder, DSH_HOME=home)
    assert rc == 0, screen
    assert_shown_not_obeyed(screen)
    assert "proj\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil" in screen  # the CWD column
    rc, screen = in_pty(["sessions", "list"], empty, DSH_HOME=home)
    assert rc == 0, screen
    assert_shown_not_obeyed(screen)
    assert "no sessions for this folder (" in screen and "empty\\x1b[2J\\u2066x" in screen
    rc, screen = in_pty(["sessions", "list", "--json"], folder, DSH_HOME=home)
    assert rc == 0, screen
    assert_shown_not_obeyed(screen)
    assert json.loads(screen)[0]["cwd"] == str(folder)


@pytest.mark.pty
def test_mcp_list_shows_an_escaping_server_error(tmp_path: Path) -> None:
    """The user-level ``mcp.json`` stays trusted (a project ``.mcp.json`` may not start at all);
    the server's command holds the sequences, and its failure quotes it."""
    home = tmp_path / "home"
    home.mkdir()
    command = "/nonexistent/\x1b]0;pwned\x07\x1b[2J\u202eevil\x9b31m"
    (home / "mcp.json").write_text(json.dumps({"mcpServers": {"evil": {"command": command}}}))
    work = tmp_path / "work"
    work.mkdir()
    rc, screen = in_pty(["mcp", "list"], work, DSH_HOME=str(home))
    assert rc == 1, screen
    assert "evil  stdio  failed" in screen
    assert_shown_not_obeyed(screen)
    assert "/nonexistent/\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil\\x9b31m" in screen
    piped = run_dsh(["mcp", "list"], work, DSH_HOME=str(home))
    assert command in piped.stdout  # to a pipe: as it is


def test_the_sanitiser_covers_bidi_controls() -> None:
    from dsh.apps.escape import escape_controls, escape_json

    text = "a\u202eb\u2066c\u2069d\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u2067\u2068\x1b\x9b\t\n"
    shown = escape_controls(text)
    assert shown == (
        "a\\u202eb\\u2066c\\u2069d\\u200e\\u200f\\u061c\\u202a\\u202b\\u202c\\u202d\\u2067\\u2068\\x1b\\x9b\t\n"
    )
    encoded = json.dumps({"t": text}, ensure_ascii=False)
    assert json.loads(escape_json(encoded)) == {"t": text}
    assert not any(raw in escape_json(encoded) for raw in RAW)
