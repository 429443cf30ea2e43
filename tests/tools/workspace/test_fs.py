"""read / write / edit: the reference's envelope and messages, read-before-write, the in-process
sandbox (``..`` and symlinks resolved first) and hostile arguments."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


async def test_read_envelope_and_footers(make_ws: Any) -> None:
    ws = await make_ws()
    (ws.root / "a.txt").write_text("one\ntwo\nthree\n")
    assert await ws.text("read", {"file_path": "a.txt"}) == (
        "<path>a.txt</path>\n<type>file</type>\n<content>\n1: one\n2: two\n3: three\n\n"
        "(End of file - total 3 lines)\n</content>"
    )
    out = await ws.text("read", {"file_path": "a.txt", "offset": 2, "limit": 1})
    assert "2: two\n\n(Showing lines 2-2 of 3. Use offset=3 to continue.)" in out
    result = await ws.run("read", {"file_path": "a.txt", "offset": 9})
    assert result.is_error
    assert result.content[0]["text"] == 'Error: offset 9 is out of range for "a.txt" (3 lines)'


async def test_read_long_lines_and_output_cap(make_ws: Any) -> None:
    ws = await make_ws()
    (ws.root / "long.txt").write_text("x" * 3000 + "\n" + ("y" * 1000 + "\n") * 100)
    out = await ws.text("read", {"file_path": "long.txt"})
    assert "... (line truncated to 2000 chars)" in out
    assert "(Output capped. Showing lines 1-" in out and "Use offset=" in out


async def test_binary_and_huge_files_are_refused(make_ws: Any) -> None:
    ws = await make_ws(maxReadBytes=1000)
    (ws.root / "bin").write_bytes(b"\x7fELF\x00\x01\x02")
    (ws.root / "latin1").write_bytes("caf\xe9\n".encode("latin-1"))
    (ws.root / "big.txt").write_text("z" * 5000)
    for name in ("bin", "latin1"):
        result = await ws.run("read", {"file_path": name})
        assert result.is_error and "binary file (not UTF-8 text)" in result.content[0]["text"]
    result = await ws.run("read", {"file_path": "big.txt"})
    assert result.is_error and "file is too large (5000 bytes" in result.content[0]["text"]
    assert "grep" in result.content[0]["text"]


async def test_write_creates_then_needs_a_read_to_overwrite(make_ws: Any) -> None:
    ws = await make_ws()
    assert await ws.text("write", {"file_path": "new/b.txt", "content": "hi\n"}) == "Created new/b.txt (1 lines, 3 bytes)"
    assert (ws.root / "new/b.txt").read_text() == "hi\n"
    (ws.root / "c.txt").write_text("old\n")
    result = await ws.run("write", {"file_path": "c.txt", "content": "new\n"})
    assert result.is_error
    assert result.content[0]["text"] == 'Error: write requires reading "c.txt" first — read the file, then retry'
    assert (ws.root / "c.txt").read_text() == "old\n"
    await ws.run("read", {"file_path": "c.txt"})
    assert (await ws.text("write", {"file_path": "c.txt", "content": "new\n"})).startswith("Overwrote c.txt")


async def test_edit_rules(make_ws: Any) -> None:
    ws = await make_ws()
    path = ws.root / "m.py"
    path.write_text("a = 1\nb = 1\n")
    first = await ws.run("edit", {"file_path": "m.py", "old_string": "a = 1", "new_string": "a = 2"})
    assert first.content[0]["text"] == 'Error: edit requires reading "m.py" first — read the file, then retry'
    await ws.run("read", {"file_path": "m.py"})
    # Changed on disk since the read: refused, the model must re-read.
    path.write_text("a = 1\nb = 1\nc = 1\n")
    os.utime(path, ns=(1, 1))
    stale = await ws.text("edit", {"file_path": "m.py", "old_string": "a = 1", "new_string": "a = 2"})
    assert stale.endswith("— re-read the file, then retry")
    await ws.run("read", {"file_path": "m.py"})
    cases = {
        ("", "x"): "Error: old_string must be a non-empty string",
        ("a = 1", "a = 1"): "Error: old_string and new_string must differ",
    }
    for (old, new), message in cases.items():
        assert await ws.text("edit", {"file_path": "m.py", "old_string": old, "new_string": new}) == message
    missing = await ws.text("edit", {"file_path": "m.py", "old_string": "zzz", "new_string": "y"})
    assert "not found" in missing and "retry" in missing
    many = await ws.text("edit", {"file_path": "m.py", "old_string": "= 1", "new_string": "= 3"})
    assert "appears 3 times" in many and "replace_all" in many
    assert await ws.text("edit", {"file_path": "m.py", "old_string": "= 1", "new_string": "= 3", "replace_all": True}) == (
        "Edited m.py: replaced 3 occurrences"
    )
    assert path.read_text() == "a = 3\nb = 3\nc = 3\n"
    # Our own edit counts as a fresh read: a follow-up edit needs no re-read.
    assert (await ws.text("edit", {"file_path": "m.py", "old_string": "a = 3", "new_string": "a = 4"})).startswith("Edited")
    gone = await ws.text("edit", {"file_path": "nope.py", "old_string": "a", "new_string": "b"})
    assert gone == 'Error: cannot edit "nope.py": not found'


@pytest.mark.parametrize("target", ["../outside.txt", "link/outside.txt", "{abs}"])
async def test_workspace_write_refuses_outside_paths(make_ws: Any, tmp_path: Path, target: str) -> None:
    ws = await make_ws()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (ws.root / "link").symlink_to(outside)
    path = target.format(abs=str(outside / "outside.txt"))
    expected = tmp_path / "outside.txt" if target == "../outside.txt" else outside / "outside.txt"
    result = await ws.run("write", {"file_path": path, "content": "x"})
    assert result.is_error
    assert "[sandbox: file access denied under workspace-write mode]" in result.content[0]["text"]
    assert not expected.exists()


async def test_symlinked_file_inside_pointing_out_is_refused_for_edit(make_ws: Any, tmp_path: Path) -> None:
    ws = await make_ws()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    (ws.root / "inner.txt").symlink_to(victim)
    await ws.run("read", {"file_path": "inner.txt"})
    result = await ws.run("edit", {"file_path": "inner.txt", "old_string": "keep", "new_string": "lost"})
    assert result.is_error and "file access denied" in result.content[0]["text"]
    assert victim.read_text() == "keep\n"


async def test_read_only_refuses_every_write(make_ws: Any) -> None:
    ws = await make_ws(sandbox="read-only")
    (ws.root / "x.txt").write_text("1\n")
    await ws.run("read", {"file_path": "x.txt"})
    for name, args in (
        ("write", {"file_path": "y.txt", "content": "n"}),
        ("edit", {"file_path": "x.txt", "old_string": "1", "new_string": "2"}),
    ):
        result = await ws.run(name, args)
        assert result.is_error
        assert "[sandbox: file access denied under read-only mode]" in result.content[0]["text"]
    assert not (ws.root / "y.txt").exists() and (ws.root / "x.txt").read_text() == "1\n"


async def test_danger_full_access_write_outside_asks_and_fails_closed(make_ws: Any, tmp_path: Path) -> None:
    ws = await make_ws(sandbox="danger-full-access")
    target = tmp_path / "out.txt"
    result = await ws.run("write", {"file_path": str(target), "content": "x"})
    assert result.is_error and "approval unavailable" in result.content[0]["text"]
    assert not target.exists()
    ws.ctx.approval.set_asker(lambda request: "allowed-once")
    assert (await ws.text("write", {"file_path": str(target), "content": "x"})).startswith("Created")
    inside = await ws.text("write", {"file_path": "in.txt", "content": "y"})
    assert inside.startswith("Created")  # inside the workspace: no question


async def test_hostile_arguments(make_ws: Any) -> None:
    ws = await make_ws()
    # Type and shape errors are the registry's schema check (before the tool runs); the rest are
    # the tools' own checks of values a schema cannot express.
    checks: list[tuple[str, Any, str]] = [
        ("read", "not json", "not valid JSON"),
        ("read", {"file_path": 7}, "$.file_path: expected string, got integer"),
        ("read", {"file_path": "a\x00b"}, "invalid file_path: contains a NUL byte"),
        ("read", {"file_path": "x", "offset": "1"}, "$.offset: expected number, got string"),
        ("write", {"file_path": "x"}, '$: missing required property "content"'),
        ("edit", {"file_path": "x", "old_string": 1, "new_string": "y"}, "$.old_string: expected string"),
        ("write", {"file_path": "s.txt", "content": "\ud800"}, "lone surrogate"),
        ("bash", {"command": 42, "description": "x"}, "$.command: expected string, got integer"),
        ("bash", {"command": "  ", "description": "x"}, "invalid command: expected a non-empty string"),
        ("bash", {"command": "true", "description": "x", "timeoutMs": "5"}, "$.timeoutMs: expected number"),
        ("bash", {"command": "true", "description": "x", "run_in_background": "yes"}, "$.run_in_background: expected boolean"),
        ("bash", {"command": "true", "description": "x", "workdir": "no/such/dir"}, "is not a directory"),
        ("glob", {"pattern": ["*"]}, "$.pattern: expected string"),
        ("grep", {"pattern": "x", "path": "a\x00b"}, "contains a NUL byte"),
        ("job_output", {"job_id": None}, "$.job_id: expected string, got null"),
        ("job_kill", {"job_id": "bash-99"}, 'unknown job "bash-99"'),
        ("todo_write", {"todos": [{"content": "x", "status": "done"}]}, "$.todos[0].status: 'done' is not one of"),
        ("todo_write", {"todos": "all of them"}, "$.todos: expected array"),
    ]
    for name, args, message in checks:
        result = await ws.run(name, args)
        assert result.is_error, (name, args)
        assert message in result.content[0]["text"], result.content


async def test_ten_megabyte_content_is_refused_clearly(make_ws: Any) -> None:
    ws = await make_ws()
    result = await ws.run("write", {"file_path": "big.txt", "content": "a" * (10 * 1024 * 1024)})
    assert result.is_error
    assert "content is too large (10485760 bytes; the limit is 5242880)" in result.content[0]["text"]
    assert not (ws.root / "big.txt").exists()


async def test_git_metadata_write_goes_through_with_approval(make_ws: Any) -> None:
    import subprocess

    ws = await make_ws()
    subprocess.run(["git", "init", "-q"], cwd=ws.root, check=True)
    asked: list[str] = []

    def asker(request: Any) -> str:
        asked.append(request.reason)
        return "allowed-once"

    ws.ctx.approval.set_asker(asker)
    out = await ws.text("write", {"file_path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"})
    assert out == "Created .git/hooks/pre-commit (1 lines, 10 bytes)"
    assert asked == [f'writes "{ws.root}/.git/hooks/pre-commit" in the git metadata of the workspace {ws.root}']
    assert await ws.text("write", {"file_path": "plain.txt", "content": "x"}) == "Created plain.txt (1 lines, 1 bytes)"
    assert len(asked) == 1  # only git metadata asks


async def test_read_is_bounded_on_the_descriptor_not_by_the_claimed_size(make_ws: Any) -> None:
    # /proc files claim a size of 0; reading past maxReadBytes is what refuses them.
    assert os.stat("/proc/cpuinfo").st_size == 0
    ws = await make_ws(maxReadBytes=100)
    result = await ws.run("read", {"file_path": "/proc/cpuinfo"})
    assert result.is_error
    assert result.content[0]["text"] == (
        'Error: cannot read "/proc/cpuinfo": file is too large (more than the limit of 100 bytes) — '
        "use grep, or bash with head/sed, to read parts of it"
    )


async def test_write_over_a_folder_is_refused_without_a_temp_file(make_ws: Any) -> None:
    ws = await make_ws()
    (ws.root / "sub").mkdir()
    (ws.root / "sub" / "x").mkdir()
    result = await ws.run("write", {"file_path": "sub/x", "content": "data"})
    assert result.is_error and result.content[0]["text"] == 'Error: cannot write "sub/x": it is a directory'
    assert sorted(p.name for p in (ws.root / "sub").iterdir()) == ["x"]


async def test_a_file_in_the_path_is_not_a_folder(make_ws: Any) -> None:
    ws = await make_ws()
    (ws.root / "a.txt").write_text("x\n")
    assert await ws.text("write", {"file_path": "a.txt/b", "content": "y"}) == (
        'Error: cannot write "a.txt/b": part of its path is a file, not a folder'
    )
    assert await ws.text("read", {"file_path": "a.txt/b"}) == 'Error: cannot read "a.txt/b": not found'
    assert await ws.text("edit", {"file_path": "a.txt/b", "old_string": "x", "new_string": "y"}) == (
        'Error: cannot edit "a.txt/b": not found'
    )
    assert (ws.root / "a.txt").read_text() == "x\n"
