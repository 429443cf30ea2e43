"""Where a user's dsh data lives: ``$DSH_HOME`` and the default sessions folder.

``DSH_HOME`` wins when set; otherwise it is ``dsh`` under the XDG data directory
(``${XDG_DATA_HOME:-~/.local/share}/dsh``). Sessions default to ``$DSH_HOME/sessions``, still
grouped by cwd (format v0), so ``dsh sessions list`` and ``--continue`` find a folder's sessions
from anywhere. Also owns resolving the relative paths of a config file against its folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dsh._home import dsh_home


def default_root() -> Path:
    """The default JSONL sessions folder: ``$DSH_HOME/sessions``."""
    return dsh_home() / "sessions"


# The config keys that name files or folders, per plugin name (short and module names).
PATH_KEYS: Mapping[str, tuple[str, ...]] = {
    "stdio-app": ("persistenceRoot", "sqlitePath", "historyFile"),
    "dsh.apps.stdio": ("persistenceRoot", "sqlitePath", "historyFile"),
    "jsonl-sessions": ("root",),
    "dsh.persistence.jsonl": ("root",),
    "sqlite-sessions": ("path",),
    "dsh.persistence.sqlite": ("path",),
}


def resolve_config_paths(name: str, config: Mapping[str, Any] | None, base: Path) -> dict[str, Any] | None:
    """``config`` with every relative path key resolved against ``base`` (the config's folder),
    as ``.py`` plugin names are; ``~`` is expanded. Other keys are unchanged."""
    if config is None:
        return None
    keys = PATH_KEYS.get(name, ())
    out = dict(config)
    for key in keys:
        value = out.get(key)
        if isinstance(value, str) and value:
            path = Path(value).expanduser()
            out[key] = str(path if path.is_absolute() else (base / path).resolve())
    return out
