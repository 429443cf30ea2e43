"""Disk full and permission errors during a flush, with the real stores and the agent spine.

A 64 KiB tmpfs (mounted when the suite runs as root) makes the file system genuinely full; a
read-only bind mount (root) or ``chmod 0500`` (anyone else) makes the store's folder unwritable.
Each scenario runs turns in-process on a :class:`~dsh.runtime.Context` with the agent spine, a
scripted model and the JSONL (or SQLite) store plugin, so the fault hits exactly one flush. What
must hold: the turn still completes and reports the failure as ``agent/error``, the in-memory
session keeps every event, nothing partial reaches the disk, and the next successful flush writes
the missing events exactly once (the file equals the in-memory log, byte for byte).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.persistence.jsonl import header_line
from dsh.session import encode_event
from dsh.testing import Reply
from dsh.tools import echo
from tests.support.rig import Rig, make_rig


def _mount(*args: str) -> bool:
    if os.geteuid() != 0:
        return False
    result = subprocess.run(["mount", *args], capture_output=True, timeout=30)
    return result.returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], capture_output=True, timeout=30)
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``path`` (the test is skipped when mounting is not permitted)."""
    path.mkdir()
    if not _mount("-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)):
        pytest.skip("mounting a tmpfs is not permitted here (needs root); the permission test is the fallback")
    try:
        yield path
    finally:
        _umount(path)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs."""
    with tmpfs(tmp_path / "small", "64k") as path:
        yield path


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[str]:
    """Make ``path`` unwritable: a read-only bind mount when mounting is permitted, else
    ``chmod 0500`` (skipped when even that does not stop this user, e.g. root without mounts)."""
    if _mount("--bind", str(path), str(path)):
        try:
            if _mount("-o", "remount,ro,bind", str(path)):
                yield "read-only bind mount"
                return
        finally:
            _umount(path)
    mode = path.stat().st_mode & 0o777
    path.chmod(0o500)
    try:
        probe = path / "probe"
        try:
            probe.touch()
        except PermissionError:
            pass
        else:
            probe.unlink()
            pytest.skip("neither a read-only mount nor chmod can make a folder unwritable here")
        yield "chmod 0500"
    finally:
        path.chmod(mode)


def fill(folder: Path) -> Path:
    """Write a filler file until the file system is full; returns it (delete to free space)."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 512)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


class DiskRig(Rig):
    """The shared rig with the echo tool and a JSONL or SQLite store; ``main`` in ``/project``."""

    async def turn(self, text: str) -> None:
        await self.say(text)
        last = self.session.events[-1]
        assert last.type == "turn/end" and last.data["reason"] == {"kind": "completed"}, last

    def expected_file(self) -> bytes:
        session = self.session
        return header_line(session.header) + b"\n" + b"".join(encode_event(e) + b"\n" for e in session.events)

    def expected_rows(self) -> list[bytes]:
        return [encode_event(e) for e in self.session.events]

    def path(self) -> Path:
        return Path(self.store.locate(self.session.header))


async def disk_rig(store: str, location: Path, reply: Reply, *, checkpoints: bool = False) -> DiskRig:
    # Checkpoints (writes before each model call) are off unless a test asks: these tests count
    # the failures of turn-end flushes.
    return await make_rig(
        default=reply,
        loop_config={"checkpointBeforeModel": checkpoints},
        store=str(location) if store == "jsonl" else f"sqlite:///{location}",
        record=["agent/error"],
        plugins=[echo],
        agent_id="main",
        cwd="/project",
        rig_class=DiskRig,
    )


def _rows(path: Path, session_id: str) -> list[bytes]:
    db = sqlite3.connect(path)
    try:
        db.text_factory = bytes
        rows = db.execute("SELECT seq, line FROM events WHERE session_id = ? ORDER BY seq", (session_id,)).fetchall()
    finally:
        db.close()
    assert [seq for seq, _ in rows] == list(range(len(rows)))
    return [line for _, line in rows]


async def test_disk_full_during_an_append_is_reported_then_written_once(small_fs: Path) -> None:
    rig = await disk_rig("jsonl", small_fs / "sessions", Reply(text="y" * 3000, deltas=3))
    try:
        await rig.turn("one")
        path = rig.path()
        assert path.read_bytes() == rig.expected_file()
        durable = path.read_bytes()
        filler = fill(small_fs)
        for text in ("two", "three"):
            await rig.turn(text)  # completes in memory
            assert isinstance(rig.errors[-1], OSError) and rig.errors[-1].errno == errno.ENOSPC
            assert path.read_bytes() == durable, "a failed append left bytes behind"
        assert len(rig.errors) == 2
        assert rig.session.last_turn == 3
        filler.unlink()
        await rig.turn("four")
        assert len(rig.errors) == 2
        assert path.read_bytes() == rig.expected_file()
    finally:
        await rig.ctx.dispose()
    assert path.read_bytes() == rig.expected_file()
    assert not [p for p in path.parent.iterdir() if p.suffix == ".tmp"]


async def test_disk_full_with_checkpoints_keeps_a_clean_prefix_then_writes_once(small_fs: Path) -> None:
    rig = await disk_rig("jsonl", small_fs / "sessions", Reply(text="y" * 3000, deltas=3), checkpoints=True)
    try:
        await rig.turn("one")
        path = rig.path()
        assert path.read_bytes() == rig.expected_file()
        filler = fill(small_fs)
        for text in ("two", "three"):
            await rig.turn(text)  # completes in memory; checkpoints and flushes fail
            assert isinstance(rig.errors[-1], OSError) and rig.errors[-1].errno == errno.ENOSPC
            on_disk = path.read_bytes()
            assert rig.expected_file().startswith(on_disk) and on_disk.endswith(b"\n")
        filler.unlink()
        failures = len(rig.errors)
        await rig.turn("four")
        assert len(rig.errors) == failures
        assert path.read_bytes() == rig.expected_file()  # every event exactly once
    finally:
        await rig.ctx.dispose()
    assert path.read_bytes() == rig.expected_file()


async def test_disk_full_at_the_first_flush_leaves_no_file_then_materialises(small_fs: Path) -> None:
    root = small_fs / "sessions"
    (root / ".locks").mkdir(parents=True)
    filler = fill(small_fs)
    rig = await disk_rig("jsonl", root, Reply(text="z" * 2000, deltas=2))
    try:
        await rig.turn("one")
        assert isinstance(rig.errors[-1], OSError) and rig.errors[-1].errno == errno.ENOSPC
        assert not list(root.glob("cwd-*/*")), "a failed materialisation left a file"
        filler.unlink()
        await rig.turn("two")
        assert len(rig.errors) == 1
        assert rig.path().read_bytes() == rig.expected_file()
    finally:
        await rig.ctx.dispose()


async def test_sqlite_disk_full_is_rolled_back_then_written_once(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "small", "256k") as small_fs:
        await _sqlite_disk_full(small_fs)


async def _sqlite_disk_full(small_fs: Path) -> None:
    db = small_fs / "db" / "sessions.sqlite3"
    rig = await disk_rig("sqlite", db, Reply(text="w" * 3000, deltas=3))
    try:
        await rig.turn("one")
        session_id = rig.session.id
        assert _rows(db, session_id) == rig.expected_rows()
        durable = _rows(db, session_id)
        filler = fill(small_fs)
        for text in ("two", "three"):
            await rig.turn(text)
            assert isinstance(rig.errors[-1], sqlite3.OperationalError), rig.errors
            assert _rows(db, session_id) == durable
        filler.unlink()
        await rig.turn("four")
        assert len(rig.errors) == 2
        assert _rows(db, session_id) == rig.expected_rows()
    finally:
        await rig.ctx.dispose()
    assert _rows(db, session_id) == rig.expected_rows()


async def test_unwritable_store_folder_then_restored(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    root.mkdir()
    rig = await disk_rig("jsonl", root, Reply(text="p" * 500, deltas=2))
    try:
        with read_only(root) as how:
            await rig.turn("one")
            await rig.turn("two")
            assert len(rig.errors) == 2, how
            assert all(isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EROFS, errno.EPERM) for e in rig.errors)
            assert not list(root.rglob("*.jsonl"))
        await rig.turn("three")
        assert len(rig.errors) == 2
        path = rig.path()
        assert path.read_bytes() == rig.expected_file()
    finally:
        await rig.ctx.dispose()
    assert path.read_bytes() == rig.expected_file()
