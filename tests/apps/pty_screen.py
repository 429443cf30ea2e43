"""A real pseudo-terminal running ``dsh``, read through a pyte screen (what a user sees)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pexpect
import pyte

from tests.apps.conftest import dsh_env

ROWS, COLS = 40, 120

# What the status line under the input shows, idle or during a turn.
_STATUS = (b"to leave", b"Ctrl-C cancels")


def input_redrawn(raw: bytes, line: str) -> bool:
    """Whether the input area was drawn again after the last ``line`` dsh printed.

    dsh prints above the input with the terminal briefly back in cooked mode, where a typed
    Ctrl-D is the line discipline's end of file and never reaches dsh; the redraw after the
    print means keys reach dsh again.
    """
    at = raw.rfind(line.encode())
    return at >= 0 and any(status in raw[at:] for status in _STATUS)


class Terminal:
    def __init__(self, args: list[str], cwd: Path, **env: str) -> None:
        self.raw = b""
        self.screen = pyte.HistoryScreen(COLS, ROWS, history=2000)
        self.stream = pyte.ByteStream(self.screen)
        environment = dsh_env(TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1", **env)
        self.child = pexpect.spawn(
            sys.executable, ["-m", "dsh", *args], cwd=str(cwd), env=environment,
            dimensions=(ROWS, COLS), timeout=60,
        )

    def _pump(self, seconds: float) -> None:
        try:
            data = self.child.read_nonblocking(65536, timeout=seconds)
        except pexpect.TIMEOUT:
            return
        except pexpect.EOF:
            raise AssertionError(f"dsh exited; screen:\n{self.text()}") from None
        self.raw += data
        self.stream.feed(data)

    def text(self) -> str:
        """Scrollback and screen, one string per row, trailing blanks removed."""
        rows = [
            "".join(line[x].data for x in range(COLS)).rstrip()
            for line in list(self.screen.history.top)
        ]
        rows += [row.rstrip() for row in self.screen.display]
        return "\n".join(rows)

    def expect(self, needle: str, timeout: float = 60, *, count: int = 1) -> str:
        """Read until ``needle`` is on the screen (``count`` times: scrollback included)."""
        deadline = time.monotonic() + timeout
        while self.text().count(needle) < count:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"timed out waiting for {needle!r} x{count}; screen:\n{self.text()}"
            self._pump(min(remaining, 0.2))
        return self.text()

    def expect_input_after(self, line: str, timeout: float = 60) -> None:
        """Read until ``line`` was printed and the input area drawn again (see :func:`input_redrawn`)."""
        deadline = time.monotonic() + timeout
        while not input_redrawn(self.raw, line):
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"timed out waiting for the input after {line!r}; screen:\n{self.text()}"
            self._pump(min(remaining, 0.2))

    def settle(self, seconds: float = 0.5) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._pump(0.05)
        return self.text()

    def type(self, text: str, *, delay: float = 0.0) -> None:
        if not delay:
            self.child.send(text)
            return
        for ch in text:
            self.child.send(ch)
            time.sleep(delay)  # scripted: a person typing

    def prompt_line(self) -> str:
        """The input line as shown (the last row that starts with a prompt marker)."""
        rows = [row.rstrip() for row in self.screen.display]
        return [row for row in rows if row.startswith(("> ", "↪ ", ">"))][-1]

    def wait(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while self.child.isalive():
            assert time.monotonic() < deadline, f"dsh did not exit; screen:\n{self.text()}"
            try:
                self._pump(0.1)
            except AssertionError:
                break
        self.child.close()
        return int(self.child.exitstatus if self.child.exitstatus is not None else -1)


# A raw pseudo-terminal without a screen model (byte checks), as a shell would set one up.


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
        self._read_until(lambda: needle.encode() in self.screen, needle, timeout)

    def expect_input_after(self, line: str, timeout: float = 30) -> None:
        """Read until ``line`` was printed and the input area drawn again (see :func:`input_redrawn`)."""
        self._read_until(lambda: input_redrawn(self.screen, line), f"the input after {line!r}", timeout)

    def _read_until(self, done: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"timed out waiting for {what}; screen: {self.screen[-2000:]!r}"
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

