"""MCP server configuration: the plugin's YAML config, :class:`ServerSpec`, ``${VAR}``.

This module owns turning a ``mcp`` plugin entry into :class:`ServerSpec` values: one server
(``serverName``, ``command``/``url`` ...), or ``discover: true``, whose files (the project's
``.mcp.json`` and ``mcp.json`` in the dsh home) :mod:`.mcp_json` reads.

``${VAR}`` (and ``${VAR:-default}``) in ``env``, ``headers``, ``args``, ``url`` and ``cwd`` are
expanded from the process environment (for a project file, only once the user trusts it).
Values expanded into ``env``, ``headers`` and ``url`` (where tokens go) are kept in
:class:`Secrets` so that every message this package writes can be scrubbed of them; ``args`` and
``cwd`` usually carry paths such as ``${HOME}``, which would only garble messages. An error
names the variable, never its value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from dsh._home import dsh_home
from dsh.plugins.mcp.naming import valid_server_name
from dsh.runtime.config import ConfigError

__all__ = [
    "DEFAULT_CALL_TIMEOUT_MS",
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_STARTUP_TIMEOUT_MS",
    "Config",
    "Secrets",
    "ServerSpec",
    "Transport",
    "dsh_home",
    "expand",
    "expand_map",
    "spec_from_config",
    "transport_of",
]

DEFAULT_CALL_TIMEOUT_MS = 60_000
DEFAULT_STARTUP_TIMEOUT_MS = 30_000
DEFAULT_MAX_RESULT_BYTES = 30_000

Transport = Literal["stdio", "streamable-http"]
Approval = Literal["ask", "trusted"]

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class Secrets:
    """Every value expanded from the environment, to scrub from messages before they are shown.

    Shared by all servers of a process; only non-trivial values (4 characters or more) are
    scrubbed, since replacing ``1`` everywhere would garble messages without protecting much.
    """

    def __init__(self) -> None:
        self._values: set[str] = set()

    def add(self, value: str) -> None:
        if len(value) >= 4:
            self._values.add(value)

    def scrub(self, text: str) -> str:
        for value in sorted(self._values, key=len, reverse=True):
            text = text.replace(value, "***")
        return text


SECRETS = Secrets()


@dataclass(frozen=True)
class ServerSpec:
    """One MCP server, fully resolved. ``source`` names where it was configured."""

    name: str
    transport: Transport
    source: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    approval: Approval = "ask"
    call_timeout_ms: int = DEFAULT_CALL_TIMEOUT_MS
    startup_timeout_ms: int = DEFAULT_STARTUP_TIMEOUT_MS
    fail_on_startup_error: bool = False
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES

    @property
    def needs_approval(self) -> bool:
        return self.approval != "trusted"

    def target(self) -> str:
        """A printable description of what is started or reached (secrets scrubbed)."""
        if self.transport == "stdio":
            return SECRETS.scrub(" ".join([self.command or "", *self.args]).strip())
        return SECRETS.scrub(self.url or "")


class Config(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """A ``mcp`` plugin entry: one server, or ``discover: true`` for the ``.mcp.json`` files."""

    server_name: str | None = None
    transport: Transport | None = None
    command: str | None = None
    args: list[str] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    approval: Approval = "ask"
    tool_call_timeout_ms: int = DEFAULT_CALL_TIMEOUT_MS
    startup_timeout_ms: int = DEFAULT_STARTUP_TIMEOUT_MS
    fail_on_startup_error: bool = False
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    # Discovery mode: read the project and user ``.mcp.json`` files.
    discover: bool = False
    project_file: str | None = None
    user_file: str | None = None

    def __post_init__(self) -> None:
        if self.discover:
            if self.server_name is not None or self.command is not None or self.url is not None:
                raise ValueError("mcp: discover cannot be combined with serverName/command/url")
            return
        if self.server_name is None:
            raise ValueError('mcp: "serverName" is required (or "discover: true")')
        if not valid_server_name(self.server_name):
            raise ValueError(
                f'mcp: serverName "{self.server_name}" must match [A-Za-z0-9_-]{{1,32}}'
            )
        for key, value in (
            ("toolCallTimeoutMs", self.tool_call_timeout_ms),
            ("startupTimeoutMs", self.startup_timeout_ms),
            ("maxResultBytes", self.max_result_bytes),
        ):
            if value <= 0:
                raise ValueError(f"mcp: {key} must be a positive integer, got {value}")


def expand(value: str, where: str, environ: Mapping[str, str], *, secret: bool = False) -> str:
    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = environ.get(name)
        if found is None or (found == "" and default is not None):
            if default is None:
                raise ConfigError(f"{where}: environment variable {name} is not set")
            return default
        if secret:
            SECRETS.add(found)
        return found

    return _VAR.sub(one, value)


def expand_map(values: Mapping[str, str], where: str, environ: Mapping[str, str]) -> dict[str, str]:
    return {k: expand(v, f"{where}.{k}", environ, secret=True) for k, v in values.items()}


def transport_of(declared: str | None, command: str | None, url: str | None, where: str) -> Transport:
    if declared in ("http", "streamable-http", "streamable_http", "streamableHttp"):
        declared = "streamable-http"
    if declared not in (None, "stdio", "streamable-http"):
        raise ConfigError(f'{where}: unsupported transport "{declared}" (stdio or streamable-http)')
    if declared is None:
        if command and url:
            raise ConfigError(f"{where}: give either command (stdio) or url (streamable-http), not both")
        declared = "stdio" if command else "streamable-http" if url else None
    if declared == "stdio" and not command:
        raise ConfigError(f'{where}: a stdio server needs "command"')
    if declared == "streamable-http" and not url:
        raise ConfigError(f'{where}: a streamable-http server needs "url"')
    if declared is None:
        raise ConfigError(f'{where}: needs "command" (stdio) or "url" (streamable-http)')
    return "stdio" if declared == "stdio" else "streamable-http"


def spec_from_config(
    config: Config, *, source: str, base_dir: Path | None = None, environ: Mapping[str, str] | None = None
) -> ServerSpec:
    """The server a single-server plugin entry describes."""
    env = os.environ if environ is None else environ
    assert config.server_name is not None
    where = f'mcp server "{config.server_name}"'
    transport = transport_of(config.transport, config.command, config.url, where)
    cwd = expand(config.cwd, f"{where}: cwd", env) if config.cwd else None
    if cwd is not None and base_dir is not None:
        cwd = str((base_dir / Path(cwd).expanduser()).resolve())
    return ServerSpec(
        name=config.server_name,
        transport=transport,
        source=source,
        command=config.command,
        args=tuple(expand(a, f"{where}: args", env) for a in config.args),
        env=expand_map(config.env, f"{where}: env", env),
        cwd=cwd,
        url=expand(config.url, f"{where}: url", env, secret=True) if config.url else None,
        headers=expand_map(config.headers, f"{where}: headers", env),
        approval=config.approval,
        call_timeout_ms=config.tool_call_timeout_ms,
        startup_timeout_ms=config.startup_timeout_ms,
        fail_on_startup_error=config.fail_on_startup_error,
        max_result_bytes=config.max_result_bytes,
    )
