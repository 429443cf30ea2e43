"""Refuse to start a conversation whose session store cannot be written.

Without this check an unwritable ``--root`` (a path below a file, ``/proc/x``, a read-only
folder) showed ``ready.``, streamed the reply, and then lost the whole conversation with a
traceback at the first flush. stdio-app calls :func:`check_writable` before it creates or
resumes its agent: the store's folder is created now (as the store itself would, mode 0700) and
a probe file is written in it, so the user gets one line before anything is typed.

A SQLite store is opened too (:meth:`SqliteStore.check`): a ``--sqlite`` file that is not a
database, is truncated or read-only, or is a folder, printed ``ready.``, ran turns whose tools
really executed, saved nothing and ended in a traceback.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile

from dsh.persistence._paths import ensure_private_dir
from dsh.persistence.base import SessionStore, UnsupportedVersion


class StoreUnwritable(Exception):
    """The session store's folder cannot be created or written (a usage error: exit 2)."""


def _shown(path: str) -> str:
    """``path`` relative to the working directory when below it, as a user would type it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def store_folder(store: SessionStore) -> str | None:
    """The folder a file-backed store writes into; ``None`` for a database server."""
    from dsh.persistence.jsonl import JsonlStore
    from dsh.persistence.sqlite import SqliteStore

    if isinstance(store, JsonlStore):
        return store.root
    if isinstance(store, SqliteStore):
        return os.path.dirname(store.path)
    return None


def unwritable_reason(store: SessionStore) -> str | None:
    """One line saying why the store's folder cannot be written, or ``None`` when it can."""
    folder = store_folder(store)
    if folder is None:
        return None
    what = f"cannot create session folder {_shown(folder)}"
    existing = folder
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if os.path.exists(existing) and not os.path.isdir(existing):
        return f"{what}: {_shown(existing)} is {'a file' if os.path.isfile(existing) else 'not a folder'}"
    try:
        ensure_private_dir(folder)
    except OSError as exc:
        return f"{what}: {exc.strerror or exc}"
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".dsh-probe-"):
            pass
    except OSError as exc:
        return f"session folder {_shown(folder)} is not writable: {exc.strerror or exc}"
    return database_reason(store)


def database_reason(store: SessionStore) -> str | None:
    """One line saying why a SQLite store's file cannot be used (``None`` for other stores)."""
    from dsh.persistence.sqlite import SqliteStore

    if not isinstance(store, SqliteStore):
        return None
    what = f"cannot use session database {_shown(store.path)}"
    if os.path.isdir(store.path):
        return f"{what}: it is a folder"
    try:
        store.check()
    except UnsupportedVersion as exc:
        return str(exc)
    except (sqlite3.Error, OSError) as exc:
        return f"{what}: {exc}"
    return None


def check_writable(store: SessionStore) -> None:
    """Raise :class:`StoreUnwritable` with the one-line reason when the store cannot be written."""
    reason = unwritable_reason(store)
    if reason is not None:
        raise StoreUnwritable(reason)
