"""Which folder a session may work in: the one the person chose, never one a log names.

The workspace tools act on the session header's ``cwd``, so whoever writes that header chooses
where the model can write. A header can come from anywhere (``dsh sessions import`` of a file
someone sent, a session created elsewhere), so the apps decide the workspace, not the log:

- ``dsh chat`` / ``dsh run``: the folder dsh was started in, or the one named with
  ``-C``/``--cd DIR``. A resumed session whose recorded ``cwd`` is another folder is refused
  (:func:`check_resumed`), naming both folders and the ``--cd`` that accepts it.
- ``dsh acp``: the ``cwd`` the client passes; ``session/load`` of a session recorded elsewhere
  is refused the same way.
- ``dsh reminders run`` has no folder of its own: it works in each session's recorded folder,
  but only one that is an acceptable workspace and exists.

Never a workspace, whoever chooses it (:func:`refusal`): the root folder, the home folder itself
and its ancestors (``/home``), and system folders: ``/etc``, ``/usr``, ``/bin``, ``/sbin``,
``/lib*``, ``/boot``, ``/dev``, ``/proc``, ``/sys``, ``/run``, ``/var/run``, ``/var/lib``,
``/var/log``, ``/var/cache``, ``/var/spool`` and everything inside them; ``/var``, ``/tmp``,
``/var/tmp``, ``/opt``, ``/srv``, ``/mnt``, ``/media`` and ``/root`` themselves (a folder inside
them is fine). Paths are compared after resolving symlinks.
"""

from __future__ import annotations

import os
from typing import Final

from dsh.apps.escape import escape_controls
from dsh.errors import UsageError

__all__ = ["WorkspaceRefused", "check_new", "check_resumed", "refusal"]

_TREES: Final = (
    "/etc", "/usr", "/bin", "/sbin", "/boot", "/dev", "/proc", "/sys", "/run",
    "/var/run", "/var/lib", "/var/log", "/var/cache", "/var/spool",
)
_ONLY_ITSELF: Final = frozenset({"/var", "/tmp", "/var/tmp", "/opt", "/srv", "/mnt", "/media", "/root", "/home"})


class WorkspaceRefused(UsageError):
    """A folder that cannot be this session's workspace (a usage error: exit 2, one line)."""


def _real(path: str) -> str:
    return os.path.realpath(path)


def _inside(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree + "/")


def refusal(folder: str) -> str | None:
    """Why ``folder`` can never be a workspace, or ``None`` when it can."""
    path = _real(folder)
    home = _real(os.path.expanduser("~"))
    if path == "/":
        return "the root folder"
    if path == home:
        return "your home folder itself"
    if home.startswith(path + "/"):
        return "a folder that holds your home folder"
    first = path.split("/")[1]
    if first.startswith("lib") or any(_inside(path, tree) for tree in _TREES) or path in _ONLY_ITSELF:
        return "a system folder"
    return None


def _shown(folder: str) -> str:
    return escape_controls(folder)


def check_new(folder: str) -> None:
    """A new session in ``folder``: refused when it can never be a workspace."""
    why = refusal(folder)
    if why is not None:
        raise WorkspaceRefused(
            f"{_shown(folder)} cannot be a workspace ({why}); "
            "start dsh in a project folder, or name one with --cd DIR"
        )


def check_resumed(session_id: str, recorded: object, chosen: str, *, flag: str | None = "--cd") -> None:
    """A stored session resumed where the person chose ``chosen``: its recorded ``cwd`` must be
    an acceptable workspace and the same folder. ``flag`` is how to accept the recorded folder
    (``None`` for ACP, whose client names the folder)."""
    sid = _shown(session_id)
    if recorded is None or recorded == "":
        check_new(chosen)  # no folder recorded: the tools work in the chosen one
        return
    if not isinstance(recorded, str):
        raise WorkspaceRefused(f'session "{sid}" records a folder that is not a path; it is not resumed')
    why = refusal(recorded)
    if why is not None:
        raise WorkspaceRefused(
            f'session "{sid}" was recorded in {_shown(recorded)}, which cannot be a workspace ({why}); it is not resumed'
        )
    if _real(recorded) == _real(chosen):
        return
    accept = f"pass {flag} {_shown(recorded)} to work there" if flag else f"open it with cwd {_shown(recorded)}"
    raise WorkspaceRefused(
        f'session "{sid}" was recorded in {_shown(recorded)}, not in {_shown(chosen)} (the chosen workspace); {accept}'
    )
