"""Private folders for what one process of dsh writes on the model's behalf: the spill files
(complete outputs the model saw cut) and the sandbox's per-session temp dirs (``TMPDIR``).

Why not a fixed name such as ``/tmp/dsh-spill-<uid>``: in a shared temp folder another local user
can create that name first (0777) and later swap a session folder for a symlink to the victim's
home, which the next ``bash`` call would then bind read-write. So each process makes its own
folder with :func:`tempfile.mkdtemp` (a fresh random name, created 0700 by the kernel's
``mkdir``, never an existing one), checks it with ``lstat`` (a folder, not a link, ours, 0700)
and only then creates the per-session folders inside it, where no one else can write.

Where: ``$XDG_RUNTIME_DIR`` when it is a real folder owned by us with mode 0700 (per-user and
cleared at logout), else the temp dir (``$TMPDIR``, ``/tmp``); a configured folder (``spillDir``)
replaces both. A base folder another user could rename entries in (group/other-writable without
the sticky bit, not ours) is refused. The folder and everything in it is removed when the plugin
is disposed (the session ends), with an ``atexit`` fallback for exits that skip the disposal;
the folders of an earlier process that was killed (SIGKILL: nothing ran at its exit) are removed
by the next one that makes a folder in the same place (each folder names its process in a
``.pid`` file; only our own private folders whose process is gone are touched).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

__all__ = ["PrivateDir", "PrivateDirError", "default_base", "safe_name"]


class PrivateDirError(OSError):
    """A private folder could not be made safely (the message says where and why)."""


def safe_name(session: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in session) or "_"


def _is_private(st: os.stat_result) -> bool:
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o077 == 0


def default_base() -> str:
    """``$XDG_RUNTIME_DIR`` when it is ours and private, else the temp dir."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        with contextlib.suppress(OSError):
            if _is_private(os.lstat(runtime)):
                return runtime
    return tempfile.gettempdir()


def _check_base(base: str) -> None:
    """Refuse a base where another user could swap our folder (see the module docstring)."""
    try:
        st = os.lstat(base)
    except OSError as exc:
        raise PrivateDirError(f"cannot use {base!r} for private files: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise PrivateDirError(f"cannot use {base!r} for private files: not a folder (or a symlink)")
    shared = stat.S_IMODE(st.st_mode) & 0o022
    if st.st_uid != os.geteuid() and shared and not st.st_mode & stat.S_ISVTX:
        raise PrivateDirError(
            f"cannot use {base!r} for private files: others can write there and it has no sticky bit"
        )


def _rmtree(path: Path) -> None:
    """Remove ``path`` entirely, even folders a command made unwritable (``chmod 000``).
    ``shutil.rmtree`` works on descriptors here and never follows a symlink out of the tree."""

    def retry(func: object, name: str, _exc: object) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), 0o700)
            if os.path.isdir(name) and not os.path.islink(name):
                os.chmod(name, 0o700)
                shutil.rmtree(name, ignore_errors=True)
            else:
                os.unlink(name)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=retry)


_PID_FILE = ".pid"


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return "unknown"


def _owner_alive(folder: str) -> bool:
    """Whether the process named in ``folder/.pid`` may still run: anything unsure (no file
    yet, another pid namespace, where the same pid means another process) counts as alive."""
    try:
        fd = os.open(os.path.join(folder, _PID_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return True  # perhaps made a moment ago, the file not yet written
    try:
        pid_text, _, namespace = os.read(fd, 256).decode("ascii", "replace").strip().partition(" ")
        pid = int(pid_text)
    except ValueError:
        return True
    finally:
        os.close(fd)
    if pid <= 0 or namespace != _pid_namespace():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _remove_orphans(base: str, prefix: str) -> None:
    """Remove our private ``prefix*`` folders in ``base`` whose process is gone."""
    with contextlib.suppress(OSError), os.scandir(base) as entries:
        for entry in entries:
            if not entry.name.startswith(prefix) or entry.name == prefix:
                continue
            with contextlib.suppress(OSError):
                if _is_private(os.lstat(entry.path)) and not _owner_alive(entry.path):
                    _rmtree(Path(entry.path))


class PrivateDir:
    """One process's private folder (made on first use) with a sub-folder per session."""

    def __init__(self, prefix: str, base: str | None = None) -> None:
        self.prefix = prefix
        self.base = base
        self._root: Path | None = None

    def root(self) -> Path:
        if self._root is not None:
            return self._root
        base = self.base
        if base is None:
            base = default_base()
        else:
            base = os.path.abspath(os.path.expanduser(base))
            os.makedirs(base, mode=0o700, exist_ok=True)
        _check_base(base)
        _remove_orphans(base, self.prefix)
        made = tempfile.mkdtemp(prefix=self.prefix, dir=base)
        if not _is_private(os.lstat(made)):
            raise PrivateDirError(f"{made!r} is not a private folder after creating it")
        with open(os.path.join(made, _PID_FILE), "x", encoding="ascii") as fh:
            fh.write(f"{os.getpid()} {_pid_namespace()}")
        # Resolved once, here: ``base`` may itself sit behind a symlink (``/tmp`` on macOS).
        self._root = Path(os.path.realpath(made))
        _LIVE.add(self._root)
        return self._root

    def session_dir(self, session: str) -> Path:
        """``<root>/<session>``, created 0700; an entry there that is not our folder is refused."""
        path = self.root() / safe_name(session)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        if not _is_private(os.lstat(path)):
            raise PrivateDirError(f"{str(path)!r} is not a private folder")
        return path

    @property
    def created(self) -> Path | None:
        return self._root

    def dispose(self) -> None:
        """Remove the folder and everything in it (a later use makes a fresh one)."""
        root, self._root = self._root, None
        if root is not None:
            _LIVE.discard(root)
            _rmtree(root)


# Folders made and not yet disposed: removed at interpreter exit if the disposal never ran.
_LIVE: set[Path] = set()


@atexit.register
def _remove_leftovers() -> None:
    for root in list(_LIVE):
        with contextlib.suppress(OSError):
            _rmtree(root)
    _LIVE.clear()
