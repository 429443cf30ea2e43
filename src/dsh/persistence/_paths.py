"""File-system naming and durable directory helpers for the file-backed stores.

Owns the reference's session-id encoding for file names (docs/format-v0.md, docs/stores.md), the cwd bucket name,
the cap on encoded names, and the small POSIX helpers every on-disk write goes through: creating
private directories (0700 regardless of umask), fsyncing a directory, and writing a buffer fully.

Id encoding: characters in ``[A-Za-z0-9._-]`` stay literal; every other UTF-16 code unit,
``~`` included, becomes ``~XXXX`` (4 uppercase hex digits). An id made only of dots (``.``,
``..``, ...) has every dot encoded, so no id can name the directory itself or its parent. ``/``
and NUL are encoded like any other character, so an encoded id is always one plain path component
inside the bucket: nothing can escape the store's root.
"""

from __future__ import annotations

import contextlib
import hashlib
import os

from dsh.persistence.base import InvalidSessionId

MAX_ENCODED_ID = 200
"""Longest encoded id accepted. File names add at most 23 bytes (``.jsonl.<12 hex>.tmp``) and
most file systems cap a name at 255 bytes."""

NO_CWD_BUCKET = "_no-cwd"
CWD_BUCKET_PREFIX = "cwd-"

_LITERAL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def encode_session_id(session_id: str) -> str:
    """The file-name form of ``session_id`` (raises :class:`InvalidSessionId`)."""
    if type(session_id) is not str:
        raise InvalidSessionId(f"session id must be a string, got {type(session_id).__name__}")
    if not session_id:
        raise InvalidSessionId("session id must not be empty")
    if all(ch in _LITERAL for ch in session_id) and session_id.strip("."):
        encoded = session_id  # the common case: loop ids like main-session-<uuid>
    else:
        dots_only = not session_id.strip(".")
        units = session_id.encode("utf-16-be", "surrogatepass")
        parts: list[str] = []
        for i in range(0, len(units), 2):
            unit = (units[i] << 8) | units[i + 1]
            ch = chr(unit)
            if unit < 0x80 and ch in _LITERAL and not (dots_only and ch == "."):
                parts.append(ch)
            else:
                parts.append(f"~{unit:04X}")
        encoded = "".join(parts)
    if len(encoded) > MAX_ENCODED_ID:
        shown = session_id if len(session_id) <= 40 else session_id[:40] + "..."
        raise InvalidSessionId(
            f'session id "{shown}" is too long for a file name '
            f"(encoded length {len(encoded)} > {MAX_ENCODED_ID})"
        )
    return encoded


def decode_session_id(encoded: str) -> str:
    """Inverse of :func:`encode_session_id` (for diagnostics; stores read ids from headers)."""
    units = bytearray()
    i = 0
    while i < len(encoded):
        ch = encoded[i]
        if ch == "~":
            unit = int(encoded[i + 1 : i + 5], 16)
            i += 5
        else:
            unit = ord(ch)
            i += 1
        units += unit.to_bytes(2, "big")
    return units.decode("utf-16-be", "surrogatepass")


def cwd_bucket(cwd: str | None) -> str:
    """``cwd-<first 12 hex of sha256(utf-8 cwd)>``, or ``_no-cwd`` without a cwd."""
    if cwd is None:
        return NO_CWD_BUCKET
    digest = hashlib.sha256(cwd.encode("utf-8", "surrogatepass")).hexdigest()
    return CWD_BUCKET_PREFIX + digest[:12]


def is_bucket_name(name: str) -> bool:
    return name == NO_CWD_BUCKET or (
        name.startswith(CWD_BUCKET_PREFIX) and len(name) == len(CWD_BUCKET_PREFIX) + 12
    )


def fsync_dir(path: str) -> None:
    """Make a directory's entries (a new, renamed or removed name) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_private_dir(path: str) -> None:
    """Create ``path`` and any missing parents with mode 0700 (umask ignored).

    Directories that already exist are left as they are. Each new directory's entry is fsynced
    in its parent, so a published file below it survives a crash.
    """
    if os.path.isdir(path):
        return
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
            continue
        os.chmod(directory, 0o700)
        fsync_dir(os.path.dirname(directory))


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a short write is not an error)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def remove_stale_temps(final: str) -> None:
    """Drop ``<final>.<hex>.tmp`` files a crashed writer left (the caller holds the lock)."""
    directory, base = os.path.split(final)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    prefix = base + "."
    for entry in names:
        if entry.startswith(prefix) and entry.endswith(".tmp") and len(entry) == len(base) + 17:
            unlink_quietly(os.path.join(directory, entry))
