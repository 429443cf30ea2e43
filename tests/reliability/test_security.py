"""Security hygiene through the real command: private modes under umask 000, API keys that never
reach disk or output, and terminal control sequences from a model that ``dsh sessions`` escapes.

Complements ``tests/persistence/test_jsonl.py::test_modes_regardless_of_umask`` and
``test_sqlite.py::test_file_modes`` (the stores in-process) and
``tests/apps/test_cli.py::test_show_escapes_terminal_control_sequences`` (a user line echoed by
mock-echo): here ``dsh chat`` itself runs with umask 000 (while running and after exit, locks,
WAL files and ``sessions export`` included), a loopback provider rejects (and echoes) the key,
and a hostile model, model name and working folder feed every ``dsh sessions`` view.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.llm.sse_server import Reply, SSEServer
from tests.reliability.support import WELCOME, Chat, dsh_env, run_dsh, snapshot, write_composition

# -- modes -------------------------------------------------------------------------------------


def _modes(root: Path) -> dict[str, str]:
    """Every entry under (and including) ``root`` whose mode is not private, with its mode."""
    wrong = {}
    for top, dirs, files in os.walk(root):
        for name in [".", *dirs, *files]:
            path = Path(top, name)
            try:
                mode = stat.S_IMODE(path.lstat().st_mode)
            except FileNotFoundError:  # a lock or -shm file removed meanwhile
                continue
            want = 0o700 if path.is_dir() else 0o600
            if mode != want:
                wrong[str(path.relative_to(root.parent))] = oct(mode)
    return wrong


class UmaskChat(Chat):
    """``Chat`` whose process (and so everything it creates) runs with umask 000."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.out_path = cwd.parent / f"{cwd.name}.out"
        self.err_path = cwd.parent / f"{cwd.name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dsh", "chat", *args, "--plain"],
                cwd=cwd, env=dsh_env(), stdin=subprocess.PIPE, stdout=out, stderr=err, umask=0,
            )


