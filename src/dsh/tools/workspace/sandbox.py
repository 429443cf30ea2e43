"""The file sandbox: modes, the bubblewrap command line for ``bash``, and the same policy for
in-process writes (``write``/``edit``).

Modes (the reference's vocabulary): ``read-only`` (nothing writable but ``/dev`` sinks),
``workspace-write`` (the workspace and a per-session temp dir), ``danger-full-access`` (no
confinement). Network is cut (``--unshare-net``) under the two confined modes unless the config
opens it. The sandbox **fails closed**: when a confined mode is asked for and ``bwrap`` is missing
or cannot start, :func:`bwrap_status` reports why and the caller refuses to run the command; it
never falls back to running unconfined.

Why ``/tmp`` stays read-only under ``workspace-write``: a private tmpfs would let a write outside
the workspace "succeed" into a throwaway mount, which hides the denial from the model. Programs
get ``TMPDIR`` pointing at the writable per-session temp dir instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypeAlias

__all__ = [
    "MODES",
    "SandboxMode",
    "SandboxPolicy",
    "SandboxUnavailable",
    "bwrap_status",
    "denial_marker",
]

SandboxMode: TypeAlias = Literal["read-only", "workspace-write", "danger-full-access"]
MODES: Final = ("read-only", "workspace-write", "danger-full-access")

# What a blocked write looks like from inside bubblewrap (a read-only bind mount).
_DENIAL_TEXT: Final = ("Read-only file system",)


class SandboxUnavailable(Exception):
    """A confined mode was asked for but bubblewrap cannot confine (the call must not run)."""


def denial_marker(mode: str) -> str:
    return f"[sandbox: file access denied under {mode} mode]"


_status_cache: dict[str, str | None] = {}


def bwrap_status(bwrap: str | None = None) -> str | None:
    """``None`` when bubblewrap works here, else one line naming the cause and the fix.

    Probed once per binary per process (a ~5 ms ``bwrap ... true``), so a host where user
    namespaces are off is reported as clearly as a missing binary."""
    exe = bwrap or shutil.which("bwrap")
    if exe is None or not os.path.exists(exe):
        return (
            "sandbox unavailable: bubblewrap (bwrap) is not installed; install it "
            "(e.g. apt-get install bubblewrap) or choose --sandbox danger-full-access explicitly"
        )
    if exe in _status_cache:
        return _status_cache[exe]
    try:
        probe = subprocess.run(
            [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-net", "--unshare-pid", "true"],
            capture_output=True,
            timeout=10,
            check=False,
        )
        problem = None
        if probe.returncode != 0:
            detail = probe.stderr.decode(errors="replace").strip().splitlines()
            problem = (
                f"sandbox unavailable: bubblewrap cannot start ({detail[-1] if detail else f'exit {probe.returncode}'}); "
                "enable unprivileged user namespaces, or choose --sandbox danger-full-access explicitly"
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        problem = (
            f"sandbox unavailable: bubblewrap cannot start ({exc}); "
            "choose --sandbox danger-full-access explicitly"
        )
    _status_cache[exe] = problem
    return problem


@dataclass(frozen=True)
class SandboxPolicy:
    """One session's confinement: the mode, its workspace root, and whether network is open."""

    mode: SandboxMode
    workspace: Path
    network: bool = False
    bwrap: str | None = None
    temp_root: str | None = None

    @property
    def confined(self) -> bool:
        return self.mode != "danger-full-access"

    def temp_dir(self, session: str) -> Path:
        """The per-session writable temp dir (``TMPDIR`` inside the sandbox)."""
        base = Path(self.temp_root or tempfile.gettempdir()) / f"dsh-sandbox-{os.getuid()}"
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in session)
        path = base / safe
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return Path(os.path.realpath(path))

    def wrap(self, argv: list[str], *, workdir: Path, session: str) -> list[str]:
        """``argv`` wrapped in bubblewrap for this mode (unchanged for danger-full-access).
        Raises :class:`SandboxUnavailable` when a confined mode cannot be honoured."""
        if not self.confined:
            return argv
        problem = bwrap_status(self.bwrap)
        if problem is not None:
            raise SandboxUnavailable(problem)
        exe = self.bwrap or shutil.which("bwrap") or "bwrap"
        out = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        if self.mode == "workspace-write":
            tmp = self.temp_dir(session)
            out += ["--bind", str(self.workspace), str(self.workspace), "--bind", str(tmp), str(tmp)]
            out += ["--setenv", "TMPDIR", str(tmp)]
        if not self.network:
            out.append("--unshare-net")
        # A pid namespace ties every process of the command to bwrap: killing bwrap (timeout,
        # cancel) tears the whole tree down, even children that left the process group.
        out += ["--unshare-pid", "--die-with-parent", "--new-session", "--chdir", str(workdir), "--"]
        return out + argv

    def write_denial(self, path: Path, session: str) -> str | None:
        """Why an in-process write to ``path`` (already resolved) is refused, or ``None``."""
        if self.mode == "danger-full-access":
            return None
        if self.mode == "read-only":
            return f"{denial_marker(self.mode)} (no writes are allowed in this session)"
        roots = [self.workspace, self.temp_dir(session)]
        if any(path == root or root in path.parents for root in roots):
            return None
        return f"{denial_marker(self.mode)} (\"{path}\" is outside the workspace {self.workspace})"

    @staticmethod
    def looks_denied(output: str) -> bool:
        return any(marker in output for marker in _DENIAL_TEXT)
