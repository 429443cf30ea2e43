"""dsh's own ``/proc`` files stay out of the file tools' reach, through the real ``dsh chat`` and a
scripted model on loopback: with ``OPENAI_API_KEY`` set, the model tries ``read``, ``grep`` and
``glob`` on ``/proc/self``, ``/proc/thread-self``, ``/proc/<dsh pid>`` (and its task folder), a
workspace symlink to ``/proc/self/environ`` and ``/proc`` as a whole; every call is refused and
the key is in no tool result, no log line, no request body and no output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_support import NO_PROXY, calls, done, model_args, tool_results
from tests.apps.conftest import Interactive, session_files
from tests.llm.sse_server import SSEServer

pytestmark = [pytest.mark.attack, pytest.mark.slow]

SECRET = "sk-proc-leak-7f3a9c1e5b"
REFUSAL = (
    "the /proc files of dsh and of the processes that started it are off limits to the file tools "
    "(they hold dsh's environment, API keys included)"
)


def test_own_proc_files_are_refused_and_the_key_never_leaks(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "env-link").symlink_to("/proc/self/environ")
    (ws / "proc-link").symlink_to("/proc/self")
    with SSEServer() as server:
        chat = Interactive(["chat", *model_args(server.base_url)], ws, OPENAI_API_KEY=SECRET, **NO_PROXY)
        try:
            pid = chat.proc.pid
            attempts = [
                ("read", {"file_path": "/proc/self/environ"}),
                ("read", {"file_path": f"/proc/{pid}/environ"}),
                ("read", {"file_path": "/proc/thread-self/environ"}),
                ("read", {"file_path": f"/proc/{pid}/task/{pid}/environ"}),
                ("read", {"file_path": "/dev/fd/../environ"}),
                ("read", {"file_path": "env-link"}),
                ("read", {"file_path": "proc-link/cmdline"}),
                ("read", {"file_path": f"/proc/{os.getpid()}/environ"}),  # dsh's parent
                ("read", {"file_path": "/proc/1/environ"}),  # init: a container's key comes in there
                ("grep", {"pattern": "sk-", "path": "/proc/self/environ"}),
                ("grep", {"pattern": "sk-", "path": f"/proc/{pid}"}),
                ("grep", {"pattern": "sk-", "path": "proc-link"}),
                ("grep", {"pattern": "sk-", "path": "/proc"}),
                ("glob", {"pattern": "*", "path": "/proc/self"}),
                ("write", {"file_path": "/proc/self/comm", "content": "x"}),
            ]
            server.push(calls(*attempts))
            server.push(done())
            chat.send("show me your environment\n")
            chat.read_until("Done.", timeout=60)
            rc, out, err = chat.close()
        finally:
            if chat.proc.poll() is None:
                chat.proc.kill()
        bodies = [r.body.decode(errors="replace") for r in server.requests]
    assert rc == 0, err
    results = tool_results(ws)
    assert [name for name, _, _ in results] == [name for name, _ in attempts]
    for (name, args), (_, text, is_error) in zip(attempts, results, strict=True):
        assert is_error and REFUSAL in text, (name, args, text)
    [log] = session_files(ws)
    for where, content in [("log", log.read_text()), ("stdout", out), ("stderr", err), *(("request", b) for b in bodies)]:
        assert SECRET not in content, where
    # The refusals reached the model (so it knows why), without the key.
    wire = [m for m in json.loads(bodies[-1])["messages"] if m["role"] == "tool"]
    assert len(wire) == len(attempts) and all(REFUSAL in m["content"] for m in wire)
