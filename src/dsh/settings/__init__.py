"""Settings files: dsh's own (``$DSH_HOME/settings.json``, ``.dsh/settings.json``,
``.dsh/settings.local.json``) and Claude Code's (``~/.claude/settings.json``,
``.claude/settings.json``, ``.claude/settings.local.json``), read bounded and typed, project files
in force only once trusted. See ``README.md`` in this folder."""

# The sections dsh reads register here, before any file is read: a project file is judged by
# every section it has (a section plugs in by adding its module and importing it here).
from dsh.settings import hooks as _hooks  # noqa: F401
from dsh.settings import permissions as _permissions  # noqa: F401
from dsh.settings.files import (
    KIND,
    PROJECT_FILES,
    LoadedFile,
    SectionValue,
    Settings,
    claude_user_folder,
    load_settings,
)
from dsh.settings.sections import Section, register_section, sections

__all__ = [
    "KIND",
    "PROJECT_FILES",
    "LoadedFile",
    "Section",
    "SectionValue",
    "Settings",
    "claude_user_folder",
    "load_settings",
    "register_section",
    "sections",
]
