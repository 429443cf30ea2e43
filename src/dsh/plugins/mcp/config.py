"""MCP server configuration: the plugin's YAML config, ``.mcp.json`` discovery, ``${VAR}``.

This module owns turning what users write into :class:`ServerSpec` values, and nothing else: a
``mcp`` plugin entry describes one server (``serverName``, ``command``/``url`` ...) or asks for
discovery (``discover: true``), which reads the common ``{"mcpServers": {...}}`` shape from the
project's ``.mcp.json`` (the working directory) and from ``mcp.json`` in the dsh home
(``$DSH_HOME``, else ``$XDG_DATA_HOME/dsh``, else ``~/.local/share/dsh``). A project server
shadows a user-level server of the same name.

``${VAR}`` (and ``${VAR:-default}``) in ``env``, ``headers``, ``args``, ``url`` and ``cwd`` are
expanded at load from the process environment. Values expanded into ``env``, ``headers`` and
``url`` (where tokens go) are kept in :class:`Secrets` so that every message this package writes
can be scrubbed of them; ``args`` and ``cwd`` usually carry paths such as ``${HOME}``, which
would only garble messages. An error names the variable, never its value.
"""

from __future__ import annotations

import json
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
    "DEFAULT_STARTUP_TIMEOUT_MS",
    "Config",
    "Secrets",
    "ServerSpec",
    "discover",
    "dsh_home",
    "load_mcp_json",
    "spec_from_config",
]

DEFAULT_CALL_TIMEOUT_MS = 60_000
DEFAULT_STARTUP_TIMEOUT_MS = 30_000
PROJECT_FILE = ".mcp.json"
USER_FILE = "mcp.json"

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
        ):
            if value <= 0:
                raise ValueError(f"mcp: {key} must be a positive integer, got {value}")


def _expand(value: str, where: str, environ: Mapping[str, str], *, secret: bool = False) -> str:
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


def _expand_map(values: Mapping[str, str], where: str, environ: Mapping[str, str]) -> dict[str, str]:
    return {k: _expand(v, f"{where}.{k}", environ, secret=True) for k, v in values.items()}


def _transport(declared: str | None, command: str | None, url: str | None, where: str) -> Transport:
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
    transport = _transport(config.transport, config.command, config.url, where)
    cwd = _expand(config.cwd, f"{where}: cwd", env) if config.cwd else None
    if cwd is not None and base_dir is not None:
        cwd = str((base_dir / Path(cwd).expanduser()).resolve())
    return ServerSpec(
        name=config.server_name,
        transport=transport,
        source=source,
        command=config.command,
        args=tuple(_expand(a, f"{where}: args", env) for a in config.args),
        env=_expand_map(config.env, f"{where}: env", env),
        cwd=cwd,
        url=_expand(config.url, f"{where}: url", env, secret=True) if config.url else None,
        headers=_expand_map(config.headers, f"{where}: headers", env),
        approval=config.approval,
        call_timeout_ms=config.tool_call_timeout_ms,
        startup_timeout_ms=config.startup_timeout_ms,
        fail_on_startup_error=config.fail_on_startup_error,
    )


def _str_map(value: object, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where}: expected an object of strings")
    return {str(k): v for k, v in value.items()}


def _entry(name: str, raw: object, path: Path, environ: Mapping[str, str]) -> ServerSpec:
    where = f'{path}: server "{name}"'
    if not valid_server_name(name):
        raise ConfigError(f"{where}: the name must match [A-Za-z0-9_-]{{1,32}}")
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected an object")
    args = raw.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}: args must be a list of strings")
    command, url, cwd = raw.get("command"), raw.get("url"), raw.get("cwd")
    for key, value in (("command", command), ("url", url), ("cwd", cwd)):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{where}: {key} must be a string")
    declared = raw.get("type", raw.get("transport"))
    if declared is not None and not isinstance(declared, str):
        raise ConfigError(f"{where}: type must be a string")
    approval = raw.get("approval", "ask")
    if approval not in ("ask", "trusted"):
        raise ConfigError(f'{where}: approval must be "ask" or "trusted"')
    timeout = raw.get("toolCallTimeoutMs", DEFAULT_CALL_TIMEOUT_MS)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
        raise ConfigError(f"{where}: toolCallTimeoutMs must be a positive integer")
    startup = raw.get("startupTimeoutMs", DEFAULT_STARTUP_TIMEOUT_MS)
    if not isinstance(startup, int) or isinstance(startup, bool) or startup <= 0:
        raise ConfigError(f"{where}: startupTimeoutMs must be a positive integer")
    fail = raw.get("failOnStartupError", False)
    if not isinstance(fail, bool):
        raise ConfigError(f"{where}: failOnStartupError must be true or false")
    transport = _transport(declared, command, url, where)
    expanded_cwd = _expand(cwd, f"{where}: cwd", environ) if cwd else None
    if expanded_cwd is not None:
        expanded_cwd = str((path.parent / Path(expanded_cwd).expanduser()).resolve())
    return ServerSpec(
        name=name,
        transport=transport,
        source=str(path),
        command=command,
        args=tuple(_expand(a, f"{where}: args", environ) for a in args),
        env=_expand_map(_str_map(raw.get("env"), f"{where}: env"), f"{where}: env", environ),
        cwd=expanded_cwd,
        url=_expand(url, f"{where}: url", environ, secret=True) if url else None,
        headers=_expand_map(
            _str_map(raw.get("headers"), f"{where}: headers"), f"{where}: headers", environ
        ),
        approval="trusted" if approval == "trusted" else "ask",
        call_timeout_ms=timeout,
        startup_timeout_ms=startup,
        fail_on_startup_error=fail,
    )


def load_mcp_json(path: Path, environ: Mapping[str, str] | None = None) -> list[ServerSpec]:
    """The servers of one ``{"mcpServers": {...}}`` file (``[]`` when it does not exist)."""
    env = os.environ if environ is None else environ
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: line {exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ConfigError(f'{path}: expected an object with "mcpServers"')
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConfigError(f'{path}: "mcpServers" must be an object')
    return [_entry(str(name), raw, path, env) for name, raw in servers.items()]


def discover(
    *,
    cwd: Path | None = None,
    project_file: str | None = None,
    user_file: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[ServerSpec]:
    """The servers of the user-level and project files; a project server wins a name clash."""
    env = os.environ if environ is None else environ
    here = cwd or Path.cwd()
    user = Path(user_file).expanduser() if user_file else dsh_home(env) / USER_FILE
    project = here / (project_file or PROJECT_FILE)
    merged: dict[str, ServerSpec] = {}
    for path in (user, project):
        for spec in load_mcp_json(path, env):
            merged[spec.name] = spec
    return list(merged.values())
