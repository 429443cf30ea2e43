"""turn-outcome: after a failed or cancelled turn the next request says what happened, once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsh.plugins import turn_outcome
from dsh.session import Event
from tests.apps.conftest import run_dsh, session_files
from tests.llm.sse_server import Reply, SSEServer, chunk


def _user_texts(request: dict) -> list[str]:
    # Without other plugins' context: time readings and the workspace's approval-policy notice
    # (a <system-reminder> on the first step in each process).
    return [m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
            for m in request["messages"] if m["role"] == "user" and "Time sampled" not in str(m["content"])
            and not str(m["content"]).startswith("<system-reminder>")]


@pytest.mark.slow
def test_a_failed_turn_is_explained_once_at_the_start_of_the_next(workdir: Path) -> None:
    with SSEServer() as server:
        server.push(
            Reply.error(401, "bad key"),
            Reply.sse([chunk(content="second answer"), chunk(finish="stop")]),
            Reply.sse([chunk(content="third answer"), chunk(finish="stop")]),
        )
        done = run_dsh(["chat", "--plain", "--base-url", server.base_url, "--model", "m"], workdir,
                       stdin="first\n", OPENAI_API_KEY="k")
        assert done.returncode == 1
        done = run_dsh(["chat", "--plain", "--continue", "--base-url", server.base_url, "--model", "m"], workdir,
                       stdin="second\n", OPENAI_API_KEY="k")
        assert done.returncode == 0, done.stderr
        done = run_dsh(["chat", "--plain", "--continue", "--base-url", server.base_url, "--model", "m"], workdir,
                       stdin="third\n", OPENAI_API_KEY="k")
        assert done.returncode == 0, done.stderr
        second, third = server.requests[1].json, server.requests[2].json
    users = _user_texts(second)
    assert users[0] == "first"
    note = users[1]
    assert note.startswith('<context source="plugin">The previous turn (turn 1) failed at step 1 with error ')
    assert "error AUTH: " in note and "HTTP 401" in note and note.endswith("</context>")
    assert users[2] == "second"
    # Durable and said once: the third request carries the same note, and no second one.
    assert sum("The previous turn" in u for u in _user_texts(third)) == 1
    [log] = session_files(workdir)
    events = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    kinds = [e["type"] for e in events]
    start2 = [i for i, e in enumerate(events) if e["type"] == "turn/start"][1]
    assert kinds[start2 + 1: start2 + 3] == ["context/message", "user/message"]
    assert events[start2 + 1]["data"]["source"] == {"kind": "plugin", "plugin": "turn-outcome"}


@pytest.mark.slow
def test_a_good_run_gets_no_note(workdir: Path) -> None:
    done = run_dsh(["chat", "--plain"], workdir, stdin="one\ntwo\n")
    assert done.returncode == 0
    [log] = session_files(workdir)
    assert "turn-outcome" not in log.read_text()


def _end(reason: dict) -> Event:
    return Event("turn/end", 9, 0, {"turn": 4, "reason": reason})


def test_the_note_names_what_happened() -> None:
    assert turn_outcome.describe(_end({"kind": "aborted", "reason": "interrupted by the user"})) == (
        "The previous turn (turn 4) was cancelled by the user (interrupted by the user) before it finished;"
        " its reply above, if any, is incomplete."
    )
    text = turn_outcome.describe(_end({"kind": "error", "step": 2, "code": "TIMEOUT", "message": "x" * 999}))
    assert text.startswith("The previous turn (turn 4) failed at step 2 with error TIMEOUT: xxx")
    assert "x" * 301 not in text and text.endswith("…; its reply above, if any, is incomplete.")
    assert "crash" in turn_outcome.describe(_end({"kind": "interrupted"}))
