"""Running git on the shadow store so that nothing in the workspace can make it run code.

Owns the one way dsh invokes git for snapshots: a scrubbed environment (no inherited ``GIT_*``
variable, ``GIT_CONFIG_NOSYSTEM=1``, ``GIT_CONFIG_GLOBAL=/dev/null``, ``HOME`` and
``XDG_CONFIG_HOME`` inside the store, a fixed ``PATH``), the shadow ``--git-dir`` with its own
index and the workspace as ``--work-tree``, and ``-c`` overrides for every setting that could
start a program or change bytes (hooks, fsmonitor, pager, external diff, CRLF conversion).

Why the workspace cannot reach git's configuration: the user's ``.git`` is never the git dir,
so its ``config``, hooks and ``info/`` are never read. In-tree ``.gitattributes`` can only *name*
a filter or diff driver, which runs only when configuration defines it; the shadow store's
``info/attributes`` (which takes precedence over every ``.gitattributes``) also unsets ``filter``,
``text``, ``eol``, ``ident`` and ``working-tree-encoding`` (and resets ``diff``), so a snapshot stores the
bytes on disk, exactly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ATTRIBUTES", "GitError", "GitRunner", "ensure_private", "find_git"]

# Highest-precedence attributes: no conversion, no driver, whatever the workspace declares.
ATTRIBUTES = "* -text -eol -ident -filter -working-tree-encoding !diff !merge -export-subst\n"

# Settings that could run a program or alter content, pinned on every call (they win over the
# store's own config file too).
_OVERRIDES = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=true",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.symlinks=true",
    "core.fileMode=true",
    "core.ignoreCase=false",
    "core.precomposeUnicode=false",
    "core.protectNTFS=true",
    "core.quotePath=false",
    "core.pager=cat",
    "core.attributesFile=/dev/null",
    "core.excludesFile=/dev/null",
    "core.askPass=",
    "core.sshCommand=false",
    "core.preloadIndex=true",
    "core.sparseCheckout=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
    "commit.gpgSign=false",
    "diff.external=",
    "diff.noprefix=false",
    "protocol.allow=never",
    "submodule.recurse=false",
    "index.version=4",
    "init.defaultBranch=dsh",
)
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


class GitError(RuntimeError):
    """A git command failed; ``str()`` is one line with its stderr."""


def find_git() -> str | None:
    """The git executable, looked up on the fixed PATH first (not the workspace's)."""
    return shutil.which("git", path=_SAFE_PATH) or shutil.which("git")


class GitRunner:
    """git with the shadow ``git_dir``/``index`` and ``work_tree`` (see the module docstring)."""

    def __init__(self, git: str, git_dir: Path, work_tree: Path, home: Path) -> None:
        self.git = git
        self.git_dir = git_dir
        self.work_tree = work_tree
        self.env = {
            "PATH": _SAFE_PATH,
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / "xdg"),
            "LC_ALL": "C",
            "LANG": "C",
            "GIT_DIR": str(git_dir),
            "GIT_WORK_TREE": str(work_tree),
            "GIT_INDEX_FILE": str(git_dir / "index"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_PAGER": "cat",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_AUTHOR_NAME": "dsh",
            "GIT_AUTHOR_EMAIL": "dsh@localhost",
            "GIT_COMMITTER_NAME": "dsh",
            "GIT_COMMITTER_EMAIL": "dsh@localhost",
        }

    def args(self, argv: Sequence[str]) -> list[str]:
        head = [self.git, "--no-pager", "--no-replace-objects"]
        for item in _OVERRIDES:
            head += ["-c", item]
        return [*head, *argv]

    def run(self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True) -> bytes:
        """Run ``git argv`` in the work tree; stdout as bytes."""
        cwd = self.work_tree if self.work_tree.is_dir() else self.git_dir
        try:
            done = subprocess.run(
                self.args(argv), input=stdin, capture_output=True, cwd=cwd, env=self.env, check=False
            )
        except OSError as exc:
            raise GitError(f"cannot run git: {exc.strerror or exc}") from None
        if check and done.returncode != 0:
            err = " ".join(done.stderr.decode(errors="replace").split())
            raise GitError(f"git {argv[0]} failed ({done.returncode}): {err[:400]}")
        return done.stdout

    def popen(self, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """A long-lived git (``cat-file --batch``) with pipes."""
        return subprocess.Popen(
            self.args(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=self.git_dir, env=self.env,
        )


def ensure_private(path: Path) -> None:
    """``path`` as a folder only this user can enter."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
