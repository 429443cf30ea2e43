"""Typed names for services and bus events: :class:`ServiceKey` and :class:`Hook`.

A provider declares a key next to its service (``AGENTS: ServiceKey[AgentRegistry] =
ServiceKey("agents")``); consumers write ``ctx.require(AGENTS)`` or ``ctx.get(AGENTS)`` and get
the real type, so mypy checks the seam and the import graph shows the dependency.

A :class:`Hook` declares one bus event once, in the package that dispatches it: its durable
string name (``agent/pre-step``, kept for YAML and reference parity), and a frozen dataclass
payload whose fields are the listener arguments in order. ``ctx.on(PRE_STEP, fn)`` calls
``fn(PreStep(...))``; a listener registered by string name keeps receiving the fields
positionally, so both styles see the same dispatch. :class:`Chain` is the same for a
``waterfall`` (middleware) event, whose listeners also get ``next``.

Names with a ``/`` are the namespaced bus events; registering a listener for one that no hook
declares is an error at registration (a misspelt name would otherwise never fire). The built-in
namespaces are declared by the modules in :data:`HOOK_MODULES`, imported on first need so the
runtime does not depend on the packages above it.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Generic, TypeVar

__all__ = [
    "HOOK_MODULES",
    "Chain",
    "Hook",
    "MissingServiceError",
    "ServiceKey",
    "UndeclaredHookError",
    "check_declared",
    "declared_hooks",
]

# Covariant: a key or hook only ever hands its type out (payloads are checked at run time).
T = TypeVar("T", covariant=True)
P = TypeVar("P", covariant=True)
R = TypeVar("R", covariant=True)

# Namespace -> the module that declares its hooks (imported when a name in it is first checked).
HOOK_MODULES: Mapping[str, str] = {
    "agent": "dsh.agent.hooks",
    "session": "dsh.agent.hooks",
    "llm": "dsh.llm.hooks",
}

_DECLARED: dict[str, _Declared[object]] = {}


class MissingServiceError(AttributeError):
    """``ctx.require(KEY)`` when nobody provides the service."""


class UndeclaredHookError(ValueError):
    """A listener registered for a namespaced event name that no hook declares."""


class ServiceKey(Generic[T]):
    """The typed name of a service: ``ctx.require(key)`` returns a ``T``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        if not name.isidentifier() or name.startswith("_"):
            raise ValueError(f'invalid service name "{name}"')
        self.name = name

    def __repr__(self) -> str:
        return f"ServiceKey({self.name!r})"


class _Declared(Generic[P]):
    __slots__ = ("fields", "name", "payload")

    def __init__(self, name: str, payload: type[P]) -> None:
        if "/" not in name:
            raise ValueError(f'hook name "{name}" must be namespaced ("<package>/<event>")')
        params = getattr(payload, "__dataclass_params__", None)
        if not dataclasses.is_dataclass(payload) or params is None or not params.frozen:
            raise TypeError(f'hook "{name}": the payload must be a frozen dataclass')
        self.name = name
        self.payload = payload
        self.fields = tuple(f.name for f in dataclasses.fields(payload))
        existing = _DECLARED.get(name)
        if existing is not None and existing.payload is not payload:
            raise ValueError(f'hook "{name}" is already declared with {existing.payload.__qualname__}')
        _DECLARED[name] = self

    def args(self, payload: object) -> tuple[object, ...]:
        """The positional arguments a dispatch of ``payload`` passes to string listeners."""
        if not isinstance(payload, self.payload):
            raise TypeError(
                f'hook "{self.name}" carries {self.payload.__qualname__}, not {type(payload).__name__}'
            )
        return tuple(getattr(payload, f) for f in self.fields)

    def build(self, args: tuple[object, ...]) -> tuple[P, tuple[object, ...]]:
        """The payload from a positional dispatch, and the arguments after it (``next``)."""
        n = len(self.fields)
        return self.payload(*args[:n]), args[n:]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.payload.__qualname__})"


class Hook(_Declared[P]):
    """A bus event dispatched with ``serial``, ``parallel`` or ``emit``; listeners get ``P``."""


class Chain(_Declared[P], Generic[P, R]):
    """A ``waterfall`` event: listeners get ``(P, next)`` and return an ``R`` (``await next()``
    runs the rest of the chain)."""


def declared_hooks() -> dict[str, _Declared[object]]:
    """Every hook declared so far, by name."""
    return dict(_DECLARED)


def check_declared(name: str) -> None:
    """Raise :class:`UndeclaredHookError` for a namespaced name that no hook declares."""
    if "/" not in name or name in _DECLARED:
        return
    module = HOOK_MODULES.get(name.split("/", 1)[0])
    if module is not None:
        importlib.import_module(module)
        if name in _DECLARED:
            return
    import difflib  # only on the error path

    close = difflib.get_close_matches(name, list(_DECLARED), n=1)
    hint = f' (did you mean "{close[0]}"?)' if close else " (declare it with dsh.runtime.Hook)"
    raise UndeclaredHookError(f'no hook "{name}" is declared{hint}')
