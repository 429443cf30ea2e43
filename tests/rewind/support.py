"""Helpers for the rewind tests: a temp git repository, exact tree captures, scripted replies."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

from tests.llm.sse_server import Reply, chunk

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
CALC = "def add(a, b):\n    return a - b\n"


def call(n: int, name: str, args: dict[str, Any]) -> Reply:
    return Reply.sse(
        [
            chunk(tool_calls=[{"index": 0, "id": f"call_{n}", "type": "function",
                               "function": {"name": name, "arguments": json.dumps(args)}}]),
            chunk(finish="tool_calls"),
        ]
    )


def text(answer: str) -> Reply:
    return Reply.sse([chunk(content=answer), chunk(finish="stop")])


def make_repo(path: Path) -> Path:
    path.mkdir()
    (path / "calc.py").write_text(CALC)
    (path / "b.txt").write_text("bee\n")
    (path / "c.txt").write_text("sea\n")
    (path / "notes.txt").write_text("colour one\ncolour two\n")
    (path / "tool.sh").write_text("#!/bin/sh\necho tool\n")
    (path / ".gitignore").write_text("build/\n")
    (path / "build").mkdir()
    (path / "build" / "out.o").write_text("object\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgSign=false"]
    subprocess.run([*git, "init", "-q"], cwd=path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], cwd=path, check=True)
    return path


def tree_state(root: Path, *, skip: tuple[str, ...] = (".git", "build")) -> dict[str, tuple[str, int, bytes]]:
    """Every file, folder and symlink under ``root``: kind, permission bits, bytes or target."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for folder, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(folder, root)
        dirs[:] = sorted(d for d in dirs if not (rel_dir == "." and d in skip))
        for name in [*dirs, *files]:
            path = Path(folder) / name
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", 0, os.readlink(path).encode())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", mode, b"")
            else:
                out[rel] = ("file", mode, path.read_bytes())
    return out


def git_state(repo: Path) -> dict[str, str]:
    """A digest of every file under ``.git`` (HEAD, index, refs, config, objects)."""
    out = {}
    for folder, _dirs, files in os.walk(repo / ".git"):
        for name in files:
            path = Path(folder) / name
            out[os.path.relpath(path, repo)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def session_id_of(log: Path) -> str:
    return str(json.loads(log.read_text().splitlines()[0])["id"])


def events_of(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]
