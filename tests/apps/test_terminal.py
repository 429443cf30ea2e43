"""Terminal mode through a real pseudo-terminal: Ctrl-C cancels a slow turn, the app lives on."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import select
import stat
import subprocess
import sys
import termios
import time
from pathlib import Path

from tests.apps.conftest import default_root, dsh_env, session_files

SLOW = """\
- id: echo
  name: echo-llm
  config: {delayMs: 40}
- id: tc
  name: time-context
- id: app
  name: stdio-app
  config: {model: mock-echo}
"""


def _controlling_tty() -> None:
    # A new session whose controlling terminal is the pty, as a shell would set up: only then
    # does a typed Ctrl-C reach the process as SIGINT.
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Pty:
    def __init__(self, args: list[str], cwd: Path) -> None:
        self.master, slave = pty.openpty()
        env = dsh_env(TERM="xterm-256color", COLUMNS="120", LINES="40", PROMPT_TOOLKIT_NO_CPR="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "dsh", *args], cwd=cwd, env=env,
                                     stdin=slave, stdout=slave, stderr=slave, preexec_fn=_controlling_tty)
        os.close(slave)
        self.screen = b""

    def expect(self, needle: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while needle.encode() not in self.screen:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"timed out waiting for {needle!r}; screen: {self.screen[-2000:]!r}"
            ready, _, _ = select.select([self.master], [], [], min(remaining, 0.2))
            if ready:
                try:
                    self.screen += os.read(self.master, 65536)
                except OSError:
                    raise AssertionError(f"terminal closed; screen: {self.screen[-2000:]!r}") from None

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, "dsh did not exit"
            if select.select([self.master], [], [], 0.1)[0]:
                with contextlib.suppress(OSError):
                    self.screen += os.read(self.master, 65536)
        os.close(self.master)
        return self.proc.returncode


def test_ctrl_c_cancels_a_slow_turn_and_the_app_keeps_running(workdir: Path) -> None:
    (workdir / "slow.yml").write_text(SLOW)
    term = Pty(["chat", "--config", "slow.yml"], workdir)
    term.expect("Ctrl-D to leave")
    time.sleep(0.5)
    term.type("hello\r")
    term.expect('You said: "Time')  # streaming, far from done (40 ms a character)
    term.type("\x03")
    term.expect("⊘ turn aborted")
    time.sleep(0.5)
    term.type("again\r")
    term.expect("[main turn 2]")
    term.expect("⏱ Time sampled while preparing turn 2, step 1")
    term.type("\x03")  # cancels turn 2 too
    term.expect("⊘ turn aborted", timeout=10)
    time.sleep(0.3)
    term.type("\x04")  # Ctrl-D at the idle prompt: flush and leave
    assert term.wait() == 0
    [log] = session_files(workdir)
    events = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    ends = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    assert ends == [{"kind": "aborted", "reason": "interrupted by the user"}] * 2
    # Consistent: every step closed before its turn, seqs contiguous.
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert sum(e["type"] == "step/start" for e in events) == sum(e["type"] == "step/end" for e in events)
    # Line-editing history persists per project, private like the sessions beside it.
    history = default_root() / "history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert "+hello" in history.read_text() and "+again" in history.read_text()
