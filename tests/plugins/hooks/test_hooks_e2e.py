"""End to end: Claude Code hooks from a project's ``.claude/settings.json`` in the real
``dsh chat`` with a scripted model on loopback (default composition, bubblewrap sandbox)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.apps.conftest import run_dsh
from tests.llm.sse_server import SSEServer
from tests.tools.workspace.cli_support import calls, done
from tests.tools.workspace.ws_support import needs_bwrap

from .hook_support import chat, command_hook, env, events, project, trust

pytestmark = [pytest.mark.slow]

# Claude Code's documented rm guard: read the call from stdin, exit 2 with the reason on stderr.
GUARD = (
    "python3 -c 'import json,sys; c=json.load(sys.stdin)[\"tool_input\"].get(\"command\",\"\"); "
    "sys.exit(0) if \"rm -rf\" not in c else (print(\"rm -rf is not allowed here\", file=sys.stderr), sys.exit(2))'"
)
RM = ("bash", {"command": "rm -rf victim", "description": "remove it"})


def _victim(cwd: Path) -> Path:
    target = cwd / "victim"
    target.mkdir()
    (target / "keep.txt").write_text("precious\n")
    return target


@needs_bwrap
def test_pretooluse_hook_blocks_rm_rf_when_trusted(tmp_path: Path) -> None:
    cwd = project(tmp_path, {"PreToolUse": [command_hook(GUARD, "Bash")]})
    victim = _victim(cwd)
    environ = env(tmp_path)
    trust(cwd, environ)
    with SSEServer() as server:
        server.push(calls(RM))
        server.push(done("Could not remove it."))
        result = chat(cwd, server.base_url, environ)
        requests = [r.json for r in server.requests]
    assert result.returncode == 0, result.stderr
    assert victim.is_dir() and (victim / "keep.txt").exists()  # the command never ran
    tool_messages = [m for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_messages[0]["content"] == "Error: rm -rf is not allowed here"
    log = events(cwd, environ)
    invoked = [e["data"] for e in log if e["type"] == "hook/invoked"]
    results = [e["data"] for e in log if e["type"] == "hook/result"]
    assert [(i["point"], i["matcher"], i["command"]) for i in invoked] == [("PreToolUse", "Bash", GUARD)]
    assert results[0]["decision"] == "block" and results[0]["exitCode"] == 2
    assert results[0]["stderrSummary"] == "rm -rf is not allowed here"
    assert results[0]["handlerId"] == invoked[0]["handlerId"]
    show = run_dsh(["sessions", "show", _session(cwd, environ)], cwd, **environ)
    assert show.returncode == 0, show.stderr
    assert "hook       PreToolUse [Bash] python3 -c" in show.stdout
    assert "→ block (exit 2," in show.stdout and "rm -rf is not allowed here" in show.stdout


def _session(cwd: Path, environ: dict[str, str]) -> str:
    from tests.apps.conftest import session_files

    [log] = session_files(cwd, Path(environ["DSH_HOME"]) / "sessions")
    return log.stem


@needs_bwrap
def test_untrusted_hook_does_nothing_and_says_how_to_trust(tmp_path: Path) -> None:
    cwd = project(tmp_path, {"PreToolUse": [command_hook(GUARD, "Bash")]})
    victim = _victim(cwd)
    environ = env(tmp_path)
    with SSEServer() as server:
        server.push(calls(RM))
        server.push(done())
        result = chat(cwd, server.base_url, environ)
    assert result.returncode == 0, result.stderr
    assert not victim.exists()  # the hook was not in force
    lines = [line for line in result.stderr.splitlines() if "is not trusted" in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"dsh: {cwd.resolve()}/.claude/settings.json is not trusted (new); it would run: sh -c ")
    assert lines[0].endswith(f"review and trust it with: dsh trust (in {cwd.resolve()})")
    assert not [e for e in events(cwd, environ) if e["type"].startswith("hook/")]


@needs_bwrap
def test_posttooluse_formatter_changes_the_written_file(tmp_path: Path) -> None:
    upper = (
        "python3 -c 'import json,sys,pathlib; p=pathlib.Path(json.load(sys.stdin)[\"tool_input\"][\"file_path\"]); "
        "p.write_text(p.read_text().upper())'"
    )
    cwd = project(tmp_path, {"PostToolUse": [command_hook(upper, "Edit|Write")]})
    environ = env(tmp_path)
    trust(cwd, environ)
    with SSEServer() as server:
        server.push(calls(("write", {"file_path": "notes.txt", "content": "formatted by a hook\n"})))
        server.push(calls(("read", {"file_path": "notes.txt"}), start=2))
        server.push(done())
        result = chat(cwd, server.base_url, environ)
    assert result.returncode == 0, result.stderr
    assert (cwd / "notes.txt").read_text() == "FORMATTED BY A HOOK\n"
    points = [e["data"]["point"] for e in events(cwd, environ) if e["type"] == "hook/invoked"]
    assert points == ["PostToolUse"]  # the read did not match Edit|Write


def test_userpromptsubmit_context_reaches_the_next_request_once(tmp_path: Path) -> None:
    out = json.dumps({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "Codename: BLUEBIRD"}})
    cwd = project(tmp_path, {"UserPromptSubmit": [command_hook(f"echo '{out}'")]})
    environ = env(tmp_path)
    trust(cwd, environ)
    with SSEServer() as server:
        server.push(done("one"))
        result = chat(cwd, server.base_url, environ, "hello\n")
        requests = [r.json for r in server.requests]
    assert result.returncode == 0, result.stderr
    texts = [json.dumps(m["content"]) for m in requests[0]["messages"] if m["role"] == "user"]
    assert sum("Codename: BLUEBIRD" in t for t in texts) == 1
    hello = next(i for i, t in enumerate(texts) if "hello" in t)
    assert "Codename: BLUEBIRD" in texts[hello + 1]  # right after the prompt it was about
    contexts = [e["data"] for e in events(cwd, environ) if e["type"] == "context/message"]
    ours = [c for c in contexts if c["source"] == {"kind": "plugin", "plugin": "hooks-claude-code"}]
    assert [c["content"] for c in ours] == [[{"type": "text", "text": "Codename: BLUEBIRD"}]]


def test_userpromptsubmit_block_stops_the_prompt_with_its_reason(tmp_path: Path) -> None:
    cwd = project(tmp_path, {"UserPromptSubmit": [command_hook("echo 'no secrets in prompts' >&2; exit 2")]})
    environ = env(tmp_path)
    trust(cwd, environ)
    with SSEServer() as server:
        result = chat(cwd, server.base_url, environ, "my secret is 42\n")
        assert not server.requests  # the model never saw it
    assert "dsh: prompt blocked by a UserPromptSubmit hook: no secrets in prompts" in result.stderr
    log = events(cwd, environ)
    assert [e["data"]["reason"] for e in log if e["type"] == "prompt/blocked"] == ["no secrets in prompts"]
    assert [e["data"]["reason"] for e in log if e["type"] == "turn/end"] == [{"kind": "rejected", "reason": "no secrets in prompts"}]


def test_stop_hook_block_continues_the_turn_once(tmp_path: Path) -> None:
    stop = (
        "python3 -c 'import json,sys; a=json.load(sys.stdin)[\"stop_hook_active\"]; "
        "print(\"\" if a else json.dumps({\"decision\": \"block\", \"reason\": \"Run the tests first.\"}))'"
    )
    cwd = project(tmp_path, {"Stop": [command_hook(stop)]})
    environ = env(tmp_path)
    trust(cwd, environ)
    with SSEServer() as server:
        server.push(done("Finished."))
        server.push(done("Tests ran; finished."))
        result = chat(cwd, server.base_url, environ)
        requests = [r.json for r in server.requests]
    assert result.returncode == 0, result.stderr
    assert len(requests) == 2
    # The reason follows the first answer, as a context message of the hooks plugin.
    tail = json.dumps(requests[1]["messages"][-2:])
    assert "Run the tests first." in tail and "Finished." in json.dumps(requests[1]["messages"][-3])
    log = events(cwd, environ)
    assert [e["data"]["decision"] for e in log if e["type"] == "hook/result"] == ["block", "pass"]
    assert [e["data"]["reason"]["kind"] for e in log if e["type"] == "turn/end"] == ["completed"]


@needs_bwrap
def test_a_hanging_hook_is_killed_at_its_timeout_and_the_turn_completes(tmp_path: Path) -> None:
    # The hook's background child would write `late` after 3 s: killing the group stops it too.
    hang = "(sleep 3; touch late) & sleep 60"
    cwd = project(tmp_path, {"PreToolUse": [command_hook(hang, "Bash", timeout=1)]})
    environ = env(tmp_path)
    trust(cwd, environ)
    with SSEServer() as server:
        server.push(calls(("bash", {"command": "echo ran > ran.txt", "description": "run"})))
        server.push(done("Done."))
        result = chat(cwd, server.base_url, environ)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "timed out" in line]
    assert warnings == [f"dsh: hook PreToolUse '{hang}' ({cwd.resolve()}/.claude/settings.json) timed out after 1s and was killed"]
    assert "Traceback" not in result.stderr
    assert (cwd / "ran.txt").read_text() == "ran\n"  # a failing hook does not block the call
    [hook] = [e["data"] for e in events(cwd, environ) if e["type"] == "hook/result"]
    assert hook["timedOut"] is True and "exitCode" not in hook
    time.sleep(3.5)
    assert not (cwd / "late").exists()


def test_a_bad_settings_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    cwd = project(tmp_path, {})
    (cwd / ".claude" / "settings.json").write_text('{"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "x", "timeout": "soon"}]}]}}')
    environ = env(tmp_path)
    with SSEServer() as server:
        result = chat(cwd, server.base_url, environ)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f'dsh: plugin "hooks": hooks: {cwd.resolve()}/.claude/settings.json: Expected `float | null`, got `str` - at `$.hooks[...][0].hooks[0].timeout`'
    ]


def _gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_cancelling_the_turn_kills_the_hook_and_its_children(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    from tests.apps.conftest import dsh_env
    from tests.support.wait import wait_until_sync

    hang = "echo $$ > hook.pid; sleep 60 & echo $! > child.pid; wait"
    cwd = project(tmp_path, {"PreToolUse": [command_hook(hang, "Write")]})
    environ = env(tmp_path)
    trust(cwd, environ)
    with SSEServer() as server:
        server.push(calls(("write", {"file_path": "a.txt", "content": "x\n"})))
        server.push(done())
        proc = subprocess.Popen(
            [sys.executable, "-m", "dsh", "run", "write a", "--base-url", server.base_url, "--model", "test-model"],
            cwd=cwd, env=dsh_env(**environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            wait_until_sync(lambda: (cwd / "child.pid").exists() and (cwd / "child.pid").read_text().strip() != "", timeout=60)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, err
    hook_pid, child_pid = int((cwd / "hook.pid").read_text()), int((cwd / "child.pid").read_text())
    wait_until_sync(lambda: _gone(hook_pid) and _gone(child_pid), timeout=10)
    assert not (cwd / "a.txt").exists()
    assert "Traceback" not in err
    [result] = [e["data"] for e in events(cwd, environ) if e["type"] == "hook/result"]
    assert result["cancelled"] is True


def test_a_stop_hook_that_always_blocks_continues_at_most_three_times(tmp_path: Path) -> None:
    cwd = project(tmp_path, {"Stop": [command_hook("echo 'keep going' >&2; exit 2")]})
    environ = env(tmp_path)
    trust(cwd, environ)
    with SSEServer() as server:
        for n in range(5):
            server.push(done(f"answer {n}"))
        result = chat(cwd, server.base_url, environ)
        count = len(server.requests)
    assert result.returncode == 0, result.stderr
    assert count == 4  # the first answer and three continuations (maxStopBlocks)
    log = events(cwd, environ)
    assert [e["data"]["decision"] for e in log if e["type"] == "hook/result"] == ["block"] * 3
    notes = [e for e in log if e["type"] == "context/message" and e["data"]["source"].get("plugin") == "hooks-claude-code"]
    assert [n["data"]["content"][0]["text"] for n in notes] == ["keep going"] * 3
