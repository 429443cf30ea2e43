"""dsh.runtime: the plugin host, event bus, cancellation primitives and config loader.

``context`` owns ``Context`` (services, child plugins) and plugin fibers; ``bus`` listener
registration and dispatch; ``host`` the tables one root shares and dependency gating;
``plugin_shape`` what counts as a plugin; ``keys`` the typed service keys and hooks; ``abort``
the cancellation objects; ``config`` plugin-config validation; ``plugin_list`` parsing the YAML
plugin list, ``resolve`` finding a plugin by name and ``loader`` loading the list into a
context. This module re-exports their public names.
"""

from dsh.runtime.abort import AbortController, AbortError, AbortSignal, run_cancellable
from dsh.runtime.config import ConfigError, validate_config
from dsh.runtime.context import Context, Fiber, FiberState, NotAPluginError
from dsh.runtime.keys import Chain, Hook, MissingServiceError, ServiceKey, UndeclaredHookError
from dsh.runtime.loader import (
    LoadedPlugin,
    LoadError,
    PendingEntry,
    PluginEntry,
    format_pending,
    load_config_file,
    load_plugins,
    parse_config,
    pending_entries,
    resolve_plugin,
)

__all__ = [
    "AbortController",
    "AbortError",
    "AbortSignal",
    "Chain",
    "ConfigError",
    "Context",
    "Fiber",
    "FiberState",
    "Hook",
    "LoadError",
    "LoadedPlugin",
    "MissingServiceError",
    "NotAPluginError",
    "PendingEntry",
    "PluginEntry",
    "ServiceKey",
    "UndeclaredHookError",
    "format_pending",
    "load_config_file",
    "load_plugins",
    "parse_config",
    "pending_entries",
    "resolve_plugin",
    "run_cancellable",
    "validate_config",
]