def test_umask_zero_reaches_the_child(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-c", "open('probe', 'w').close()"], cwd=tmp_path, check=True, umask=0)
    assert stat.S_IMODE((tmp_path / "probe").stat().st_mode) == 0o666


@pytest.mark.slow
@pytest.mark.parametrize("store", ["jsonl", "sqlite"])
def test_sessions_are_private_regardless_of_umask(tmp_path: Path, store: str) -> None:
    cwd = tmp_path / "project"
    cwd.mkdir()
    config = write_composition(cwd, store=store, delay_ms=1)
    chat = UmaskChat(["--config", str(config)], cwd)
    try:
        chat.wait_for(WELCOME)
        chat.send("one")
        chat.wait_for("\n> ", 2)
        locks = list((cwd / ".sessions").rglob("*.lock"))
        assert locks, "the writer lock is held while the chat runs"
        if store == "sqlite":
            assert list((cwd / ".sessions").glob("*-wal")), "the WAL exists while the chat runs"
        assert _modes(cwd / ".sessions") == {}
        rc, _, err = chat.close()
        assert rc == 0, err
    finally:
        chat.kill()
    assert _modes(cwd / ".sessions") == {}
    session_id = snapshot(cwd, store).session_id
    assert session_id is not None
    store_args = ["--store", "sqlite", "--root", ".sessions"] if store == "sqlite" else ["--root", ".sessions"]
    exported = subprocess.run(
        [sys.executable, "-m", "dsh", "sessions", "export", session_id, "-o", "export.jsonl", *store_args],
        cwd=cwd, env=dsh_env(), capture_output=True, text=True, umask=0, timeout=60,
    )
    assert exported.returncode == 0, exported.stderr
    assert stat.S_IMODE((cwd / "export.jsonl").stat().st_mode) == 0o600


# -- API keys ----------------------------------------------------------------------------------

KEY = "sk-test-SECRET123"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "debug"),
    [("Unauthorized", False), (f"Incorrect API key provided: {KEY}", False), (f"Incorrect API key provided: {KEY}", True)],
    ids=["plain-401", "401-echoing-the-key", "401-echoing-the-key-debug"],
)
def test_api_key_never_reaches_disk_or_output(tmp_path: Path, body: str, debug: bool) -> None:
    cwd, home = tmp_path / "project", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    env = {"DEEPSEEK_API_KEY": KEY, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_DATA_HOME": str(home / ".local"), "XDG_CACHE_HOME": str(home / ".cache")}
    with SSEServer() as server:
        server.push(*[Reply.error(401, body) for _ in range(8)])
        args = ["--debug"] if debug else []
        args += ["chat", "--plain", "--base-url", f"{server.base_url}/v1", "--model", "m", "--root", ".sessions"]
        result = run_dsh(args, cwd, stdin="hello\nagain\n", **env)
        sent = [r.headers.get("authorization") for r in server.requests]
    assert sent and all(value == f"Bearer {KEY}" for value in sent), "the key was not even used"
    assert result.returncode == 1, result.stderr  # the run's last turn failed
    assert "turn 1 step 1 failed" in result.stderr
    [log] = list((cwd / ".sessions").rglob("*.jsonl"))
    outputs = {"stdout": result.stdout, "stderr": result.stderr}
    views = [["sessions", "show", log.stem, "--events", "--root", ".sessions"],
             ["sessions", "requests", log.stem, "--json", "--root", ".sessions"]]
    for view in views if not debug else []:
        shown = run_dsh(view, cwd, **env)
        assert shown.returncode == 0, shown.stderr
        outputs[" ".join(view[:2])] = shown.stdout + shown.stderr
    for name, text in outputs.items():
        assert KEY not in text, f"the key leaked into {name}"
        assert "SECRET123" not in text, f"part of the key leaked into {name}"
    files = [p for folder in (cwd, home) for p in folder.rglob("*") if p.is_file()]
    assert log in files
    for path in files:
        data = path.read_bytes()
        assert KEY.encode() not in data and b"SECRET123" not in data, f"the key leaked into {path}"
    assert b'"kind":"error"' in log.read_bytes()


# -- terminal control sequences ----------------------------------------------------------------

EVIL_MODEL = r'''
"""evil-model: streams terminal control sequences in every field a model controls."""
name = "evil-model"
inject = ["llm"]

NASTY = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x9b1;1H\r\x08\x1b]52;c;ZXZpbA==\x07\x1bP+q\x1b\\"


class Evil:
    async def stream(self, request):
        last = request.messages[-1] if request.messages else {}
        if any(b.get("type") == "tool-result" for b in last.get("content") or ()):
            yield {"type": "block-start", "index": 0, "blockType": "text"}
            yield {"type": "text-delta", "index": 0, "text": "after " + NASTY}
            yield {"type": "block-end", "index": 0, "block": {"type": "text", "text": "after " + NASTY}}
            yield {"type": "finish", "reason": {"kind": "stop"}}
            return
        yield {"type": "block-start", "index": 0, "blockType": "reasoning"}
        yield {"type": "reasoning-delta", "index": 0, "text": "think " + NASTY}
        yield {"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "think " + NASTY}}
        yield {"type": "block-start", "index": 1, "blockType": "text"}
        yield {"type": "text-delta", "index": 1, "text": "say " + NASTY}
        yield {"type": "block-end", "index": 1, "block": {"type": "text", "text": "say " + NASTY}}
        import json
        args = json.dumps({"text": NASTY})
        call = {"type": "tool-call", "id": "call-\x1b[1m", "name": "echo", "arguments": args}
        yield {"type": "block-start", "index": 2, "blockType": "tool-call"}
        yield {"type": "tool-call-delta", "index": 2, "id": call["id"], "name": "echo", "argumentsDelta": args}
        yield {"type": "block-end", "index": 2, "block": call}
        yield {"type": "usage", "usage": {"inputTokens": 1, "outputTokens": 1}}
        yield {"type": "finish", "reason": {"kind": "tool-calls"}}


def apply(ctx, config):
    ctx.defer(ctx.llm.register_adapter(["evil\x1b[5m\x9b2J"], Evil()))
'''

# C0 controls except tab and newline, DEL, and the C1 range (0x9b is a one-byte CSI).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.mark.slow
def test_sessions_views_escape_control_sequences_from_the_model(tmp_path: Path) -> None:
    cwd = tmp_path / "w\x1b]0;title\x07x\x1b[2J"
    cwd.mkdir()
    (cwd / "evil_model.py").write_text(EVIL_MODEL)
    (cwd / "dsh.yml").write_text(
        "- id: model\n  name: ./evil_model.py\n- id: echo\n  name: echo-tool\n"
        '- id: app\n  name: stdio-app\n  config:\n    model: "evil\\e[5m\\x9b2J"\n'
        "    persistenceRoot: ./.sessions\n"
    )
    result = run_dsh(["chat", "--config", "dsh.yml"], cwd, stdin="go\n")
    assert result.returncode == 0, result.stderr
    assert "\x1b]0;pwned" in result.stdout  # the live transcript is verbatim, as in the reference
    session_id = snapshot(cwd, "jsonl").session_id
    assert session_id is not None
    views = {
        "show": ["sessions", "show", session_id],
        "show --events": ["sessions", "show", session_id, "--events"],
        "requests": ["sessions", "requests", session_id],
        "list": ["sessions", "list"],
    }
    for name, view in views.items():
        shown = run_dsh([*view, "--root", ".sessions"], cwd)
        assert shown.returncode == 0, (name, shown.stderr)
        found = sorted(set(CONTROL.findall(shown.stdout + shown.stderr)))
        assert not found, f"dsh {name} printed raw control characters {found}"
    show = run_dsh([*views["show"], "--root", ".sessions"], cwd).stdout
    assert "say \\x1b]0;pwned\\x07" in show and "\\x9b1;1H" in show
    # JSON views are verbatim JSON: no raw C0 controls (JSON escapes them), nothing else changed.
    for view in (["sessions", "show", session_id, "--json"], ["sessions", "list", "--json"],
                 ["sessions", "requests", session_id, "--json"]):
        shown = run_dsh([*view, "--root", ".sessions"], cwd)
        assert shown.returncode == 0, shown.stderr
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", shown.stdout), view
