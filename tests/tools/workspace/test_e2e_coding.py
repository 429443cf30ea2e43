"""End to end: a scripted model drives the real ``dsh chat`` (default composition) through a
small coding task in a temp git repo: glob, grep, read, run the failing tests, edit, run them
again and see them pass, write a file, start a background job and read it with job_output. The
session log, ``sessions show`` and ``sessions requests`` must reflect every step; a command
printing terminal escapes is escaped in ``sessions show``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.apps.conftest import run_dsh, session_files
from tests.llm.sse_server import Reply, SSEServer, chunk
from tests.support.wait import wait_until_sync
from ws_support import needs_bwrap

pytestmark = [pytest.mark.slow, needs_bwrap]

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}

CALC = "def add(a, b):\n    return a - b\n"
TESTS = (
    "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    'if __name__ == "__main__":\n    test_add()\n    print("1 passed")\n'
)


def _call(n: int, name: str, args: dict[str, Any]) -> Reply:
    return Reply.sse(
        [
            chunk(
                tool_calls=[
                    {"index": 0, "id": f"call_{n}", "type": "function",
                     "function": {"name": name, "arguments": json.dumps(args)}}
                ]
            ),
            chunk(finish="tool_calls"),
        ]
    )


def events_of(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]


def _repo(path: Path) -> Path:
    path.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    (path / "calc.py").write_text(CALC)
    (path / "test_calc.py").write_text(TESTS)
    (path / "AGENTS.md").write_text("Run the tests with: python3 test_calc.py\n")
    return path


def test_coding_task(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    steps: list[tuple[str, dict[str, Any]]] = [
        ("glob", {"pattern": "*.py"}),
        ("grep", {"pattern": "def add"}),
        ("read", {"file_path": "calc.py"}),
        ("bash", {"command": "python3 test_calc.py", "description": "Run the tests"}),
        ("edit", {"file_path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}),
        ("bash", {"command": "python3 test_calc.py", "description": "Run the tests again"}),
        ("write", {"file_path": "NOTES.md", "content": "Fixed add().\n"}),
        ("bash", {"command": "sleep 0.2; echo bg-done", "description": "Background job", "run_in_background": True}),
        ("job_output", {"job_id": "bash-1", "wait": True}),
        ("bash", {"command": "printf '\\033[31mred\\033[0m\\n'", "description": "Print escapes"}),
    ]
    with SSEServer() as server:
        for n, (name, args) in enumerate(steps, 1):
            server.push(_call(n, name, args))
        server.push(Reply.sse([chunk(content="All done."), chunk(finish="stop")]))
        result = run_dsh(
            ["chat", "--base-url", server.base_url, "--model", "test-model"],
            repo, stdin="fix add\n", timeout=120, **NO_PROXY,
        )
        requests = [r.json for r in server.requests]
    assert result.returncode == 0, result.stderr
    assert "All done." in result.stdout
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert (repo / "NOTES.md").read_text() == "Fixed add().\n"

    tool_names = {t["function"]["name"] for t in requests[0]["tools"]}
    assert {"bash", "job_output", "job_list", "job_kill", "read", "write", "edit", "glob", "grep", "todo_write"} <= tool_names
    first = json.dumps(requests[0]["messages"])
    assert "Instructions from: AGENTS.md" in first and "Approval policy: ask." in first

    [log] = session_files(repo)
    events = events_of(log)
    calls = [e["data"]["name"] for e in events if e["type"] == "tool/call"]
    assert calls == [name for name, _ in steps]
    results = [e["data"] for e in events if e["type"] == "tool/result"]
    texts = ["".join(b["text"] for b in r["content"]) for r in results]
    assert not any(r["isError"] for r in results), texts
    assert set(texts[0].splitlines()) == {"calc.py", "test_calc.py"}
    assert "calc.py:\n  1: def add(a, b):" in texts[1]
    assert "2:     return a - b" in texts[2]
    assert "AssertionError" in texts[3] and texts[3].endswith("[exit code: 1]\n")
    assert texts[4] == "Edited calc.py: replaced 1 occurrence"
    assert texts[5] == "1 passed\n"
    assert texts[6] == "Created NOTES.md (1 lines, 13 bytes)"
    assert texts[7] == "started background job bash-1\njob_id: bash-1"
    assert texts[8] == "bg-done\n[status: completed, exit code: 0]"
    assert texts[9] == "\x1b[31mred\x1b[0m\n"
    assert [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"] == ["completed"]

    # The last request carried every tool result back to the model.
    wire = [m for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in wire] == texts

    session_id = log.stem
    show = run_dsh(["sessions", "show", session_id], repo)
    assert show.returncode == 0, show.stderr
    out = show.stdout
    assert "bash  $ python3 test_calc.py" in out
    assert "[exit code: 1]" in out and "[exit code: 0]" in out
    assert "edit  calc.py" in out and "-return a - b" in out and "+return a + b" in out
    assert "write NOTES.md (1 lines)" in out
    assert "\x1b" not in out and "\\x1b[31mred" in out
    requests_view = run_dsh(["sessions", "requests", session_id], repo)
    assert requests_view.returncode == 0, requests_view.stderr
    assert "1 passed" in requests_view.stdout and "bash-1" in requests_view.stdout


@pytest.mark.parametrize("sandbox", ["workspace-write", "danger-full-access"])
def test_ctrl_c_during_long_bash_aborts_with_no_orphan(tmp_path: Path, sandbox: str) -> None:
    import os
    import signal
    import time

    import psutil
    from tests.apps.conftest import Interactive

    repo = _repo(tmp_path / "repo")
    marker = f"{os.getpid() % 1000}{time.monotonic_ns() % 100000}"
    command = f"sleep 310.{marker} & sleep 311.{marker}; echo never"

    def marked() -> list[int]:
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            if any(marker in part for part in proc.info["cmdline"] or ()):
                found.append(proc.pid)
        return found

    with SSEServer() as server:
        server.push(_call(1, "bash", {"command": command, "description": "Sleep a long time"}))
        server.push(Reply.sse([chunk(content="ok"), chunk(finish="stop")]))
        extra = ["--sandbox", sandbox]
        if sandbox == "danger-full-access":
            # Unconfined bash asks first; with no one to ask it would be refused, so this case
            # opts out through a config file entry (askUnconfinedBash: false).
            (tmp_path / "dsh.yaml").write_text(
                "- {id: llm, name: openai-llm, config: {models: [test-model], baseURL: '"
                + server.base_url + "', apiKey: none}}\n"
                "- {id: ws, name: workspace-tools, config: {askUnconfinedBash: false}}\n"
                "- {id: app, name: stdio-app, config: {model: test-model}}\n"
            )
            extra += ["--config", str(tmp_path / "dsh.yaml")]
        else:
            extra += ["--base-url", server.base_url, "--model", "test-model"]
        chat = Interactive(["chat", *extra], repo, **NO_PROXY)
        try:
            chat.send("sleep\n")
            # A loaded CI box can take this long to start dsh.
            wait_until_sync(lambda: len(marked()) >= 2 or chat.proc.poll() is not None, 120, check=False)
            if len(marked()) < 2:
                chat.proc.kill()
                raise AssertionError(f"the command never started: {chat.close()}")
            chat.proc.send_signal(signal.SIGINT)
            chat.read_until("\n> ", count=2)
            rc, _out, err = chat.close()
        finally:
            if chat.proc.poll() is None:
                chat.proc.kill()
    assert rc == 0, err
    wait_until_sync(lambda: not marked(), 5, check=False)
    assert marked() == []
    [log] = session_files(repo)
    events = events_of(log)
    [end] = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    assert end["kind"] == "aborted"
    [call] = [e for e in events if e["type"] == "tool/call"]
    [res] = [e for e in events if e["type"] == "tool/result"]
    assert res["data"]["callId"] == call["data"]["callId"] and res["data"]["isError"]


@pytest.mark.sigkill
@pytest.mark.parametrize("sandbox", ["workspace-write", "danger-full-access"])
def test_commands_die_with_a_killed_dsh(tmp_path: Path, sandbox: str) -> None:
    """SIGKILL to dsh mid-command: nothing it started lives on (bubblewrap's pid namespace, or
    the shell's parent-death signal when unconfined)."""
    import os
    import signal
    import time

    import psutil
    from tests.apps.conftest import Interactive

    repo = _repo(tmp_path / "repo")
    marker = f"{os.getpid() % 1000}{time.monotonic_ns() % 100000}"
    # Unconfined, only the shell itself carries the parent-death signal: one process.
    command = f"sleep 320.{marker}" if sandbox == "danger-full-access" else f"sleep 320.{marker} & sleep 321.{marker}"
    want = 1 if sandbox == "danger-full-access" else 2

    def marked() -> list[int]:
        return [
            p.pid
            for p in psutil.process_iter(["cmdline", "status"])
            if p.info["status"] != psutil.STATUS_ZOMBIE and any(marker in part for part in p.info["cmdline"] or ())
        ]

    with SSEServer() as server:
        server.push(_call(1, "bash", {"command": command, "description": "Sleep"}))
        config = tmp_path / "dsh.yaml"
        config.write_text(
            "- {id: llm, name: openai-llm, config: {models: [test-model], baseURL: '"
            + server.base_url + "', apiKey: none}}\n"
            f"- {{id: ws, name: workspace-tools, config: {{sandbox: {sandbox}, askUnconfinedBash: false}}}}\n"
            "- {id: app, name: stdio-app, config: {model: test-model}}\n"
        )
        chat = Interactive(["chat", "--config", str(config)], repo, **NO_PROXY)
        try:
            chat.send("sleep\n")
            # A loaded CI box can take this long to start dsh.
            wait_until_sync(lambda: len(marked()) >= want or chat.proc.poll() is not None, 120, check=False)
            if len(marked()) < want:
                chat.proc.kill()
                raise AssertionError(f"the command never started: {chat.close()}")
            chat.proc.send_signal(signal.SIGKILL)
            chat.proc.wait(timeout=10)
        finally:
            if chat.proc.poll() is None:
                chat.proc.kill()
    wait_until_sync(lambda: not marked(), 5, check=False)
    assert marked() == []
