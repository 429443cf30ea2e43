"""Stdio server guard: runs one MCP server and takes every process it started down with it.

Run as ``python -I -S _guard.py <dsh-pid> <command> [args...]`` (standard library only, so it
starts in a few milliseconds and needs no site-packages). dsh spawns it as the leader of a new
process group; it forks the server into that same group, sharing its stdin/stdout pipes, and
waits.

On Linux the guard is a child subreaper (``PR_SET_CHILD_SUBREAPER``): a process the server
starts that leaves the group (``setsid``) or double-forks into a daemon is re-parented to the
guard, not to init, so it stays a descendant the guard can find. Whenever the guard ends (the
server exited, dsh stopped it, dsh died) it kills every descendant (found through ``/proc``,
repeated until none is left, since a killed process's children are re-parented to the guard
too); when dsh died or stopped it, its process group too. Elsewhere only the process group is
killed.

When dsh dies for any reason (``kill -9`` included) the guard notices at once through
``PR_SET_PDEATHSIG``, or within a poll interval of ``getppid()`` changing elsewhere. A SIGTERM
to the group (dsh's normal shutdown) is passed to the server, which gets a grace period shorter
than the SDK's own before its SIGKILL of the group, so the guard's sweep always runs. The guard
exits with the server's status. Only a SIGKILL of the guard itself (never sent by dsh before
the grace period) skips the sweep of processes that left the group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

POLL_S = 0.25
GRACE_S = 1.0
SWEEP_S = 5.0
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
LINUX = sys.platform.startswith("linux")


def _descendants(root: int) -> list[int]:
    """Live (not zombie) descendants of ``root``, from ``/proc``."""
    children: dict[int, list[int]] = {}
    zombies: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(name)
        children.setdefault(int(fields[1]), []).append(pid)
        if fields[0] == b"Z":
            zombies.add(pid)
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            if child not in zombies:
                found.append(child)
    return found


def _reap() -> list[tuple[int, int]]:
    """Every exited child, reaped: ``(pid, status)``."""
    reaped: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.append((pid, status))


def _sweep() -> None:
    """Kill every descendant (Linux), repeatedly until none is left."""
    deadline = time.monotonic() + SWEEP_S
    me = os.getpid()
    while LINUX and time.monotonic() < deadline:
        left = _descendants(me)
        if not left:
            break
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _reap()
        time.sleep(0.01)
    _reap()


def _end(code: int, *, group: bool = True) -> None:
    """Sweep the descendants, then (``group``) SIGKILL the group, the guard included."""
    _sweep()
    if group:
        with contextlib.suppress(OSError):
            os.killpg(0, signal.SIGKILL)
    os._exit(code)


def _prctl(option: int, value: int) -> None:
    if not LINUX:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


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
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGUSR2))
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() != parent:
        _end(137)  # dsh died before the death signal was armed
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
        for pid, status in _reap():
            if pid == child:
                # The server is gone: nothing it started may outlive it; the status is its own.
                _end(os.waitstatus_to_exitcode(status) & 0xFF, group=False)
        if os.getppid() != parent:
            _end(137)
        if terminating is not None and time.monotonic() - terminating > GRACE_S:
            _end(137)
        info = signal.sigtimedwait(watched, POLL_S)
        if info is None:
            continue
        if info.si_signo == signal.SIGUSR2:
            _end(137)
        if info.si_signo == signal.SIGTERM and terminating is None:
            # dsh stops the server: pass the signal on and allow a grace period.
            terminating = time.monotonic()
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
