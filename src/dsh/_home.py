"""The user's dsh home folder, the one rule every part of dsh uses to find it.

``$DSH_HOME`` when set; otherwise ``dsh`` under the XDG data directory
(``${XDG_DATA_HOME:-~/.local/share}/dsh``; a relative ``XDG_DATA_HOME`` is invalid per the XDG
spec and ignored).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["dsh_home"]


def dsh_home(environ: Mapping[str, str] | None = None) -> Path:
    """``$DSH_HOME``, else ``$XDG_DATA_HOME/dsh``, else ``~/.local/share/dsh``."""
    env = os.environ if environ is None else environ
    explicit = env.get("DSH_HOME")
    if explicit:
        return Path(explicit).expanduser()
    data = env.get("XDG_DATA_HOME")
    base = Path(data) if data and os.path.isabs(data) else Path.home() / ".local" / "share"
    return base / "dsh"
