"""Helpers for driving the real ``dsh`` command in subprocesses."""

from __future__ import annotations

import hashlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def dsh_env(**extra: str) -> dict[str, str]:
    # DSH_HOME stays: tests/conftest.py points it at a private folder for the whole suite.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEEPSEEK_", "DSH_", "ANTHROPIC_", "OPENAI_", "OPENROUTER_", "OLLAMA_")) or k == "DSH_HOME"}
    env.update({"TZ": "Asia/Shanghai", "PYTHONUNBUFFERED": "1", "DSH_DEV_CHECKS": "1"})
    env.pop("NO_COLOR", None)
    env.update(extra)
    return env


def run_dsh(args: list[str], cwd: Path, *, stdin: str = "", timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsh", *args],
        input=stdin, capture_output=True, text=True, cwd=cwd, env=dsh_env(**env), timeout=timeout,
    )


class Interactive:
    """``dsh chat`` with pipes, read incrementally (to send a line after a reply appears)."""

    def __init__(self, args: list[str], cwd: Path, **env: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dsh", *args], cwd=cwd, env=dsh_env(**env),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.out = b""
        os.set_blocking(self.proc.stdout.fileno(), False)  # type: ignore[union-attr]

    def read_until(self, marker: str, count: int = 1, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        stdout = self.proc.stdout
        assert stdout is not None
        while self.out.decode(errors="replace").count(marker) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out waiting for {marker!r}; got {self.out!r}")
            if not select.select([stdout], [], [], remaining)[0]:
                continue  # the deadline passed
            chunk = stdout.read()
            if chunk:
                self.out += chunk
            elif chunk is not None:  # end of file: dsh is gone or going
                self.proc.wait(timeout=max(remaining, 1))
                raise AssertionError(f"dsh exited {self.proc.returncode}: {self.proc.stderr.read()!r}")  # type: ignore[union-attr]
        return self.out.decode()

    def send(self, line: str) -> None:
        self.proc.stdin.write(line.encode())  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def close(self, timeout: float = 30) -> tuple[int, str, str]:
        self.proc.stdin.close()  # type: ignore[union-attr]
        rc = self.proc.wait(timeout=timeout)
        os.set_blocking(self.proc.stdout.fileno(), True)  # type: ignore[union-attr]
        self.out += self.proc.stdout.read()  # type: ignore[union-attr]
        return rc, self.out.decode(), self.proc.stderr.read().decode()  # type: ignore[union-attr]


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    cwd = tmp_path / "project"
    cwd.mkdir()
    yield cwd


def bucket(root: Path, cwd: Path) -> Path:
    return root / f"cwd-{hashlib.sha256(str(cwd).encode()).hexdigest()[:12]}"


def default_root() -> Path:
    """Where ``dsh`` stores sessions by default in the test suite: ``$DSH_HOME/sessions``."""
    return Path(os.environ["DSH_HOME"]) / "sessions"


def session_files(cwd: Path, root: Path | None = None) -> list[Path]:
    """The JSONL sessions of ``cwd`` under ``root`` (default: the default store)."""
    return sorted(bucket(root or default_root(), cwd).glob("*.jsonl"))
