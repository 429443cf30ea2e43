"""The host's unix sockets a confined command must not reach, and the folders hidden for them.

Why: cutting the network (``--unshare-net``) does not cut *pathname* unix sockets; connecting
to one only needs the file. A database socket (``COPY ... TO PROGRAM``), ``docker.sock``, an
ssh or gpg agent or the D-Bus bus each run code or act outside the sandbox. So with the network
off the sandbox

- mounts a fresh, empty, read-only tmpfs over the runtime folders (:func:`runtime_folders`:
  ``/run``, ``/var/run``, ``$XDG_RUNTIME_DIR``, ``/tmp``), where most sockets live (``/dev/shm``
  is already the sandbox's own: bubblewrap's ``--dev`` makes a private, empty one, left writable
  because POSIX semaphores, e.g. Python's ``multiprocessing`` locks, need it);
- and binds ``/dev/null`` over every other bound socket the kernel lists in ``/proc/net/unix``
  (every pathname socket of this network namespace, ``$HOME/.gnupg/S.gpg-agent`` and
  ``/var/lib/...`` included), so ``connect`` there fails with "connection refused".

Sockets inside the workspace are left alone (the project's own), as are those a command creates
inside the sandbox. Not covered: a socket bound in *another* network namespace to a path this
one can see (it is not listed here), one bound by a relative path, and one created after the
command started.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Final

__all__ = ["host_sockets", "runtime_folders"]

_PROC_NET_UNIX: Final = "/proc/net/unix"
# Header: "Num RefCount Protocol Flags Type St Inode Path"; the path is the 8th field.
_PATH_FIELD: Final = 7


def runtime_folders() -> list[Path]:
    """The folders covered by an empty read-only tmpfs (resolved, existing, none inside another)."""
    names = ["/run", "/var/run", "/tmp"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        names.append(runtime)
    found: list[Path] = []
    for name in names:
        path = Path(os.path.realpath(name))
        if path.is_dir() and path not in found:
            found.append(path)
    return [p for p in found if not any(other != p and other in p.parents for other in found)]


def _listed(table: str) -> Iterable[str]:
    for line in table.splitlines()[1:]:
        fields = line.split(None, _PATH_FIELD)
        if len(fields) > _PATH_FIELD and fields[_PATH_FIELD].startswith("/"):
            yield fields[_PATH_FIELD]


def _under(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def host_sockets(*, keep: Iterable[Path], hidden: Iterable[Path], shown: Iterable[Path] = ()) -> list[Path]:
    """Every bound pathname socket of this network namespace, resolved, that exists, is a
    socket, and lies neither under ``keep`` (the workspace) nor under ``hidden`` (covered by a
    tmpfs), unless it is under ``shown`` (a folder bound back over that tmpfs)."""
    try:
        with open(_PROC_NET_UNIX, encoding="utf-8", errors="surrogateescape") as fh:
            table = fh.read()
    except OSError:
        return []
    keep, hidden, shown = list(keep), list(hidden), list(shown)
    out: list[Path] = []
    for name in _listed(table):
        try:
            real = Path(os.path.realpath(name))
            if not stat.S_ISSOCK(os.lstat(real).st_mode):
                continue
        except (OSError, ValueError):
            continue  # gone, or unreachable for us (then not connectable either)
        covered = _under(real, hidden) and not _under(real, shown)
        if _under(real, keep) or covered or real in out:
            continue
        out.append(real)
    return out
