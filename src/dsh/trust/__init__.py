"""Trust in project files: the one gate every project file that can make dsh run something
passes before dsh acts on it (today ``.mcp.json``; the design takes settings, hooks and agent
files as further kinds). See ``README.md`` in this folder."""

from dsh.trust.gate import (
    ProjectFile,
    Status,
    admit,
    check,
    decline,
    project_files,
    read_project_file,
    revoke,
    trust,
    untrusted_line,
)
from dsh.trust.kinds import Command, FileKind, kinds, register_kind
from dsh.trust.store import Record, TrustFileError, TrustStore, trust_path

__all__ = [
    "Command",
    "FileKind",
    "ProjectFile",
    "Record",
    "Status",
    "TrustFileError",
    "TrustStore",
    "admit",
    "check",
    "decline",
    "kinds",
    "project_files",
    "read_project_file",
    "register_kind",
    "revoke",
    "trust",
    "trust_path",
    "untrusted_line",
]
