"""``.mcp.json`` files: parsing, the trust gate for the project's file, and discovery.

This module owns the common ``{"mcpServers": {...}}`` shape: :func:`parse` checks a file's
entries without expanding anything (so it can list what an untrusted file would run), and
:func:`resolve` expands ``${VAR}`` and builds the :class:`ServerSpec`. :func:`discover` reads
``mcp.json`` in the dsh home (the user's own file: always trusted) and then the project's
``.mcp.json`` (the working directory), which passes the trust gate (:mod:`dsh.trust`) first:
an untrusted or changed project file contributes no server, expands no variable and grants no
``"approval": "trusted"``; its servers are reported as untrusted instead. A project server
shadows a user-level server of the same name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsh._home import dsh_home
from dsh.plugins.mcp.config import (
    DEFAULT_CALL_TIMEOUT_MS,
    DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_STARTUP_TIMEOUT_MS,
    ServerSpec,
    Transport,
    expand,
    expand_map,
    transport_of,
)
from dsh.plugins.mcp.naming import valid_server_name
from dsh.runtime.config import ConfigError
from dsh.trust import (
    Command,
    FileKind,
    TrustStore,
    admit,
    read_project_file,
    register_kind,
    trust_path,
)

__all__ = ["KIND", "PROJECT_FILE", "USER_FILE", "Discovered", "RawServer", "discover", "discover_all", "load_mcp_json", "parse"]

PROJECT_FILE = ".mcp.json"
USER_FILE = "mcp.json"


@dataclass(frozen=True)
class RawServer:
    """One checked entry of a file, every string as written (``${VAR}`` unexpanded)."""

    name: str
    transport: Transport
    source: Path
    raw: Mapping[str, Any] = field(repr=False)

    def command(self) -> Command:
        what = f'mcp server "{self.name}"'
        if self.transport == "stdio":
            return Command(what, argv=(self.raw["command"], *self.raw.get("args", [])),
                           env=self.raw.get("env") or {}, cwd=self.raw.get("cwd"))
        return Command(what, url=self.raw["url"], headers=self.raw.get("headers") or {})

    def unexpanded(self) -> ServerSpec:
        """The spec as written, never to be started: what ``dsh mcp list`` shows as untrusted."""
        return ServerSpec(name=self.name, transport=self.transport, source=str(self.source),
                          command=self.raw.get("command"), args=tuple(self.raw.get("args", [])),
                          url=self.raw.get("url"))


def _str_map(value: object, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where}: expected an object of strings")
    return {str(k): v for k, v in value.items()}


def _positive(raw: Mapping[str, Any], key: str, default: int, where: str) -> None:
    value = raw.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{where}: {key} must be a positive integer")


def _check(name: str, raw: object, path: Path) -> RawServer:
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
    if raw.get("approval", "ask") not in ("ask", "trusted"):
        raise ConfigError(f'{where}: approval must be "ask" or "trusted"')
    _positive(raw, "toolCallTimeoutMs", DEFAULT_CALL_TIMEOUT_MS, where)
    _positive(raw, "startupTimeoutMs", DEFAULT_STARTUP_TIMEOUT_MS, where)
    _positive(raw, "maxResultBytes", DEFAULT_MAX_RESULT_BYTES, where)
    if not isinstance(raw.get("failOnStartupError", False), bool):
        raise ConfigError(f"{where}: failOnStartupError must be true or false")
    checked = dict(raw)
    checked["env"] = _str_map(raw.get("env"), f"{where}: env")
    checked["headers"] = _str_map(raw.get("headers"), f"{where}: headers")
    return RawServer(name, transport_of(declared, command, url, where), path, checked)


def resolve(server: RawServer, environ: Mapping[str, str]) -> ServerSpec:
    """The spec of a checked entry, ``${VAR}`` expanded (for a trusted file only)."""
    raw, path, name = server.raw, server.source, server.name
    where = f'{path}: server "{name}"'
    cwd, url = raw.get("cwd"), raw.get("url")
    expanded_cwd = expand(cwd, f"{where}: cwd", environ) if cwd else None
    if expanded_cwd is not None:
        expanded_cwd = str((path.parent / Path(expanded_cwd).expanduser()).resolve())
    return ServerSpec(
        name=name,
        transport=server.transport,
        source=str(path),
        command=raw.get("command"),
        args=tuple(expand(a, f"{where}: args", environ) for a in raw.get("args", [])),
        env=expand_map(raw["env"], f"{where}: env", environ),
        cwd=expanded_cwd,
        url=expand(url, f"{where}: url", environ, secret=True) if url else None,
        headers=expand_map(raw["headers"], f"{where}: headers", environ),
        approval="trusted" if raw.get("approval") == "trusted" else "ask",
        call_timeout_ms=raw.get("toolCallTimeoutMs", DEFAULT_CALL_TIMEOUT_MS),
        startup_timeout_ms=raw.get("startupTimeoutMs", DEFAULT_STARTUP_TIMEOUT_MS),
        fail_on_startup_error=raw.get("failOnStartupError", False),
        max_result_bytes=raw.get("maxResultBytes", DEFAULT_MAX_RESULT_BYTES),
    )


def parse(path: Path, content: bytes) -> list[RawServer]:
    """The checked entries of one file's bytes; nothing is expanded."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: cannot read: not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: line {exc.lineno}: invalid JSON ({exc.msg})") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply") from None
    if not isinstance(data, dict):
        raise ConfigError(f'{path}: expected an object with "mcpServers"')
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConfigError(f'{path}: "mcpServers" must be an object')
    return [_check(str(name), raw, path) for name, raw in servers.items()]


def _commands(path: Path, content: bytes) -> list[Command]:
    return [server.command() for server in parse(path, content)]


KIND = register_kind(FileKind("mcp-servers", (PROJECT_FILE,), _commands))
"""``.mcp.json``: each stdio server's command line, each HTTP server's URL."""


def load_mcp_json(path: Path, environ: Mapping[str, str] | None = None) -> list[ServerSpec]:
    """The servers of one file the user trusts, expanded (``[]`` when it does not exist)."""
    env = os.environ if environ is None else environ
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return [resolve(server, env) for server in parse(path, content)]


@dataclass
class Discovered:
    """The servers to start, and the untrusted project servers (shown, never started)."""

    specs: list[ServerSpec]
    untrusted: list[ServerSpec]


def discover_all(
    *,
    cwd: Path | None = None,
    project_file: str | None = None,
    user_file: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Discovered:
    """The user-level servers and the project's, the project's only when trusted."""
    env = os.environ if environ is None else environ
    user = Path(user_file).expanduser() if user_file else dsh_home(env) / USER_FILE
    merged = {spec.name: spec for spec in load_mcp_json(user, env)}
    untrusted: list[ServerSpec] = []
    project = read_project_file(cwd or Path.cwd(), project_file or PROJECT_FILE, KIND)
    if project is not None:
        servers = parse(project.path, project.content)
        if servers and admit(project, TrustStore(trust_path(env))):
            merged.update((s.name, resolve(s, env)) for s in servers)
        else:
            untrusted = [s.unexpanded() for s in servers]
    return Discovered(list(merged.values()), untrusted)


def discover(
    *,
    cwd: Path | None = None,
    project_file: str | None = None,
    user_file: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[ServerSpec]:
    """The servers to start (see :func:`discover_all`); a project server wins a name clash."""
    return discover_all(cwd=cwd, project_file=project_file, user_file=user_file, environ=environ).specs
