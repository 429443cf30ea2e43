"""The environment of the commands the model runs (``bash``, background jobs): dsh's own minus
its secrets, plus what the config sets and the managed ``$DSH_*`` values.

Why: the model reads whatever a command prints (``env | grep KEY``), and what it reads lands in
the log and in the next request. So by default a command gets no variable whose name matches
:data:`SECRET_PATTERNS` (case-insensitive), none of the registered credential variables (the
model providers' keys, see :mod:`dsh._secrets`), and no variable whose value equals one of those
keys. The ``shellEnvironment`` config (after Codex's ``shell_environment_policy``) passes chosen
names through again (``passthrough``: names or globs) and sets fixed values (``set``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Final

import msgspec

from dsh._secrets import secret_env_names

__all__ = ["SECRET_PATTERNS", "ShellEnvironment", "is_secret_name", "shell_environment"]

SECRET_PATTERNS: Final = (
    "*KEY*", "*SECRET*", "*TOKEN*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*", "*DATABASE_URL*",
)


class ShellEnvironment(msgspec.Struct, forbid_unknown_fields=True):
    """``shellEnvironment`` in the ``workspace-tools`` config."""

    passthrough: list[str] = msgspec.field(default_factory=list)
    set: dict[str, str] = msgspec.field(default_factory=dict)


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return name in secret_env_names() or any(fnmatchcase(upper, pattern) for pattern in SECRET_PATTERNS)


def shell_environment(policy: ShellEnvironment, source: Mapping[str, str] | None = None) -> dict[str, str]:
    """``source`` (default: ``os.environ``) without secrets and stale ``DSH_*``, the
    ``passthrough`` names kept, then ``set`` applied."""
    env = dict(os.environ if source is None else source)
    keys = {env[name] for name in secret_env_names() if env.get(name)}

    def passed(name: str) -> bool:
        return any(fnmatchcase(name, pattern) for pattern in policy.passthrough)

    out = {
        name: value
        for name, value in env.items()
        if not name.startswith("DSH_")
        and (passed(name) or not (is_secret_name(name) or (value and value in keys)))
    }
    out.update(policy.set)
    return out
