"""Typed service keys and hooks: ``ctx.require(KEY)``, ``ctx.on(HOOK, fn)`` with frozen payloads,
and the refusal of listeners for undeclared event names."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from dsh.agent.hooks import PRE_STEP, SESSION_EVENT, PreStep
from dsh.runtime import (
    AbortController,
    Chain,
    Context,
    Hook,
    MissingServiceError,
    ServiceKey,
    UndeclaredHookError,
)


class Registry:
    def __init__(self) -> None:
        self.items: list[str] = []


REGISTRY: ServiceKey[Registry] = ServiceKey("registry")


@dataclass(frozen=True)
class Ping:
    who: str
    n: int


PING: Hook[Ping] = Hook("test-keys/ping", Ping)


@dataclass(frozen=True)
class Shape:
    text: str


SHAPE: Chain[Shape, str] = Chain("test-keys/shape", Shape)


async def test_service_keys_give_the_typed_service() -> None:
    ctx = Context()
    with pytest.raises(MissingServiceError, match='service "registry" is not available'):
        ctx.require(REGISTRY)
    assert ctx.get(REGISTRY) is None and not ctx.has(REGISTRY)
    registry = Registry()
    ctx.provide(REGISTRY, registry)
    assert ctx.require(REGISTRY) is registry and ctx.get(REGISTRY, 1) is registry
    assert ctx.registry is registry  # attribute sugar still resolves the same service


async def test_typed_and_string_listeners_see_the_same_dispatch() -> None:
    ctx = Context()
    seen: list[object] = []
    ctx.on(PING, lambda p: seen.append(p))
    ctx.on("test-keys/ping", lambda who, n: seen.append((who, n)))
    await ctx.serial(PING, Ping("a", 1))
    await ctx.serial("test-keys/ping", "b", 2)  # an emitter still using the string name
    ctx.emit(PING, Ping("c", 3))
    await ctx.parallel(PING, Ping("d", 4))
    assert seen == [Ping("a", 1), ("a", 1), Ping("b", 2), ("b", 2), Ping("c", 3), ("c", 3), Ping("d", 4), ("d", 4)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Ping("a", 1).n = 2  # type: ignore[misc]
    with pytest.raises(TypeError, match='hook "test-keys/ping" carries Ping, not str'):
        await ctx.serial(PING, "not a payload")  # type: ignore[arg-type]


async def test_chains_pass_next() -> None:
    ctx = Context()

    async def upper(shape: Shape, next_: object) -> str:
        rest = await next_()  # type: ignore[operator]
        return f"{shape.text.upper()}|{rest}"

    ctx.on(SHAPE, upper)
    assert await ctx.waterfall(SHAPE, Shape("hi"), default=lambda: "end") == "HI|end"


def test_registering_for_an_undeclared_namespaced_name_is_an_error() -> None:
    ctx = Context()
    with pytest.raises(UndeclaredHookError, match='no hook "agent/pre-stp" is declared \\(did you mean "agent/pre-step"\\?\\)'):
        ctx.on("agent/pre-stp", lambda *a: None)
    with pytest.raises(UndeclaredHookError, match='no hook "nobody/declared-this"'):
        ctx.on("nobody/declared-this", lambda *a: None)
    assert ctx.listeners("agent/pre-stp") == 0
    ctx.on("agent/pre-step", lambda *a: None)  # declared names and plain local names are fine
    ctx.on("local", lambda: None)


def test_hook_declarations_are_checked() -> None:
    @dataclass
    class Mutable:
        x: int

    with pytest.raises(TypeError, match="frozen dataclass"):
        Hook("test-keys/mutable", Mutable)
    with pytest.raises(ValueError, match="namespaced"):
        Hook("plain", Ping)
    with pytest.raises(ValueError, match="already declared"):
        Hook("test-keys/ping", Shape)


async def test_the_agent_hooks_carry_the_loop_arguments() -> None:
    ctx = Context()
    got: list[PreStep] = []
    ctx.on(PRE_STEP, got.append)
    signal = AbortController().signal
    await ctx.serial("agent/pre-step", "agent", 1, 2, "system", None, signal)
    assert got == [PreStep("agent", 1, 2, "system", None, signal)]  # type: ignore[arg-type]
    assert SESSION_EVENT.fields == ("session", "event")
