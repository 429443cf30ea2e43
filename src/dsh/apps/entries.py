"""What the command-line flags select: ``dsh chat``'s plugin entries, and the session store.

Owns the built-in default composition (``mock-echo``, or the model plugin a ``provider:model``
name picks through :mod:`dsh.llm.providers`, else ``openai-llm``; ``echo-tool``, the
workspace tools, workspace snapshots (``rewind``), MCP discovery, ``agent-instructions``, ``hooks``, ``skills``, ``time-context``, ``schedule``, ``subagent``, JSONL
sessions under ``$DSH_HOME/sessions``, ``stdio-app``), the overrides flags apply to a
``--config`` composition (``--model``, ``--root``, ``--store``, ``--system``, ``--resume``,
``--sandbox``, ``--approval``, ``--timeout``, ``--time-zone``), and the refusal of flags the chosen store would
ignore. ``dsh chat``, ``dsh run``, ``dsh acp``, ``dsh sessions`` and ``dsh reminders`` share it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from dsh.apps import compaction_default, permission_flags
from dsh.apps.home import default_root
from dsh.apps.store_check import database_reason
from dsh.compose import (
    APP_NAMES,
    DEFAULT_TIME_CONTEXT,
    ECHO_MODEL,
    STORE_NAMES,
    prompt_zone_config,
    resolve_entry_paths,
)
from dsh.compose import open_store as open_store_by_options
from dsh.errors import UsageError
from dsh.llm import providers
from dsh.persistence.base import SessionStore
from dsh.runtime import Context
from dsh.runtime.loader import PluginEntry, load_config_file
from dsh.session.vocab import JsonObject

__all__ = [
    "OPENAI_NAMES",
    "SANDBOX_MODES",
    "WORKSPACE_NAMES",
    "check_store_flags",
    "composition",
    "default_entries",
    "is_real_model",
    "open_store",
]

WORKSPACE_NAMES = frozenset({"workspace-tools", "dsh.tools.workspace.plugin", "dsh.tools.workspace"})
OPENAI_NAMES = frozenset({"openai-llm", "dsh.llm.openai_compat"})
# The model plugins --timeout applies to.
TIMEOUT_NAMES = OPENAI_NAMES | {"anthropic-llm", "dsh.llm.anthropic_llm"}
SANDBOX_MODES = ("read-only", "workspace-write", "danger-full-access")


def is_real_model(args: argparse.Namespace) -> bool:
    return bool(args.base_url) or (args.model is not None and args.model != ECHO_MODEL)


def default_entries(args: argparse.Namespace) -> list[PluginEntry]:
    """The built-in composition of ``dsh chat`` without ``--config``."""
    model = args.model or ECHO_MODEL
    resolved = providers.resolve(model, args.base_url) if is_real_model(args) else None
    if resolved is not None:  # provider:model picks its adapter, endpoint and key variable
        llm = PluginEntry(id="llm", name=resolved.plugin, config=resolved.config)
    elif is_real_model(args):
        # The endpoint named here serves whatever it serves: /model NAME and each resumed
        # session's own model go to it, and its error says when it does not know a name.
        llm_config: JsonObject = {"models": [model], "anyModel": True}
        if args.base_url:
            llm_config["baseURL"] = args.base_url
            if not os.environ.get("DEEPSEEK_API_KEY") and not os.environ.get("OPENAI_API_KEY"):
                llm_config["apiKey"] = "not-needed"  # local servers usually take no key
            elif os.environ.get("OPENAI_API_KEY") and not os.environ.get("DEEPSEEK_API_KEY"):
                llm_config["apiKeyEnv"] = "OPENAI_API_KEY"
        llm = PluginEntry(id="llm", name="openai-llm", config=llm_config)
    else:
        # userText: the mock answers what was typed, not the time reading (see dsh.llm.echo).
        llm = PluginEntry(id="llm", name="echo-llm", config={"answer": "userText"})
    app: JsonObject = {"model": model, "persistenceRoot": args.root or str(default_root())}
    app.update(_store_config(args))
    app.update(_system_config(args))
    app.update(prompt_zone_config(getattr(args, "time_zone", None), process_default=True))
    if args.resume:
        app["resumeSessionId"] = args.resume
    app.update(compaction_default.app_config(args))
    compact = compaction_default.default_entry(args, model)
    if compact is None:
        app["compactionOff"] = compaction_default.off_reason(model)
    return [
        llm,
        PluginEntry(id="echo-tool", name="echo-tool"),
        # MCP servers of the project's .mcp.json and the user's mcp.json (none: nothing mounted).
        PluginEntry(id="mcp", name="mcp", config={"discover": True}),
        PluginEntry(id="workspace-tools", name="workspace-tools", config=_workspace_config(args, {}, hooks_mounted=True)),
        # Workspace snapshots before file-changing steps (dsh sessions diff / rewind, /rewind).
        PluginEntry(id="rewind", name="rewind"),
        PluginEntry(id="agent-instructions", name="agent-instructions"),
        # Claude Code hooks of the settings files (project files once trusted), and skills.
        PluginEntry(id="hooks", name="hooks"),
        PluginEntry(id="skills", name="skills"),
        PluginEntry(id="time-context", name="time-context", config=dict(DEFAULT_TIME_CONTEXT)),
        PluginEntry(id="schedule", name="schedule"),
        PluginEntry(id="subagent", name="subagent"),
        *([compact] if compact is not None else []),
        *_store_entries(args),
        PluginEntry(id="app", name="stdio-app", config=app),
    ]


def _workspace_config(args: argparse.Namespace, config: JsonObject, *, hooks_mounted: bool = False) -> JsonObject:
    """``--sandbox``/``--approval`` over the entry's own config (the YAML keys of the same name),
    and the permission flags' and settings files' rules (:mod:`dsh.apps.permission_flags`)."""
    out = dict(config)
    if getattr(args, "sandbox", None):
        out["sandbox"] = args.sandbox
    if getattr(args, "approval", None):
        out["approval"] = args.approval
    overrides = permission_flags.workspace_overrides(args, hooks_mounted=hooks_mounted)
    rules = overrides.pop("rules", [])
    out.update(overrides)
    if rules:
        earlier = out.get("rules")
        out["rules"] = [*(earlier if isinstance(earlier, list) else []), *rules]
    return out


def _system_config(args: argparse.Namespace) -> JsonObject:
    """``--system TEXT`` / ``--system-file FILE``: the app's ``systemPrompt``."""
    if getattr(args, "system", None) is not None:
        return {"systemPrompt": args.system}
    path = getattr(args, "system_file", None)
    if path is None:
        return {}
    try:
        return {"systemPrompt": Path(path).read_text(encoding="utf-8")}
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise UsageError(f"cannot read --system-file {path}: {reason}") from None


