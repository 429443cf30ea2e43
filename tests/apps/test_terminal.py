"""Terminal mode through a real pseudo-terminal, checked on the screen a user sees (pyte)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.apps.conftest import default_root, session_files
from tests.apps.pty_screen import Pty, Terminal

__all__ = ["Pty"]  # other pty tests import it from here
from tests.llm.sse_server import Reply, SSEServer, chunk

pytestmark = [pytest.mark.pty, pytest.mark.slow]

SLOW = """\
- id: echo
  name: echo-llm
  config: {delayMs: 40, answer: userText, models: [mock-echo, mock-echo-2]}
- id: tc
  name: time-context
- id: app
  name: stdio-app
  config: {model: mock-echo}
"""
FAST = SLOW.replace("delayMs: 40", "delayMs: 0")


def _events(workdir: Path, index: int = -1) -> list[dict[str, Any]]:
    log = sorted(session_files(workdir), key=lambda p: p.stat().st_mtime)[index]
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]


def _start(workdir: Path, config: str, *args: str, **env: str) -> Terminal:
    (workdir / "c.yml").write_text(config)
    term = Terminal(["chat", "--config", "c.yml", *args], workdir, **env)
    term.expect("/exit to leave")
    return term


def test_typing_during_a_stream_steers_and_never_mixes_into_the_reply(workdir: Path) -> None:
    term = _start(workdir, SLOW)
    term.type("first message\r")
    term.expect('You said: "first')  # streaming at 40 ms a character, far from done
    term.type("second line", delay=0.03)  # typed while the reply streams
    assert term.settle(0.3)
    assert term.prompt_line() == "↪ second line"
    term.type("\r")
    term.expect("↪ second line  (steers the running turn)")
    screen = term.expect("mock-echo · turn 1 ·", timeout=90)
    # The reply is whole, on its own line; the typed keys never landed inside it.
    assert '\nYou said: "first message". Try "echo <something>" to see a tool call.\n' in screen
    assert '\nYou said: "second line". Try "echo <something>" to see a tool call.\n' in screen
    assert "turn 2" not in screen
    term.type("\x04")
    assert term.wait() == 0
    events = _events(workdir)
    assert sum(e["type"] == "turn/start" for e in events) == 1
    [steer] = [e for e in events if e["type"] == "steering/message"]
    assert steer["data"]["content"] == [{"type": "text", "text": "second line"}]


MARKDOWN = "# Plan\n\nSome **bold** words and `inline` code.\n\n```python\ndef f(x):\n    return x + 1\n```\n\n- one\n- two\n"


def test_replies_render_as_markdown_with_highlighted_code(workdir: Path) -> None:
    with SSEServer() as server:
        pieces = [MARKDOWN[i : i + 7] for i in range(0, len(MARKDOWN), 7)]
        server.push(Reply.sse([chunk(content=p) for p in pieces] + [chunk(finish="stop")], delay=0.02))
        term = Terminal(["chat", "--base-url", server.base_url, "--model", "m"], workdir, OPENAI_API_KEY="k")
        term.expect("Ctrl-D to leave")
        term.type("show me\r")
        screen = term.expect("m · turn 1 ·")
        term.type("\x04")
        assert term.wait() == 0
    lines = screen.splitlines()
    assert "Plan" in screen and "# Plan" not in screen
    assert any("Some bold words and inline code." in line for line in lines)
    assert "**" not in screen and "```" not in screen
    assert any(line.strip() == "def f(x):" for line in lines)
    assert any(line.strip().startswith("• one") for line in lines)
    # Highlighted: the keyword in a truecolour foreground on the code block's background.
    assert b"\x1b[38;2;102;217;239;48;2;39;40;34mdef" in term.raw


def test_slash_commands(workdir: Path) -> None:
    term = _start(workdir, FAST)
    term.type("/he")
    term.expect("/help  this list")  # completion menu
    term.type("lp\r")
    term.expect("/usage    tokens in, out and cached")
    term.type("/nonsense\r")
    term.expect("✗ unknown command /nonsense")
    term.type("hello\r")
    term.expect("mock-echo · turn 1 ·")
    term.type("/usage\r")
    term.expect("1 model calls · mock-echo · 1 turns · 20 in · ")
    term.type("/clear\r")
    term.expect("new session main-session-")
    term.type("in the new one\r")
    term.expect('You said: "in the new one"')
    term.type("/resume\r")
    screen = term.expect("resume one with /resume N")
    [listed] = [line.split()[1] for line in screen.splitlines() if line.startswith("   1  main-session-")]
    term.type("/resume 1\r")
    term.expect(f"resumed {listed}")
    term.expect("> hello")  # its history
    term.type("/compact\r")
    term.expect("✗ compaction is not mounted")
    term.type("/exit\r")
    assert term.wait() == 0
    assert f"resume with: dsh chat --resume {listed}" in term.text()
    first, second = sorted(session_files(workdir), key=lambda p: p.stat().st_mtime)
    texts = [e["data"]["content"][0]["text"] for p in (first, second) for e in
             (json.loads(line) for line in p.read_text().splitlines()[1:]) if e["type"] == "user/message"]
    assert sorted(texts) == ["hello", "in the new one"]  # no slash command reached the model


def test_model_switch_is_a_durable_header_change(workdir: Path) -> None:
    term = _start(workdir, FAST)
    term.type("one\r")
    term.expect("mock-echo · turn 1 ·")
    term.type("/model mock-e")
    term.expect("mock-echo-2")  # completion offers the served models
    term.type("cho-2\r")
    term.expect("model: mock-echo-2 from the next request")
    term.type("/model gpt-nothing\r")
    term.expect('✗ model "gpt-nothing" is not served here')
    term.type("two\r")
    term.expect("mock-echo-2 · turn 2 ·")
    term.type("\x04")
    assert term.wait() == 0
    headers = [e["data"] for e in _events(workdir) if e["type"] == "request/header"]
    assert [(h["reason"], h["header"]["config"]["model"]) for h in headers] == [
        ("initial", "mock-echo"), ("change", "mock-echo-2"),
    ]


def test_ctrl_c_clears_a_draft_then_exits_and_resume_shows_history(workdir: Path) -> None:
    term = _start(workdir, FAST)
    term.type("remember the milk\r")
    term.expect("mock-echo · turn 1 ·")
    term.type("a draft")
    term.expect("> a draft")
    term.type("\x03")
    term.expect("press Ctrl-C again to exit")
    assert term.prompt_line() == ">"
    assert "a draft" not in term.settle(0.2).splitlines()[-1]
    term.type("\x03")
    assert term.wait() == 0
    [log] = session_files(workdir)
    session_id = log.stem
    assert f"resume with: dsh chat --resume {session_id}" in term.text()
    # Line-editing history persists per project, private like the sessions beside it.
    history = default_root() / "history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert "+remember the milk" in history.read_text()

    again = _start(workdir, FAST, "--continue")
    screen = again.expect("── 1 earlier turn; the last 1: ──")
    assert "> remember the milk" in screen
    assert 'You said: "remember the milk". Try "echo <something>" to see a tool call.' in screen
    again.type("\x04")
    assert again.wait() == 0


def test_ctrl_c_cancels_a_turn_and_the_next_request_says_so(workdir: Path) -> None:
    term = _start(workdir, SLOW)
    term.type("hello\r")
    term.expect('You said: "hel')
    term.type("\x03")
    screen = term.expect("⊘ turn aborted: interrupted by the user")
    assert screen.count("⊘") == 1 and "dsh: agent" not in screen
    term.type("again\r")
    term.expect("ℹ told the model: The previous turn (turn 1) was cancelled by the user")
    term.type("\x03")
    term.expect("⊘ turn aborted", timeout=10, count=2)
    term.expect_input_after("⊘ turn aborted")  # Ctrl-D reaches dsh only with the input line up
    term.type("\x04")
    assert term.wait() == 0
    events = _events(workdir)
    ends = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    assert ends == [{"kind": "aborted", "reason": "interrupted by the user"}] * 2
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert sum(e["type"] == "step/start" for e in events) == sum(e["type"] == "step/end" for e in events)


def test_a_failed_turn_shows_one_error_line(workdir: Path) -> None:
    with SSEServer() as server:
        server.push(Reply.sse([chunk(content="cut in the mid")], drop_after=1))
        term = Terminal(["chat", "--base-url", server.base_url, "--model", "m"], workdir, OPENAI_API_KEY="k")
        term.expect("Ctrl-D to leave")
        term.type("go\r")
        screen = term.expect("⊘ turn error")
        term.type("\x04")
        term.wait()
    screen = term.text()
    assert screen.count("failed") + screen.count("⊘") == 1, screen
    assert "cut in the mid\n" in screen  # the partial text ends its line; the error is its own


def test_no_color_keeps_terminal_mode(workdir: Path) -> None:
    term = _start(workdir, FAST, NO_COLOR="1")
    term.type("hi\r")
    term.expect("mock-echo · turn 1 ·")
    assert "/help for commands" in term.text()  # the status line: terminal mode, not plain
    term.type("\x04")
    assert term.wait() == 0
    assert b"\x1b[31m" not in term.raw and b"38;2;" not in term.raw and b"\x1b[36m" not in term.raw
