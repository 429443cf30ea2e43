"""Driving the real ``dsh run`` with a scripted model on loopback that attacks through the
workspace tools, as root (as CI runs) or as a plain local user (``setpriv``).

:func:`attack` pushes one tool call per step, then a final reply, runs ``dsh run`` in ``cwd`` and
returns what the model saw (each tool result's text, from the last request it was sent) with
the session log's text. :func:`plain_user` makes (once) the unprivileged user the ``as_user``
runs use, or skips with the reason when this machine cannot.
"""

from __future__ import annotations

import atexit
import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.llm.sse_server import Reply, SSEServer, chunk
from tests.reliability.support import REPO, dsh_env

USER = "dshsbx"
NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


@dataclass(repr=False)
class Attack:
    result: subprocess.CompletedProcess[str]
    texts: list[str]
    log: str
    home: Path

    def __repr__(self) -> str:
        return f"rc={self.result.returncode}\nstderr={self.result.stderr}\ntexts={self.texts}"


def tool_call(n: int, name: str, args: dict[str, Any]) -> Reply:
    call = {"index": 0, "id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    return Reply.sse([chunk(tool_calls=[call]), chunk(finish="tool_calls")])


def bash(command: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    return ("bash", {"command": command, "description": "attack", **extra})


def plain_user() -> pwd.struct_passwd:
    """The unprivileged test user (created when missing), or a skip saying why not."""
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: the plain-user variant needs root to switch user")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        made = subprocess.run(["useradd", "-m", USER], capture_output=True, text=True, check=False)
        if made.returncode != 0 and "already exists" not in made.stderr:
            pytest.skip(f"cannot create a plain user here: {made.stderr.strip()}")
        return pwd.getpwnam(USER)


def user_folder(user: pwd.struct_passwd, name: str) -> Path:
    """A fresh folder owned by ``user`` (outside root's private pytest folder)."""
    path = Path(tempfile.mkdtemp(prefix=f"dsh-{name}-", dir="/var/tmp"))
    os.chown(path, user.pw_uid, user.pw_gid)
    return path


_IMPORT_PATHS: dict[int, str] = {}


def _readable_by(user: pwd.struct_passwd, python: str, path: str) -> bool:
    probe = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", python, "-c",
             "import os, sys; sys.exit(0 if os.access(sys.argv[1], os.R_OK | os.X_OK) else 1)", path]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def _user_view(source: Path, into: Path) -> None:
    """``source`` again under ``into``, files hard-linked (copied across file systems), folders
    made 0755, so the plain user can read what root's private checkout holds."""
    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, into, copy_function=link, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for folder, _, _ in os.walk(into):
        os.chmod(folder, 0o755)


def _import_path(user: pwd.struct_passwd, python: str) -> str:
    """``PYTHONPATH`` for ``user``: this checkout's ``src`` and the environment's packages, as
    they are when the user can read them, else a world-readable view of them (made once per
    process). CI clones into folders of its choosing, which may be private to root (0700)."""
    if user.pw_uid in _IMPORT_PATHS:
        return _IMPORT_PATHS[user.pw_uid]
    paths = [str(REPO / "src"), sysconfig.get_paths()["purelib"]]
    if not all(_readable_by(user, python, p) for p in paths):
        base = Path(tempfile.mkdtemp(prefix="dsh-user-view-", dir="/var/tmp"))
        atexit.register(shutil.rmtree, base, True)
        os.chmod(base, 0o755)
        viewed = []
        for n, path in enumerate(paths):
            _user_view(Path(path), base / str(n))
            viewed.append(str(base / str(n)))
        paths = viewed
    _IMPORT_PATHS[user.pw_uid] = os.pathsep.join(paths)
    return _IMPORT_PATHS[user.pw_uid]


def _user_command(user: pwd.struct_passwd, home: Path) -> tuple[list[str], dict[str, str]]:
    """``python -m dsh`` as ``user``: the interpreter must be one the user can run (root's
    pyenv is private), with this checkout and its virtualenv's packages on the path."""
    python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.access(python, os.X_OK):
        pytest.skip(f"no system {python} for the plain user to run dsh with")
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": user.pw_dir, "USER": user.pw_name,
        "LANG": "C.UTF-8", "DSH_HOME": str(home), "PYTHONPATH": _import_path(user, python),
        "PYTHONDONTWRITEBYTECODE": "1", "TZ": "Asia/Shanghai", "PYTHONUNBUFFERED": "1", **NO_PROXY,
    }
    argv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", python, "-m", "dsh"]
    return argv, env


def attack(
    cwd: Path,
    steps: list[tuple[str, dict[str, Any]]],
    *,
    args: list[str] | None = None,
    config: str | None = None,
    user: pwd.struct_passwd | None = None,
    timeout: float = 120,
    **env: str,
) -> Attack:
    """Run the scripted attack through ``dsh run``. ``config`` is a YAML composition whose
    ``{base_url}`` is filled in (it then replaces ``--base-url``/``--model``)."""
    with SSEServer() as server:
        for n, step in enumerate(steps, 1):
            server.push(tool_call(n, *step))
        server.push(Reply.sse([chunk(content="done."), chunk(finish="stop")]))
        cli = ["run", "go", *(args or [])]
        if config is not None:
            path = cwd.parent / f"{cwd.name}-dsh.yaml"
            path.write_text(config.replace("{base_url}", server.base_url))
            cli += ["--config", str(path)]
        else:
            cli += ["--base-url", server.base_url, "--model", "test-model"]
        if user is None:
            home = Path(os.environ["DSH_HOME"])
            argv, full_env = [sys.executable, "-m", "dsh"], dsh_env(**NO_PROXY, **env)
        else:
            home = user_folder(user, "home")
            argv, full_env = _user_command(user, home)
            full_env.update(env)
        result = subprocess.run(
            [*argv, *cli], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout, check=False
        )
        requests = [r.json for r in server.requests]
    texts = [m["content"] for m in requests[-1]["messages"] if m["role"] == "tool"] if requests else []
    logs = [p for p in (home / "sessions").rglob("*.jsonl")] if user is not None else []
    if user is None:
        from tests.apps.conftest import session_files

        logs = session_files(cwd)
    log = "\n".join(p.read_text() for p in logs)
    if user is not None:
        shutil.rmtree(home, ignore_errors=True)
    return Attack(result, texts, log, home)
