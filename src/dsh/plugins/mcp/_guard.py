"""Stdio server guard: runs one MCP server and takes its process group down with dsh.

Run as ``python -I -S _guard.py <dsh-pid> <command> [args...]`` (standard library only, so it
starts in a few milliseconds and needs no site-packages). dsh spawns it as the leader of a new
process group; it forks the server into that same group, sharing its stdin/stdout pipes, and
waits. When dsh dies for any reason (``kill -9`` included) the guard notices at once through
``PR_SET_PDEATHSIG`` on Linux, or within a poll interval of ``getppid()`` changing elsewhere,
and kills the whole group, so no server (nor anything the server started in its group) is left
running. A SIGTERM to the group (dsh's normal shutdown) is passed to the server, which gets a
grace period before the group is killed. The guard exits with the server's status.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

POLL_S = 0.25
GRACE_S = 2.0
PR_SET_PDEATHSIG = 1


def _kill_group() -> None:
    with contextlib.suppress(OSError):
        os.killpg(0, signal.SIGKILL)
    os._exit(137)


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: _guard.py <parent-pid> <command> [args...]", file=sys.stderr)
        return 2
    parent = int(argv[1])
    if os.getpgrp() != os.getpid():
        os.setpgid(0, 0)  # killing "our group" must never reach the caller's group
    watched = {signal.SIGCHLD, signal.SIGUSR2, signal.SIGTERM}
    # Blocked, then taken synchronously with sigtimedwait: no handler can interrupt a waitpid.
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGUSR2), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        _kill_group()  # dsh died before the death signal was armed
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        child = os.fork()
    except OSError as exc:
        print(f"dsh mcp guard: cannot fork: {exc}", file=sys.stderr)
        return 127
    if child == 0:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, watched)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            os.execvp(argv[2], argv[2:])
        except OSError as exc:
            print(f"cannot start {argv[2]}: {exc.strerror or exc}", file=sys.stderr)
        os._exit(127)
    terminating: float | None = None
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid == child:
            return os.waitstatus_to_exitcode(status) & 0xFF
        if os.getppid() != parent:
            _kill_group()
        if terminating is not None and time.monotonic() - terminating > GRACE_S:
            _kill_group()
        info = signal.sigtimedwait(watched, POLL_S)
        if info is None:
            continue
        if info.si_signo == signal.SIGUSR2:
            _kill_group()
        if info.si_signo == signal.SIGTERM and terminating is None:
            # dsh stops the server: pass the signal on and allow a grace period.
            terminating = time.monotonic()
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
