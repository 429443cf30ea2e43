"""The workspace is the folder the person chose, never the one a log names: ``dsh sessions
import`` of a log recorded in ``/`` or in another folder, then ``dsh run --resume``, through the
real CLI; ``--cd`` accepts a recorded folder; ``/``, the home folder and system folders are never
a workspace (new sessions, ACP, the reminder worker)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from acp.exceptions import RequestError

from tests.apps.acp.acp_support import dsh_acp, initialize
from tests.apps.conftest import run_dsh, session_files

pytestmark = [pytest.mark.attack, pytest.mark.slow]


def _imported(tmp_path: Path, cwd: str, name: str) -> str:
    """A real session's log with its header's ``cwd`` and id rewritten, imported; its id."""
    scratch = tmp_path / f"scratch-{name}"
    scratch.mkdir()
    made = run_dsh(["run", "hi"], scratch)
    assert made.returncode == 0, made.stderr
    [log] = session_files(scratch)
    lines = log.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["id"] = session_id = f"imported-{name}"
    header["cwd"] = cwd
    path = tmp_path / f"{name}.jsonl"
    path.write_text(json.dumps(header) + "\n" + "".join(lines[1:]))
    done = run_dsh(["sessions", "import", str(path)], tmp_path)
    assert done.returncode == 0, done.stderr
    return session_id


def _one_line(result: object) -> str:
    stderr = getattr(result, "stderr", "")
    [line] = stderr.strip().splitlines()
    assert "Traceback" not in stderr
    return line


def _stored(session_id: str) -> bytes:
    [path] = [p for p in Path(os.environ["DSH_HOME"]).rglob("*.jsonl") if p.stem == session_id]
    return path.read_bytes()


def test_an_imported_session_recorded_in_the_root_folder_is_not_resumed(tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    sid = _imported(tmp_path, "/", "root")
    before = _stored(sid)
    for extra in ([], ["--cd", "/"]):
        result = run_dsh(["run", "--resume", sid, *extra, "write anywhere"], workdir)
        assert result.returncode == 2, result.stderr
        assert _one_line(result) == (
            f'dsh: session "{sid}" was recorded in /, which cannot be a workspace (the root folder); it is not resumed'
        )
        assert result.stdout == ""
    assert _stored(sid) == before  # nothing appended, not even crash repair


def test_a_session_recorded_in_another_folder_is_refused_until_that_folder_is_chosen(tmp_path: Path) -> None:
    workdir, other = tmp_path / "project", tmp_path / "other"
    workdir.mkdir()
    other.mkdir()
    sid = _imported(tmp_path, str(other), "other")
    result = run_dsh(["run", "--resume", sid, "hi"], workdir)
    assert result.returncode == 2, result.stderr
    assert _one_line(result) == (
        f'dsh: session "{sid}" was recorded in {other}, not in {workdir} (the chosen workspace); '
        f"pass --cd {other} to work there"
    )
    # Accepted by naming the folder with --cd, or by starting dsh there.
    accepted = run_dsh(["run", "--resume", sid, "--cd", str(other), "--output-format", "json", "hi"], workdir)
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["sessionId"] == sid
    there = run_dsh(["run", "--resume", sid, "hi"], other)
    assert there.returncode == 0, there.stderr
    chat = run_dsh(["chat", "--resume", sid], workdir)
    assert chat.returncode == 2 and f"pass --cd {other}" in _one_line(chat)


def test_a_session_recorded_in_the_chosen_folder_resumes(tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    sid = _imported(tmp_path, str(workdir), "same")
    result = run_dsh(["run", "--resume", sid, "hi"], workdir)
    assert result.returncode == 0, result.stderr


def test_root_home_and_system_folders_are_never_a_new_workspace(tmp_path: Path) -> None:
    home = Path(os.environ["HOME"])
    for folder, why in (("/", "the root folder"), (str(home), "your home folder itself"), ("/etc", "a system folder")):
        result = run_dsh(["run", "hi"], Path(folder))
        assert result.returncode == 2, (folder, result.stderr)
        assert _one_line(result) == (
            f"dsh: {folder} cannot be a workspace ({why}); start dsh in a project folder, or name one with --cd DIR"
        )
    via_flag = run_dsh(["chat", "--cd", "/usr/lib"], tmp_path)
    assert via_flag.returncode == 2 and "/usr/lib cannot be a workspace (a system folder)" in _one_line(via_flag)
    missing = run_dsh(["run", "--cd", str(tmp_path / "nope"), "hi"], tmp_path)
    assert missing.returncode == 2 and _one_line(missing) == f"dsh: --cd {tmp_path / 'nope'}: No such file or directory"
    (tmp_path / "project").mkdir()
    made = run_dsh(["run", "--cd", "project", "--output-format", "json", "hi"], tmp_path)
    assert made.returncode == 0, made.stderr
    [log] = session_files(tmp_path / "project")
    assert json.loads(log.read_text().splitlines()[0])["cwd"] == str(tmp_path / "project")


def test_acp_refuses_a_root_cwd_and_a_session_recorded_elsewhere(tmp_path: Path) -> None:
    workdir, other = tmp_path / "project", tmp_path / "other"
    workdir.mkdir()
    other.mkdir()
    sid = _imported(tmp_path, str(other), "acp")

    async def main() -> None:
        async with dsh_acp(workdir) as (conn, _proc, _rec, _log):
            await initialize(conn)
            with pytest.raises(RequestError) as root:
                await conn.new_session(cwd="/", mcp_servers=[])
            assert 'cwd "/" cannot be a workspace (the root folder)' in str(root.value.data or root.value)
            with pytest.raises(RequestError) as elsewhere:
                await conn.load_session(cwd=str(workdir), session_id=sid, mcp_servers=[])
            shown = str(elsewhere.value.data or elsewhere.value)
            assert f"recorded in {other}, not in {workdir}" in shown and f"open it with cwd {other}" in shown
            await asyncio.wait_for(conn.load_session(cwd=str(other), session_id=sid, mcp_servers=[]), 60)

    asyncio.run(main())


def test_the_reminder_worker_skips_a_session_recorded_in_the_root_folder(tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    sid = _imported(tmp_path, "/", "reminder")
    [path] = [p for p in Path(os.environ["DSH_HOME"]).rglob("*.jsonl") if p.stem == sid]
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    due = {"type": "schedule/change", "seq": last["seq"] + 1, "time": last["time"] + 1,
           "data": {"version": 1, "operation": "create",
                    "schedule": {"id": "schedule-1", "kind": "at", "prompt": "touch /pwned", "scheduledAt": "2020-01-01T00:00:00.000Z"}}}
    path.write_text("\n".join(lines) + "\n" + json.dumps(due, separators=(",", ":")) + "\n")
    listed = run_dsh(["reminders", "list", "--json"], workdir)
    assert listed.returncode == 0 and "schedule-1" in listed.stdout, listed.stderr
    result = run_dsh(["reminders", "run", "--once"], workdir)
    assert result.returncode == 1, result.stderr
    assert _one_line(result) == (
        f"dsh: session {sid}: its recorded folder / cannot be a workspace (the root folder); its reminder is not delivered"
    )
    assert "delivered" not in result.stdout
