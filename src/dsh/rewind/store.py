"""The shadow store: one private git object store per workspace, under ``$DSH_HOME/rewind``.

Owns where a workspace's snapshots live (``$DSH_HOME/rewind/ws-<sha256(path)[:16]>/``: the git
dir ``git/`` with its own index, a ``lock`` file and a ``workspace`` note naming the folder),
taking a snapshot (a git tree of the workspace: ``.gitignore`` honoured, files over the size cap
left out), the refs that keep a session's trees alive (``refs/dsh/s-<sha256(id)[:24]>/<ms>-<tree>``),
reading trees back (entries, blobs, diffs), and removing a session's snapshots or pruning old
ones. Every git call goes through :mod:`dsh.rewind.gitenv`. One process at a time uses a store
(``flock`` on ``lock``), so two sessions in the same folder share its objects safely.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from dsh._clock import now_ms
from dsh._home import dsh_home
from dsh.rewind import DEFAULT_RETENTION_DAYS
from dsh.rewind.gitenv import ATTRIBUTES, GitError, GitRunner, ensure_private, find_git

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_NEW_FILES",
    "DEFAULT_RETENTION_DAYS",
    "Entry",
    "GitError",
    "ShadowStore",
    "Snapshot",
    "rewind_root",
    "session_namespace",
]

DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
# A first snapshot hashes every file (~0.5 ms each here): a home folder of a million files would
# stall the first step for minutes, so more new files than this at once are refused.
DEFAULT_MAX_NEW_FILES = 100_000
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def rewind_root(home: Path | None = None) -> Path:
    return (home or dsh_home()) / "rewind"


def session_namespace(session_id: str) -> str:
    """The ref folder of one session (a hash: session ids may hold any character)."""
    return "s-" + hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:24]


@dataclass(frozen=True)
class Snapshot:
    """A recorded workspace state: its tree id and the files too big to keep (path, bytes)."""

    tree: str
    too_big: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class Entry:
    """One file of a tree: git mode (``100644``, ``100755``, ``120000``, ``160000``) and blob id."""

    mode: str
    oid: str


class ShadowStore:
    """The snapshots of one workspace (see the module docstring)."""

    def __init__(
        self, workspace: str | os.PathLike[str], *, home: Path | None = None,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES, max_new_files: int = DEFAULT_MAX_NEW_FILES,
    ) -> None:
        self.workspace = Path(os.path.realpath(workspace))
        self.root = rewind_root(home)
        digest = hashlib.sha256(os.fsencode(self.workspace)).hexdigest()[:16]
        self.dir = self.root / f"ws-{digest}"
        self.git_dir = self.dir / "git"
        self.max_file_bytes = max_file_bytes
        self.max_new_files = max_new_files
        git = find_git()
        if git is None:
            raise GitError("git is not installed: workspace snapshots need it")
        self.git = GitRunner(git, self.git_dir, self.workspace, self.dir)

    # -- setup and locking -------------------------------------------------------------------

    def exists(self) -> bool:
        return (self.git_dir / "HEAD").is_file()

    def _init(self) -> None:
        if self.exists() and (self.dir / "workspace").is_file():
            return
        ensure_private(self.root)
        ensure_private(self.dir)
        if not self.exists():
            self.git.run(["init", "--quiet"])
            shutil.rmtree(self.git_dir / "hooks", ignore_errors=True)
        info = self.git_dir / "info"
        info.mkdir(exist_ok=True)
        (info / "attributes").write_text(ATTRIBUTES)
        (self.dir / "workspace").write_text(str(self.workspace) + "\n")

    @contextlib.contextmanager
    def locked(self, *, create: bool = True) -> Iterator[None]:
        if create:
            self._init()
        elif not self.exists():
            raise GitError(f"no snapshots are stored for {self.workspace}")
        fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # -- snapshots ---------------------------------------------------------------------------

    def snapshot(self, session_id: str) -> Snapshot:
        """Record the workspace as a tree and keep it under ``session_id``'s refs."""
        if not self.workspace.is_dir():
            raise GitError(f"workspace {self.workspace} is not a folder")
        with self.locked():
            snap = self._write_tree()
            self.keep(session_id, [snap.tree])
            return snap

    def _write_tree(self) -> Snapshot:
        listed = self.git.run(["ls-files", "-z", "--others", "--modified", "--exclude-standard"])
        big: list[tuple[str, int]] = []
        nested: list[bytes] = []
        names = set(listed.split(b"\0"))
        if len(names) > self.max_new_files:
            raise GitError(
                f"{self.workspace} has {len(names)} new or changed files, more than maxFiles "
                f"({self.max_new_files}); not snapshotted"
            )
        for raw in names:
            if not raw:
                continue
            if raw.endswith(b"/"):  # a folder with its own .git: another repository, not ours
                nested.append(raw.rstrip(b"/"))
                continue
            try:
                st = os.lstat(self.workspace / os.fsdecode(raw))
            except OSError:
                continue  # deleted since
            if st.st_size > self.max_file_bytes and not os.path.islink(self.workspace / os.fsdecode(raw)):
                big.append((os.fsdecode(raw), st.st_size))
        big.sort()
        specs = [b"."]
        if big:
            literal = b"\0".join(b":(literal)" + os.fsencode(p) for p, _ in big)
            self.git.run(
                ["rm", "--cached", "-q", "--ignore-unmatch", "--pathspec-from-file=-", "--pathspec-file-nul"],
                stdin=literal,
            )
            specs += [b":(exclude,literal)" + os.fsencode(p) for p, _ in big]
        specs += [b":(exclude,literal)" + p for p in sorted(nested)]
        self.git.run(
            ["add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul"], stdin=b"\0".join(specs)
        )
        tree = self.git.run(["write-tree"]).decode().strip()
        return Snapshot(tree, big)

    def keep(self, session_id: str, trees: Iterable[str]) -> None:
        """Refs so ``trees`` survive pruning as long as ``session_id``'s snapshots do."""
        ns = session_namespace(session_id)
        stamp = now_ms()
        lines = "".join(f"update refs/dsh/{ns}/{stamp}-{tree} {tree}\n" for tree in dict.fromkeys(trees))
        if lines:
            self.git.run(["update-ref", "--stdin"], stdin=lines.encode())

    def has(self, tree: str) -> bool:
        if not self.exists():
            return False
        out = self.git.run(["cat-file", "-t", tree], check=False)
        return out.strip() == b"tree"

    # -- reading -----------------------------------------------------------------------------

    def entries(self, tree: str) -> dict[str, Entry]:
        out = self.git.run(["ls-tree", "-r", "-z", "--full-tree", tree])
        entries: dict[str, Entry] = {}
        for item in out.split(b"\0"):
            if not item:
                continue
            meta, _, path = item.partition(b"\t")
            mode, _kind, oid = meta.decode().split(" ")
            entries[os.fsdecode(path)] = Entry(mode, oid)
        return entries

    def changed_paths(self, a: str, b: str) -> set[str]:
        out = self.git.run(["diff-tree", "-r", "-z", "--no-renames", "--name-only", a, b])
        return {os.fsdecode(p) for p in out.split(b"\0") if p}

    def diff(self, a: str, b: str) -> bytes:
        """A unified diff from tree ``a`` to tree ``b`` (renames found, binary files named)."""
        return self.git.run(
            ["diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M", "--src-prefix=a/",
             "--dst-prefix=b/", a, b]
        )

    def numstat(self, a: str, b: str) -> tuple[int, int, int]:
        """``(files, added lines, deleted lines)`` from ``a`` to ``b``."""
        out = self.git.run(["diff", "--numstat", "-z", "--no-ext-diff", "--no-textconv", "-M", a, b])
        files = added = deleted = 0
        parts = out.split(b"\0")
        i = 0
        while i < len(parts):
            item = parts[i]
            i += 1
            if not item:
                continue
            fields = item.split(b"\t")
            files += 1
            if fields[0] != b"-":
                added += int(fields[0])
                deleted += int(fields[1])
            if len(fields) >= 3 and fields[2] == b"":
                i += 2  # a rename: the old and new paths follow as their own fields
        return files, added, deleted

    def blobs(self, oids: list[str]) -> dict[str, bytes]:
        """The contents of ``oids``, read through one ``cat-file --batch``."""
        if not oids:
            return {}
        proc = self.git.popen(["cat-file", "--batch"])
        assert proc.stdin is not None and proc.stdout is not None
        out: dict[str, bytes] = {}
        try:
            for oid in dict.fromkeys(oids):
                proc.stdin.write(oid.encode() + b"\n")
                proc.stdin.flush()
                header = proc.stdout.readline().split()
                if len(header) != 3:
                    raise GitError(f"snapshot object {oid} is missing from the store")
                size = int(header[2])
                out[oid] = proc.stdout.read(size)
                proc.stdout.read(1)
        finally:
            proc.stdin.close()
            proc.wait()
        return out

    # -- removal -----------------------------------------------------------------------------

    def refs(self) -> list[str]:
        if not self.exists():
            return []
        out = self.git.run(["for-each-ref", "--format=%(refname)", "refs/dsh/"])
        return [line for line in out.decode().splitlines() if line]

    def drop(self, refs: Iterable[str]) -> int:
        """Delete ``refs`` and the objects only they kept; remove the store when none is left."""
        doomed = list(refs)
        if doomed:
            self.git.run(["update-ref", "--stdin"], stdin="".join(f"delete {r}\n" for r in doomed).encode())
        if not self.refs():
            shutil.rmtree(self.dir, ignore_errors=True)
            return len(doomed)
        if doomed:
            self.git.run(["prune", "--expire=now"])
            self.git.run(["pack-refs", "--all", "--prune"])
        return len(doomed)

    def delete_session(self, session_id: str) -> int:
        """Remove every snapshot ref of ``session_id``; the number removed."""
        if not self.exists():
            return 0
        prefix = f"refs/dsh/{session_namespace(session_id)}/"
        with self.locked(create=False):
            return self.drop(r for r in self.refs() if r.startswith(prefix))


def stores(home: Path | None = None) -> list[ShadowStore]:
    """Every workspace store under ``$DSH_HOME/rewind``."""
    root = rewind_root(home)
    found: list[ShadowStore] = []
    if not root.is_dir():
        return found
    for child in sorted(root.iterdir()):
        note = child / "workspace"
        if child.name.startswith("ws-") and note.is_file():
            store = ShadowStore(note.read_text().rstrip("\n"), home=home)
            if store.dir == child:
                found.append(store)
    return found


def ref_time(ref: str) -> int | None:
    leaf = ref.rsplit("/", 1)[-1]
    stamp = leaf.split("-", 1)[0]
    return int(stamp) if stamp.isdigit() else None