def _store_config(args: argparse.Namespace) -> JsonObject:
    if args.store == "sqlite":
        return {"store": "sqlite", **({"sqlitePath": args.sqlite} if args.sqlite else {})}
    return {}


def _store_entries(args: argparse.Namespace) -> list[PluginEntry]:
    if args.store == "postgres":
        config = {"dsn": args.dsn} if args.dsn else {}
        return [PluginEntry(id="store", name="postgres-sessions", config=config)]
    return []


def _apply_timeout(args: argparse.Namespace, entries: list[PluginEntry]) -> list[PluginEntry]:
    """``--timeout`` goes to every openai-llm and anthropic-llm entry; a composition without one
    refuses it."""
    timeout = getattr(args, "timeout", None)
    if timeout is None:
        return entries
    if not 0 < timeout < float("inf"):  # also refuses nan
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout:g}")
    patched, found = [], False
    for e in entries:
        if e.name in TIMEOUT_NAMES and not e.disabled:
            found = True
            e = PluginEntry(e.id, e.name, {**(e.config or {}), "timeoutSeconds": timeout}, e.disabled, e.line)
        patched.append(e)
    if not found:
        raise UsageError("--timeout applies to openai-llm and anthropic-llm models, and this composition has none")
    return patched


def check_store_flags(kind: str | None, args: argparse.Namespace, *, mounted: str | None = None) -> None:
    """Store flags the chosen store would ignore are refused, never dropped silently.

    ``kind`` is the store in effect (``None``: the default JSONL store); ``mounted`` names the
    store plugin a composition mounts itself, which no flag can change.
    """
    given = [flag for flag, value in (("--root", args.root), ("--sqlite", args.sqlite), ("--dsn", args.dsn)) if value]
    if mounted is not None and (given or args.store):
        flag = given[0] if given else "--store"
        raise UsageError(f"{flag} cannot change the store: the composition mounts its own ({mounted}); edit its config")
    if args.sqlite and kind != "sqlite":
        raise UsageError("--sqlite needs --store sqlite")
    if args.dsn and kind != "postgres":
        raise UsageError("--dsn needs --store postgres")
    if args.root and kind == "postgres":
        raise UsageError("--root names a JSONL or SQLite folder; it has no effect with --store postgres")


