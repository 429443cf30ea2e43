"""End to end: a scripted model on loopback drives the real ``dsh chat`` in a temp git repo.

Turn 1 ``write``s ``a.txt`` and ``edit``s ``calc.py``; turn 2 runs one ``bash`` call doing
``sed -i``, ``rm``, ``mv``, a new binary file, ``chmod +x``, a symlink, and a write into an
ignored folder. ``dsh sessions diff`` shows every change; ``dsh sessions rewind`` restores the
tree byte for byte and mode for mode to before turn 2, then to before turn 1; the user's
``.git`` is identical throughout and the ignored folder is left alone. A file the user edits
after the agent is refused without ``--force``, and ``--conversation`` forks the log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apps.conftest import run_dsh, session_files
from tests.llm.sse_server import SSEServer
from tests.rewind.support import (
    NO_PROXY,
    call,
    events_of,
    git_state,
    make_repo,
    session_id_of,
    text,
    tree_state,
)

pytestmark = [pytest.mark.slow]

BASH = (
    "sed -i 's/colour/color/' notes.txt && rm b.txt && mv c.txt d.txt && "
    "printf '\\000\\001\\377binary' > blob.bin && chmod +x tool.sh && ln -s calc.py link.py && "
    "echo changed > build/out.o"
)
MODEL = ["--model", "test-model"]


def _two_turns(repo: Path, sandbox: str = "workspace-write") -> tuple[str, dict, dict]:
    before = tree_state(repo)
    with SSEServer() as server:
        server.push(
            call(1, "read", {"file_path": "calc.py"}),
            call(2, "write", {"file_path": "a.txt", "content": "new file\n"}),
            call(3, "edit", {"file_path": "calc.py", "old_string": "a - b", "new_string": "a + b"}),
            text("turn one done"),
        )
        args = ["chat", "--base-url", server.base_url, "--model", "test-model", "--sandbox", sandbox]
        first = run_dsh(args, repo, stdin="turn one\n", timeout=120, **NO_PROXY)
        assert first.returncode == 0, first.stderr
        after_one = tree_state(repo)
        server.push(call(4, "bash", {"command": BASH, "description": "many changes"}), text("turn two done"))
        second = run_dsh([*args, "--continue"], repo, stdin="turn two\n", timeout=120, **NO_PROXY)
        assert second.returncode == 0, second.stderr
    [log] = session_files(repo)
    return session_id_of(log), before, after_one


def test_diff_and_rewind_restore_every_kind_of_change(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git_before = git_state(repo)
    sid, before, after_one = _two_turns(repo)
    assert (repo / "d.txt").exists() and (repo / "link.py").is_symlink()
    [log] = session_files(repo)
    snaps = [e for e in events_of(log) if e["type"] == "workspace/snapshot"]
    assert [(s["data"]["turn"], s["data"]["at"]) for s in snaps] == [
        (1, "before-step"), (1, "before-step"), (1, "turn-end"), (2, "before-step"), (2, "turn-end"),
    ]

    diff = run_dsh(["sessions", "diff", sid, "--turn", "2"], repo)
    assert diff.returncode == 0, diff.stderr
    out = diff.stdout
    assert "-colour one" in out and "+color one" in out  # sed -i
    assert "deleted file mode 100644" in out and "b/b.txt" in out  # rm
    assert "rename from c.txt" in out and "rename to d.txt" in out  # mv
    assert "blob.bin" in out and "Binary files" in out  # a new binary file
    assert "old mode 100644" in out and "new mode 100755" in out  # chmod +x
    assert "new file mode 120000" in out and "+calc.py" in out  # the symlink
    assert "build/" not in out and "a.txt" not in out  # ignored; turn 1's
    turn1 = run_dsh(["sessions", "diff", sid, "--turn", "1"], repo).stdout
    assert "+new file" in turn1 and "+    return a + b" in turn1 and "notes.txt" not in turn1

    back = run_dsh(["sessions", "rewind", sid, "--to-turn", "2"], repo)
    assert back.returncode == 0, back.stderr
    assert "restored 7 files to before turn 2" in back.stdout
    assert tree_state(repo) == after_one
    assert (repo / "build" / "out.o").read_text() == "changed\n"  # ignored: untouched

    back = run_dsh(["sessions", "rewind", sid, "--to-turn", "1"], repo)
    assert back.returncode == 0, back.stderr
    assert tree_state(repo) == before
    assert git_state(repo) == git_before
    rewinds = [e for e in events_of(log) if e["type"] == "workspace/rewind"]
    assert [r["data"]["toTurn"] for r in rewinds] == [2, 1]
    line = next(raw for raw in log.read_text().splitlines() if '"workspace/rewind"' in raw)
    assert ": " not in line and isinstance(json.loads(line)["time"], int)  # compact, integer ms


def test_a_file_the_user_changed_is_refused_without_force(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    sid, _before, after_one = _two_turns(repo)
    (repo / "notes.txt").write_text("the user's own words\n")
    refused = run_dsh(["sessions", "rewind", sid, "--to-turn", "2"], repo)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "dsh: not restoring: changed after the agent: notes.txt (rerun with --force to overwrite)"
    )
    assert (repo / "notes.txt").read_text() == "the user's own words\n" and not (repo / "b.txt").exists()
    forced = run_dsh(["sessions", "rewind", sid, "--to-turn", "2", "--force"], repo)
    assert forced.returncode == 0, forced.stderr
    assert tree_state(repo) == after_one


def test_conversation_rewind_forks_and_keeps_the_original(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    sid, _before, _after_one = _two_turns(repo)
    [log] = session_files(repo)
    original = log.read_bytes()
    forked = run_dsh(["sessions", "rewind", sid, "--to-turn", "2", "--conversation"], repo)
    assert forked.returncode == 0, forked.stderr
    new_id = forked.stdout.split()[2].rstrip(":")
    assert log.read_bytes() == original
    assert (repo / "d.txt").exists()  # the files are not touched by --conversation
    shown = run_dsh(["sessions", "show", new_id], repo)
    assert shown.returncode == 0 and "turn one" in shown.stdout and "turn two" not in shown.stdout
    with SSEServer() as server:
        server.push(text("resumed at turn two"))
        resumed = run_dsh(
            ["chat", "--base-url", server.base_url, *MODEL, "--resume", new_id], repo,
            stdin="again\n", timeout=60, **NO_PROXY,
        )
    assert resumed.returncode == 0, resumed.stderr
    new_log = next(p for p in session_files(repo) if session_id_of(p) == new_id)
    starts = [e["data"]["turn"] for e in events_of(new_log) if e["type"] == "turn/start"]
    assert starts == [1, 2]
    assert run_dsh(["sessions", "show", sid], repo).returncode == 0
    assert log.read_bytes() == original
