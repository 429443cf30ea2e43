"""Opening what the file tools checked, and nothing else: folder walks that follow no link, regular
files only, bounded reads, atomic replaces inside the opened folder, and dsh's own ``/proc`` files
kept out of reach. The I/O runs on a worker thread so the event loop stays responsive.

Why a walk: the tools check a path resolved through ``..`` and symlinks, then act on it. A
process the model runs can swap a folder of that path for a symlink in between (a
``renameat2(RENAME_EXCHANGE)`` loop wins that race often), so re-resolving the string at open time
would land outside the checked folder. Instead every folder from the anchor (the workspace when
the path is inside it, else ``/``) down to the target's parent is opened with
``O_NOFOLLOW|O_DIRECTORY`` relative to the previous one: a swapped-in symlink fails the walk
(:data:`RACE`), and a folder moved after it was opened is still the folder that was checked. The
temp file of a write is created in that same opened folder and renamed over the target with
``renameat``, so the two can never be in different places, and it is removed on every failure.

Why regular files only: ``read`` of a FIFO blocks forever (on the event loop, ignoring SIGTERM),
and ``/dev/zero`` reads until memory runs out. Files are opened ``O_NONBLOCK|O_NOFOLLOW``, their
type checked on the descriptor, and reads bounded on the descriptor (``st_size`` lies for
``/proc`` files).

Why ``/proc`` is fenced: ``/proc/self/environ`` (and ``/proc/<pid>/environ`` of dsh and of the
shell that started it) hold the API keys; the sandboxed ``bash`` sees only its own pid
namespace, so only the in-process tools could read them.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import queue
import secrets
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final, TypeVar

from dsh.tools.types import ToolError

__all__ = [
    "NOT_REGULAR",
    "OWN_PROCESS",
    "RACE",
    "anchor_for",
    "check_not_own_process",
    "holds_own_process",
    "is_own_process",
    "kind_of",
    "off_loop",
    "open_folder",
    "open_regular",
    "read_bounded",
    "replace_in",
]

T = TypeVar("T")

RACE: Final = (
    'cannot {verb} "{shown}": the path changed while it was being opened (a symlink appeared in '
    "it) — the call did nothing; retry"
)
OWN_PROCESS: Final = (
    'cannot {verb} "{shown}": the /proc files of dsh and of the processes that started it are off '
    "limits to the file tools (they hold dsh's environment, API keys included)"
)
NOT_REGULAR: Final = 'cannot {verb} "{shown}": it is a {kind}, not a regular file'

_WALK: Final = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK: Final = 1 << 20


def kind_of(mode: int) -> str:
    """A file type in words, for refusals."""
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISREG(mode):
        return "regular file"
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "special file"


# -- dsh's own process files -------------------------------------------------------------------


def _ancestors() -> set[int]:
    """dsh's parent, its parent, ... up to pid 1: the shell that started dsh holds the keys too,
    and so does a container's init when the key came in with ``docker run -e``."""
    found: set[int] = set()
    pid = os.getppid()
    while pid > 0 and pid not in found:
        found.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                raw = fh.read(4096)
            # The command name (field 2) may hold spaces and parentheses: parse after its last ")".
            pid = int(raw[raw.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return found


def _own_ids() -> set[int]:
    """dsh's pid, its thread ids (each also a ``/proc/<tid>`` folder) and its ancestors."""
    ids = {os.getpid()}
    with contextlib.suppress(OSError):
        ids.update(int(tid) for tid in os.listdir("/proc/self/task") if tid.isdigit())
    return ids | _ancestors()


def is_own_process(path: Path) -> bool:
    """Whether the resolved ``path`` is ``/proc`` itself's self entries or lies in the ``/proc``
    folder of dsh (or of one of its threads or ancestors)."""
    parts = path.parts
    if len(parts) < 3 or parts[0] != "/" or parts[1] != "proc":
        return False
    entry = parts[2]
    if entry in ("self", "thread-self"):
        return True
    return entry.isdigit() and int(entry) in _own_ids()


def check_not_own_process(path: Path, verb: str, shown: str) -> None:
    """Refuse ``path`` (resolved) when it is one of dsh's own process files."""
    if is_own_process(path):
        raise ToolError(OWN_PROCESS.format(verb=verb, shown=shown), code="SANDBOX_DENIED")


def holds_own_process(path: Path) -> bool:
    """Whether a recursive search of the resolved folder ``path`` would enter dsh's ``/proc``."""
    return path == Path("/proc") or is_own_process(path)


# -- the walk ----------------------------------------------------------------------------------


def anchor_for(path: Path, root: Path) -> Path:
    """Where a walk to ``path`` starts: the workspace when ``path`` is inside it, else ``/``."""
    return root if path == root or root in path.parents else Path(path.anchor or "/")


def _raced(verb: str, shown: str) -> ToolError:
    return ToolError(RACE.format(verb=verb, shown=shown), code="PATH_CHANGED")


def _refuse_component(dir_fd: int, name: str, verb: str, shown: str) -> Exception:
    """The error for a component that could not be opened as a folder: the race when it is a
    symlink, vanished or is a folder by now, else :class:`NotADirectoryError`."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return _raced(verb, shown)  # it vanished between the open and this look
    if stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode):  # a folder again: swapped back
        return _raced(verb, shown)
    return NotADirectoryError(errno.ENOTDIR, "part of its path is a file, not a folder")


@contextlib.contextmanager
def open_folder(anchor: Path, parts: Sequence[str], *, verb: str, shown: str, create: bool = False) -> Iterator[int]:
    """A descriptor of the folder ``anchor/parts...``, reached without following any link.

    ``anchor`` is trusted (the workspace, resolved, or ``/``); each part is opened relative to the
    previous folder with ``O_NOFOLLOW``. With ``create`` a missing folder is made (mode 0777 less
    the umask, as ``mkdir -p`` would). Raises :class:`FileNotFoundError` when a folder is missing
    and ``create`` is false, :class:`NotADirectoryError` when a part is a file, and a
    :class:`ToolError` when a part is a symlink (the race)."""
    fd = os.open(anchor, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts:
            try:
                nxt = os.open(name, _WALK, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=fd)
                try:
                    nxt = os.open(name, _WALK, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                        raise _refuse_component(fd, name, verb, shown) from None
                    raise
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refuse_component(fd, name, verb, shown) from None
                raise
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


# -- regular files -----------------------------------------------------------------------------


def open_regular(dir_fd: int, name: str, *, verb: str, shown: str) -> tuple[int, os.stat_result]:
    """``name`` in ``dir_fd`` opened for reading, only if it is a regular file (checked before the
    open, so no device is ever opened, and again on the descriptor). Directories raise
    :class:`IsADirectoryError`, a missing file :class:`FileNotFoundError`."""
    before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(before.st_mode):
        raise _raced(verb, shown)
    if stat.S_ISDIR(before.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory")
    if not stat.S_ISREG(before.st_mode):
        raise ToolError(NOT_REGULAR.format(verb=verb, shown=shown, kind=kind_of(before.st_mode)))
    try:
        fd = os.open(name, _READ, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _raced(verb, shown) from None
        if exc.errno == errno.ENXIO:  # a socket swapped in: opening one fails with ENXIO
            raise ToolError(NOT_REGULAR.format(verb=verb, shown=shown, kind="socket")) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory")
            raise ToolError(NOT_REGULAR.format(verb=verb, shown=shown, kind=kind_of(st.st_mode)))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_bounded(fd: int, limit: int) -> bytes | None:
    """At most ``limit`` bytes of ``fd``; ``None`` when it holds more (whatever ``st_size`` says)."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            return None


def replace_in(dir_fd: int, name: str, data: bytes, mode: int | None) -> os.stat_result:
    """Write ``data`` to a temp file in ``dir_fd`` and rename it over ``name`` there (atomic; the
    temp file is removed on any failure). ``mode`` keeps an existing file's permissions; a new
    file gets 0600, as before. Returns the new file's status."""
    tmp = f".{name[:200]}.{secrets.token_hex(4)}.dsh-tmp"
    fd = os.open(tmp, _CREATE, 0o600, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if mode is not None:
                os.fchmod(fd, mode)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return st


# -- off the event loop ------------------------------------------------------------------------


class _Workers:
    """Daemon worker threads, started when none is idle and then kept (a thread start costs
    ~0.2 ms, a hand-off ~0.05 ms). Daemon, unlike a ``ThreadPoolExecutor``'s, whose threads the
    interpreter joins at exit: a call stuck in the kernel (a hung network mount) must not keep
    dsh from exiting after SIGTERM."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1  # that idle thread (or another) takes this job
        self._jobs.put(job)
        if spawn:
            threading.Thread(target=self._serve, name="dsh-file-tool", daemon=True).start()

    def _serve(self) -> None:
        while True:
            self._jobs.get()()
            with self._lock:
                self._idle += 1


_WORKERS: Final = _Workers()


async def off_loop(fn: Callable[[], T]) -> T:
    """Run ``fn`` on a daemon worker thread and await it; cancelling the await returns at once."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(value: T | None, exc: BaseException | None) -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(value)  # type: ignore[arg-type]

    def run() -> None:
        try:
            value = fn()
        except BaseException as exc:  # handed to the awaiting task, which re-raises it
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
                loop.call_soon_threadsafe(settle, None, exc)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, value, None)

    _WORKERS.submit(run)
    return await future
