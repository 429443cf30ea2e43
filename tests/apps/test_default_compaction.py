"""The default composition mounts compaction when the model's context window is known (the model
catalog, or ``--context-window``); without one ``/compact`` says why. ``--max-steps N`` caps the
steps of a turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apps.conftest import Interactive, run_dsh, session_files
from tests.llm.sse_server import SSEServer
from tests.tools.workspace.cli_support import calls, done

pytestmark = pytest.mark.slow


def _events(cwd: Path) -> list[dict[str, object]]:
    [log] = session_files(cwd)
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]


@pytest.mark.parametrize("flags", [["--model", "deepseek-chat"], ["--model", "local-x", "--context-window", "32000"]])
def test_compact_is_mounted_when_the_window_is_known(workdir: Path, flags: list[str]) -> None:
    with SSEServer() as server:
        server.push(done("Hi."), done("Hi again."), done("The user said hello twice; the assistant greeted them."))
        # Two exchanges of about 10000 tokens each: the newest stays verbatim, the oldest is compacted.
        chat = Interactive(["chat", "--plain", "--base-url", server.base_url, *flags], workdir)
        for n in (2, 3):
            chat.send("hello " * 7000 + "\n")
            chat.read_until("\n> ", count=n, timeout=60)
        chat.send("/compact\n")
        chat.read_until("\n> ", count=4, timeout=60)  # the compaction's one-shot turn
        rc, out, err = chat.close()
        assert rc == 0, err
        assert "compaction is" not in out + err
    kinds = [e["type"] for e in _events(workdir)]
    assert "compact/summary" in kinds


def test_compact_says_why_it_is_off_for_an_unknown_window(workdir: Path) -> None:
    with SSEServer() as server:
        result = run_dsh(["chat", "--plain", "--base-url", server.base_url, "--model", "local-x"], workdir, stdin="/compact\n")
    assert result.returncode == 0, result.stderr
    assert (
        'compaction is off: the context window of model "local-x" is not known (pass --context-window TOKENS, '
        "or mount the compact plugin with contextWindow in a config)"
    ) in result.stdout + result.stderr


def test_max_steps_caps_a_turn(workdir: Path) -> None:
    with SSEServer() as server:
        server.push(*[calls(("echo", {"text": "again"}), start=n) for n in range(1, 5)], done())
        result = run_dsh(["run", "loop", "--base-url", server.base_url, "--model", "m", "--max-steps", "2"], workdir)
    assert result.returncode == 1
    end = [e for e in _events(workdir) if e["type"] == "turn/end"][-1]
    assert end["data"]["reason"]["kind"] == "error" and "exceeded 2 steps" in json.dumps(end["data"])


@pytest.mark.parametrize(("flag", "value"), [("--max-steps", "0"), ("--context-window", "-5")])
def test_bad_values_are_one_line(workdir: Path, flag: str, value: str) -> None:
    result = run_dsh(["run", "hi", flag, value], workdir)
    assert (result.returncode, result.stderr.strip()) == (2, f"dsh: {flag} must be a positive integer, got {value}")