def composition(args: argparse.Namespace) -> tuple[list[PluginEntry], Path | None]:
    """The entries ``dsh chat`` loads, with command-line overrides applied, and the folder
    relative paths in them resolve against (``None`` without ``--config``)."""
    if not args.config:
        check_store_flags(args.store, args)
        return _apply_timeout(args, default_entries(args)), None
    path = Path(args.config)
    if not path.is_file():
        raise UsageError(f"config file {args.config} not found")
    base = path.resolve().parent
    # Relative paths in a config (persistenceRoot, sqlitePath, root, ...) name places next to
    # the config file, as its ``.py`` plugin names do, not next to wherever dsh was started.
    loaded = [resolve_entry_paths(e, base) for e in load_config_file(path)]
    entries = compaction_default.apply_flags(args, _apply_timeout(args, loaded))
    if args.base_url:
        # The composition's model plugin has its own endpoint; quietly keeping it would be a lie.
        raise UsageError("--base-url only applies without --config; set baseURL in the config's openai-llm entry")
    mounted = [e for e in entries if e.name in STORE_NAMES and not e.disabled]
    check_store_flags(args.store, args, mounted=mounted[-1].id if mounted else None)
    apps = [e for e in entries if e.name in APP_NAMES and not e.disabled]
    if not apps:
        # Load anyway: a broken entry deserves its own error before "no app" is reported.
        return entries, base
    app = apps[0]
    config = dict(app.config or {})
    if args.model:
        config["model"] = args.model
    if args.root:
        config["persistenceRoot"] = args.root
    config.update(_store_config(args))
    config.update(_system_config(args))
    config.update(prompt_zone_config(getattr(args, "time_zone", None), process_default=False))
    if args.resume:
        config["resumeSessionId"] = args.resume
    config.update(compaction_default.app_config(args))
    patched = PluginEntry(app.id, app.name, config, app.disabled, app.line)
    hooks = any(e.name in ("hooks", "dsh.plugins.hooks") and not e.disabled for e in entries)
    entries = [
        PluginEntry(e.id, e.name, _workspace_config(args, dict(e.config or {}), hooks_mounted=hooks), e.disabled, e.line)
        if e.name in WORKSPACE_NAMES
        else e
        for e in entries
    ]
    # Stores load before the app, so it uses the composition's store instead of its default.
    ordered = [e for e in entries if e.name in STORE_NAMES] + _store_entries(args)
    ordered += [patched if e is app else e for e in entries if e.name not in STORE_NAMES]
    return ordered, base


async def open_store(args: argparse.Namespace) -> tuple[SessionStore, Context]:
    """The session store the ``sessions`` commands (and ``--continue``) read."""
    opened = await open_store_by_options(
        kind=args.store,
        root=args.root,
        sqlite=args.sqlite,
        dsn=getattr(args, "dsn", None),
        config=getattr(args, "config", None),
        check=lambda kind, mounted: check_store_flags(kind, args, mounted=mounted),
    )
    # A --sqlite file that is not a usable database: one line, exit 2, as for dsh chat.
    reason = database_reason(opened.store)
    if reason is not None:
        await opened.ctx.dispose()
        raise UsageError(reason)
    return opened.store, opened.ctx
