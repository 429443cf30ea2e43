"""The file sandbox: modes, the bubblewrap command line for ``bash``, and the same policy for
in-process writes (``write``/``edit``).

Modes (the reference's vocabulary): ``read-only`` (nothing writable but ``/dev`` sinks),
``workspace-write`` (the workspace and a per-session temp dir), ``danger-full-access`` (no
confinement). What a confined command gets, whoever runs dsh (root included):

- **no capabilities**: ``--cap-drop ALL`` in a user namespace of its own (``--unshare-user``, our
  uid mapped to itself) where the host allows one, so ``CapEff``/``CapPrm``/``CapBnd``/``CapAmb``
  are all zero and ``mount -o remount,rw`` fails; without a user namespace (a container that
  forbids them) the effective and permitted sets are still empty. The probe checks ``CapEff``
  inside before the first command runs;
- ``/`` read-only, a fresh ``/dev`` and ``/proc``; under ``workspace-write`` the workspace and
  the session's temp dir read-write; the workspace's git metadata (:mod:`.protect`) read-only
  again in both modes, since a hook or ``core.fsmonitor`` written there runs unconfined later;
- with the network off (the default): its own network namespace, an empty read-only tmpfs over
  ``/run``, ``/var/run``, ``/tmp`` and ``$XDG_RUNTIME_DIR``, and ``/dev/null`` over
  every other host socket (:mod:`.hostsockets`), so no host service is reachable; the workspace,
  the temp dir and the session's spill folder are bound back over the tmpfs. ``network: true`` is
  the one way back to the host's network *and* its sockets (host folders then stay as they are,
  read-only);
- its own pid namespace and session, dying with dsh.

The sandbox **fails closed**: when a confined mode is asked for and ``bwrap`` is missing, cannot
start, or leaves the command capabilities, :func:`bwrap_status` reports why and the caller
refuses to run the command; it never falls back to running unconfined.

Why ``/tmp`` is read-only rather than a private writable tmpfs: that would let a write outside
the workspace "succeed" into a throwaway mount, which hides the denial from the model. Programs
get ``TMPDIR`` pointing at the writable per-session temp dir instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypeAlias

from dsh.tools.workspace.hostsockets import host_sockets, runtime_folders
from dsh.tools.workspace.protect import protected_paths

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
# What a path inside a folder hidden by the sandbox looks like (see SandboxPolicy.denied).
_MISSING: Final = "No such file or directory"


class SandboxUnavailable(Exception):
    """A confined mode was asked for but bubblewrap cannot confine (the call must not run)."""


def denial_marker(mode: str) -> str:
    return f"[sandbox: file access denied under {mode} mode]"


@dataclass(frozen=True)
class _Probe:
    problem: str | None
    userns: bool


_probes: dict[str, _Probe] = {}
_NO_CAPS: Final = "0000000000000000"
# Prints the effective capability set with no helper binary (only the shell).
_CAP_PROBE: Final = 'while read -r k v; do [ "$k" = CapEff: ] && echo "$v"; done < /proc/self/status; exit 0'


def _probe_args(exe: str, userns: bool) -> list[str]:
    return [
        exe, *(["--unshare-user"] if userns else []), "--cap-drop", "ALL",
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
        "--tmpfs", "/tmp", "--remount-ro", "/tmp", "--unshare-net", "--unshare-pid",
        "--", "/bin/sh", "-c", _CAP_PROBE,
    ]


def _probe(exe: str) -> _Probe:
    """Start bubblewrap the way :meth:`SandboxPolicy.wrap` will, first with a user namespace,
    then without one (a container that forbids nesting them), and check that the command inside
    really has no capabilities. Anything else is a problem: the sandbox refuses to run."""
    detail = ""
    for userns in (True, False):
        try:
            run = subprocess.run(_probe_args(exe, userns), capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return _Probe(
                f"sandbox unavailable: bubblewrap cannot start ({exc}); "
                "choose --sandbox danger-full-access explicitly",
                False,
            )
        if run.returncode == 0:
            caps = run.stdout.decode(errors="replace").strip()
            if caps == _NO_CAPS:
                return _Probe(None, userns)
            detail = f"the confined command kept capabilities {caps or '(unknown)'}"
            continue
        lines = run.stderr.decode(errors="replace").strip().splitlines()
        detail = lines[-1] if lines else f"exit {run.returncode}"
    return _Probe(
        f"sandbox unavailable: bubblewrap cannot start ({detail}); "
        "enable unprivileged user namespaces, or choose --sandbox danger-full-access explicitly",
        False,
    )


def _probe_for(bwrap: str | None) -> tuple[str | None, _Probe]:
    exe = bwrap or shutil.which("bwrap")
    if exe is None or not os.path.exists(exe):
        return exe, _Probe(
            "sandbox unavailable: bubblewrap (bwrap) is not installed; install it "
            "(e.g. apt-get install bubblewrap) or choose --sandbox danger-full-access explicitly",
            False,
        )
    if exe not in _probes:
        _probes[exe] = _probe(exe)
    return exe, _probes[exe]


def bwrap_status(bwrap: str | None = None) -> str | None:
    """``None`` when bubblewrap confines here, else one line naming the cause and the fix.

    Probed once per binary per process (a few ms), so a host where user namespaces are off, or
    where the command would keep capabilities, is reported as clearly as a missing binary."""
    return _probe_for(bwrap)[1].problem


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass(frozen=True)
class SandboxPolicy:
    """One session's confinement: the mode, its workspace root, whether network is open, and
    the session's private temp dir (``TMPDIR``, writable under ``workspace-write``)."""

    mode: SandboxMode
    workspace: Path
    network: bool = False
    bwrap: str | None = None
    temp: Path | None = None

    @property
    def confined(self) -> bool:
        return self.mode != "danger-full-access"

    def temp_dir(self, session: str = "") -> Path | None:
        """The per-session writable temp dir (``TMPDIR`` inside the sandbox), if any."""
        return self.temp

    def wrap(self, argv: list[str], *, workdir: Path, session: str = "", readable: Sequence[Path] = ()) -> list[str]:
        """``argv`` wrapped in bubblewrap for this mode (unchanged for danger-full-access);
        ``readable`` folders stay visible read-only (the session's spill folder).
        Raises :class:`SandboxUnavailable` when a confined mode cannot be honoured."""
        if not self.confined:
            return argv
        exe, probe = _probe_for(self.bwrap)
        if probe.problem is not None or exe is None:
            raise SandboxUnavailable(probe.problem)
        out = [exe, *(["--unshare-user"] if probe.userns else []), "--cap-drop", "ALL"]
        out += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        hidden = self.hidden_folders()
        for folder in hidden:
            out += ["--tmpfs", str(folder)]
        writable = self.mode == "workspace-write"
        binds: list[tuple[str, Path]] = [("--bind" if writable else "--ro-bind", self.workspace)]
        if writable and self.temp is not None:
            binds.append(("--bind", self.temp))
        binds += [("--ro-bind", path) for path in readable]
        # After the workspace bind, so git metadata inside it stays read-only (see protect.py).
        binds += [("--ro-bind", path) for path in protected_paths(self.workspace)]
        for flag, path in binds:
            out += [flag, str(path), str(path)]
        if not self.network:
            keep = [self.workspace] + ([self.temp] if self.temp is not None else [])
            shown = [path for _, path in binds]
            # /dev is the sandbox's own (--dev): no host socket there is visible.
            for sock in host_sockets(keep=keep, hidden=[*hidden, Path("/dev")], shown=shown):
                out += ["--ro-bind", "/dev/null", str(sock)]
        # Read-only last: the mount points of the binds above had to be created in them first.
        for folder in hidden:
            out += ["--remount-ro", str(folder)]
        if not self.network:
            out.append("--unshare-net")
        # A pid namespace ties every process of the command to bwrap: killing bwrap (timeout,
        # cancel) tears the whole tree down, even children that left the process group.
        out += ["--unshare-pid", "--die-with-parent", "--new-session", "--chdir", str(workdir), "--"]
        return out + argv

    def hidden_folders(self) -> list[Path]:
        """With the network off, the folders under an empty read-only tmpfs: every runtime
        folder (and its sockets), but not the workspace or one inside it (the project's own)."""
        if self.network or not self.confined:
            return []
        return [f for f in runtime_folders() if not _under(f, self.workspace)]

    def denied(self, output: str, workdir: Path | None = None) -> bool:
        """Whether a failed command's output shows a sandbox denial: a read-only file system,
        or a path reported missing that the host has (in a folder this sandbox hides)."""
        if self.looks_denied(output):
            return True
        hidden = self.hidden_folders()
        if not hidden:
            return False
        base = workdir or self.workspace
        for line in output.splitlines():
            if _MISSING not in line:
                continue
            # "bash: line 1: PATH: No such file or directory", "cat: PATH: No such ...".
            name = line.split(_MISSING)[0].rstrip(": ").split(": ")[-1].strip("'\"‘’`")
            if not name:
                continue
            parent = Path(os.path.realpath(base / Path(name).parent))
            if parent.exists() and any(_under(parent, folder) for folder in hidden):
                return True
        return False

    def write_denial(self, path: Path, session: str = "") -> str | None:
        """Why an in-process write to ``path`` (already resolved) is refused, or ``None``."""
        if self.mode == "danger-full-access":
            return None
        if self.mode == "read-only":
            return f"{denial_marker(self.mode)} (no writes are allowed in this session)"
        roots = [self.workspace] + ([self.temp] if self.temp is not None else [])
        if any(_under(path, root) for root in roots):
            return None
        return f"{denial_marker(self.mode)} (\"{path}\" is outside the workspace {self.workspace})"

    @staticmethod
    def looks_denied(output: str) -> bool:
        return any(marker in output for marker in _DENIAL_TEXT)
