"""Model-sent terminal controls are shown, never obeyed (pty + pyte), and pipes stay byte-exact."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyte
import pytest

from tests.apps.conftest import run_dsh
from tests.apps.test_terminal import Pty
from tests.llm.sse_server import Reply, SSEServer, chunk

CLEAR = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;PWNED-TITLE\x07"
CLIPBOARD = "\x1b]52;c;cHduZWQ=\x07"


def _script(server: SSEServer) -> None:
    call = {"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "echo", "arguments": json.dumps({"text": "tool" + TITLE})}}
    server.push(
        Reply.sse([chunk(reasoning="thinking" + TITLE), chunk(content="hello" + CLEAR + "world" + CLIPBOARD),
                   chunk(tool_calls=[call]), chunk(finish="tool_calls")]),
        Reply.sse([chunk(content="done\tok" + CLEAR), chunk(finish="stop")]),
    )


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with SSEServer() as running:
        _script(running)
        yield running


def _screen(raw: bytes) -> pyte.Screen:
    screen = pyte.Screen(120, 40)
    stream = pyte.ByteStream(screen)
    stream.feed(raw)
    return screen


def _assert_neutralised(raw: bytes, *, markdown: bool = False) -> None:
    for sequence in (CLEAR, TITLE, CLIPBOARD):
        assert sequence.encode() not in raw
    assert b"\x1b]0;" not in raw and b"\x1b]52;" not in raw and b"\x1b[2J" not in raw
    screen = _screen(raw)
    text = "\n".join(screen.display)
    assert screen.title == ""  # no OSC title reached the terminal
    assert "ready." in text  # not cleared away
    assert "hello\\x1b[2J\\x1b[Hworld\\x1b]52;c;cHduZWQ=\\x07" in text
    assert "thinking\\x1b]0;PWNED-TITLE\\x07" in text
    assert "ECHO: TOOL\\x1b]0;PWNED-TITLE\\x07" in text  # tool output
    if markdown:  # terminal mode renders Markdown, which expands a tab to spaces
        assert "done    ok\\x1b[2J\\x1b[H" in text
    else:
        assert b"done\tok" in raw and "ok\\x1b[2J\\x1b[H" in text  # a tab stays a tab


@pytest.mark.slow
def test_terminal_mode_shows_model_sent_controls_instead_of_obeying_them(workdir: Path, server: SSEServer) -> None:
    term = Pty(["chat", "--base-url", server.base_url, "--model", "test-model"], workdir)
    term.expect("/exit to leave")  # the input line is up (the welcome line is printed before it)
    term.type("hi\r")
    term.expect_input_after("turn 1 ·")  # Ctrl-D reaches dsh only with the input line up
    term.type("\x04")
    assert term.wait() == 0
    _assert_neutralised(term.screen, markdown=True)


@pytest.mark.slow
def test_plain_mode_on_a_terminal_is_sanitised_too(workdir: Path, server: SSEServer) -> None:
    term = Pty(["chat", "--plain", "--base-url", server.base_url, "--model", "test-model"], workdir)
    term.expect("ready.")
    term.type("hi\n")
    term.expect("done\tok")
    term.type("\x04")
    assert term.wait() == 0
    _assert_neutralised(term.screen)


@pytest.mark.slow
def test_plain_mode_to_a_pipe_stays_byte_exact(workdir: Path, server: SSEServer) -> None:
    result = run_dsh(["chat", "--base-url", server.base_url, "--model", "test-model"], workdir, stdin="hi\n")
    assert result.returncode == 0, result.stderr
    assert "hello" + CLEAR + "world" + CLIPBOARD in result.stdout
    assert "thinking" + TITLE in result.stdout
    assert "ECHO: TOOL" + TITLE in result.stdout
