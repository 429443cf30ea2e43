"""What counts as a plugin: a ``name``, an ``apply(ctx, config)`` (or a class constructed with
``(ctx, config)``) and an optional ``inject`` list of service names.

This module owns reading those three from a plugin object and refusing a non-plugin in one line
(:class:`NotAPluginError`) before the runtime calls into it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable

__all__ = ["NotAPluginError", "check_plugin", "plugin_inject", "plugin_name"]


class NotAPluginError(TypeError):
    """``ctx.plugin(x)`` with something that is not a plugin; the text names what is missing."""


def plugin_name(plugin: object) -> str:
    """The plugin's ``name``, else its ``__name__`` (a module or class), else its type's name."""
    name = getattr(plugin, "name", None)
    if isinstance(name, str) and name:
        return name
    fallback = getattr(plugin, "__name__", None)
    return fallback if isinstance(fallback, str) else type(plugin).__name__


def check_plugin(plugin: object) -> None:
    """Refuse a non-plugin in one line naming what it lacks, before the runtime calls into it.

    A plugin has ``name`` (a non-empty string; a module or class may rely on its own name) and a
    callable ``apply(ctx, config)``; a class without ``apply`` is applied by constructing it
    with ``(ctx, config)``, so its constructor must accept that.
    """
    is_type = isinstance(plugin, type)
    name = getattr(plugin, "name", None)
    has_name = (isinstance(name, str) and bool(name)) or is_type or inspect.ismodule(plugin)
    apply = getattr(plugin, "apply", None)
    what = repr(name) if isinstance(name, str) and name else _describe_object(plugin)
    if apply is not None and not callable(apply):
        raise NotAPluginError(f"{what} is not a plugin: its apply is not callable")
    if apply is None and isinstance(plugin, type):
        try:
            inspect.signature(plugin).bind(None, None)
        except (TypeError, ValueError):
            raise NotAPluginError(
                f"{what} is not a plugin: it has no apply(ctx, config) and its constructor does "
                "not take (ctx, config)"
            ) from None
        apply = plugin
    missing = [part for part, ok in (("name", has_name), ("apply(ctx, config)", apply is not None)) if not ok]
    if missing:
        hint = " (load a plugin by name with dsh.runtime.resolve_plugin)" if isinstance(plugin, str) else ""
        raise NotAPluginError(f"{what} is not a plugin: it has no {' and '.join(missing)}{hint}")


def _describe_object(value: object) -> str:
    text = repr(value)
    if len(text) > 60 or "\n" in text:
        text = f"<{type(value).__name__} object>"
    return text


def plugin_inject(plugin: object, name: str) -> tuple[str, ...]:
    """The service names ``plugin`` waits for (its ``inject``), validated."""
    inject = getattr(plugin, "inject", None)
    if inject is None:
        return ()
    if isinstance(inject, str) or not isinstance(inject, Iterable):
        raise TypeError(f'plugin "{name}": inject must be a list of service names')
    items = tuple(inject)
    names = tuple(i for i in items if isinstance(i, str))
    if len(names) != len(items):
        raise TypeError(f'plugin "{name}": inject must be a list of service names')
    return names
