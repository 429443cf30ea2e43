"""Plugin host: fibers, services, dependency gating, config validation, rollback (docs/plugins.md)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, ClassVar

import msgspec
import pytest

from dsh.runtime import ConfigError, Context, Fiber
from dsh.runtime.config import UnknownKeyError


def make_plugin(
    name: str,
    apply: Any,
    *,
    inject: list[str] | None = None,
    config: type | None = None,
) -> SimpleNamespace:
    ns = SimpleNamespace(name=name, apply=apply)
    if inject is not None:
        ns.inject = inject
    if config is not None:
        ns.Config = config
    return ns


def provider(service: str, value: object, log: list[str] | None = None) -> SimpleNamespace:
    def apply(ctx: Context, config: object) -> None:
        ctx.provide(service, value)
        if log is not None:
            ctx.defer(lambda: log.append(f"{service} provider disposed"))

    return make_plugin(f"provide-{service}", apply)


class TimeConfig(msgspec.Struct, rename="camel"):
    time_zone: str | None = None
    refresh_interval_ms: int = 60_000


class Nested(msgspec.Struct):
    items: list[int] = []


class NeedsKey(msgspec.Struct):
    key: str
    nested: Nested = msgspec.field(default_factory=Nested)


async def test_apply_gets_child_view_bound_to_its_fiber() -> None:
    ctx = Context()
    got: dict[str, Any] = {}

    def apply(c: Context, config: object) -> None:
        got["ctx"], got["config"] = c, config

    fiber = await ctx.plugin(make_plugin("p", apply))
    assert isinstance(fiber, Fiber)
    assert fiber.name == "p" and fiber.state == "active"
    assert got["ctx"] is not ctx and got["ctx"].fiber is fiber
    assert got["config"] == {}
    assert fiber.parent is ctx.fiber and fiber in ctx.fiber.children
    await fiber.ready()


async def test_services_are_attributes_and_missing_ones_name_themselves() -> None:
    ctx = Context()
    await ctx.plugin(provider("agents", "REG"))
    assert ctx.agents == "REG"
    assert ctx.has("agents") and ctx.get("agents") == "REG"
    assert ctx.get("llm", "dflt") == "dflt"
    with pytest.raises(AttributeError, match='"llm"'):
        _ = ctx.llm


async def test_providing_a_taken_name_raises_and_rolls_back() -> None:
    ctx = Context()
    await ctx.plugin(provider("llm", 1))
    with pytest.raises(RuntimeError, match='service "llm" is already provided'):
        await ctx.plugin(provider("llm", 2))
    assert ctx.llm == 1
    with pytest.raises(ValueError, match="invalid service name"):
        ctx.provide("on", 3)


async def test_async_apply_and_class_form() -> None:
    ctx = Context()

    async def apply(c: Context, config: object) -> None:
        await asyncio.sleep(0)
        c.provide("a", "async")

    class Service:
        name = "svc"
        inject: ClassVar[list[str]] = ["a"]

        def __init__(self, c: Context, config: object) -> None:
            c.provide("b", self)

    await ctx.plugin(make_plugin("p", apply))
    fiber = await ctx.plugin(Service)
    assert isinstance(ctx.b, Service)
    await fiber.dispose()
    assert not ctx.has("b")


async def test_dependency_gating_consumer_first() -> None:
    ctx = Context()
    applied: list[Any] = []
    consumer = make_plugin("consumer", lambda c, cfg: applied.append(c.agents), inject=["agents"])
    fiber = await ctx.plugin(consumer)
    assert fiber.state == "pending" and fiber.missing() == ["agents"]
    assert applied == []
    await ctx.plugin(provider("agents", "REG"))
    assert fiber.state == "active"
    assert applied == ["REG"]


async def test_dependency_gating_provider_first() -> None:
    ctx = Context()
    applied: list[Any] = []
    await ctx.plugin(provider("agents", "REG"))
    fiber = await ctx.plugin(
        make_plugin("consumer", lambda c, cfg: applied.append(c.agents), inject=["agents"])
    )
    assert fiber.state == "active" and applied == ["REG"]


async def test_gating_on_several_services_and_root_provide() -> None:
    ctx = Context()
    applied: list[str] = []
    fiber = await ctx.plugin(
        make_plugin("c", lambda c, cfg: applied.append("c"), inject=["a", "b"])
    )
    ctx.provide("a", 1)
    await asyncio.sleep(0)
    assert fiber.state == "pending" and fiber.missing() == ["b"]
    # Provided outside any plugin: the host schedules the settle itself.
    ctx.provide("b", 2)
    await asyncio.wait_for(fiber.ready(), 1)
    assert applied == ["c"]


async def test_dependents_disposed_and_reapplied_when_service_goes_and_returns() -> None:
    ctx = Context()
    log: list[str] = []

    def consumer_apply(c: Context, config: object) -> None:
        log.append(f"apply with {c.agents}")
        c.on("tick", lambda: log.append("tick"))
        c.provide("derived", f"derived-from-{c.agents}")

        def disposer() -> None:
            # Dependents go first, so the service is still there while they clean up.
            log.append(f"consumer disposed while agents={c.get('agents')}")

        c.defer(disposer)

    second_level = make_plugin(
        "second", lambda c, cfg: log.append(f"second sees {c.derived}"), inject=["derived"]
    )
    consumer = await ctx.plugin(make_plugin("consumer", consumer_apply, inject=["agents"]))
    second = await ctx.plugin(second_level)
    prov = await ctx.plugin(provider("agents", "A1", log))
    assert consumer.state == "active" and second.state == "active"
    ctx.emit("tick")
    await prov.dispose()
    assert consumer.state == "pending" and second.state == "pending"
    assert not ctx.has("derived")
    ctx.emit("tick")  # the consumer's listener is gone
    await ctx.plugin(provider("agents", "A2"))
    assert consumer.state == "active" and second.state == "active"
    assert log == [
        "apply with A1",
        "second sees derived-from-A1",
        "tick",
        # Reverse order: the provider's later defer runs first, then withdrawing "agents"
        # un-applies the consumer while the service still resolves.
        "agents provider disposed",
        "consumer disposed while agents=A1",
        "apply with A2",
        "second sees derived-from-A2",
    ]


async def test_config_none_becomes_defaults_and_unknown_keys_are_refused() -> None:
    ctx = Context()
    got: list[Any] = []
    plugin = make_plugin("tc", lambda c, cfg: got.append(cfg), config=TimeConfig)
    await ctx.plugin(plugin)
    await ctx.plugin(plugin, {"timeZone": "UTC", "refreshIntervalMs": 5})
    assert got == [TimeConfig(), TimeConfig(time_zone="UTC", refresh_interval_ms=5)]
    # A deliberate departure from the reference: a typo is refused, with the closest key.
    with pytest.raises(UnknownKeyError, match=r'^unknown key "timezone" \(did you mean "timeZone"\?\)$'):
        await ctx.plugin(plugin, {"timezone": "UTC"})
    with pytest.raises(UnknownKeyError, match=r'^unknown key "extra"$'):
        await ctx.plugin(plugin, {"extra": True})
    assert len(got) == 2
    ready = TimeConfig(refresh_interval_ms=1)
    await ctx.plugin(plugin, ready)
    assert got[-1] is ready


@pytest.mark.parametrize(
    ("schema", "config", "message"),
    [
        (TimeConfig, {"refreshIntervalMs": "x"}, "$.refreshIntervalMs: expected int, got str"),
        (TimeConfig, {"timeZone": 5}, "$.timeZone: expected str | null, got int"),
        (TimeConfig, [1], "$: expected object, got array"),
        (NeedsKey, {}, "$.key: missing required value"),
        (
            NeedsKey,
            {"key": "k", "nested": {"items": [1, "2"]}},
            "$.nested.items[1]: expected int, got str",
        ),
    ],
)
async def test_config_errors_are_path_first(schema: type, config: object, message: str) -> None:
    ctx = Context()
    applied: list[bool] = []
    plugin = make_plugin("p", lambda c, cfg: applied.append(True), config=schema)
    with pytest.raises(ConfigError) as info:
        await ctx.plugin(plugin, config)
    assert str(info.value) == message
    assert applied == [] and ctx.fiber.children == ()


async def test_config_post_init_message_is_kept_verbatim() -> None:
    class Strict(msgspec.Struct):
        zone: str = "UTC"

        def __post_init__(self) -> None:
            if self.zone == "Nope/Zone":
                raise ValueError('time-context: invalid IANA timeZone "Nope/Zone"')

    plugin = make_plugin("tc", lambda c, cfg: None, config=Strict)
    with pytest.raises(ConfigError, match=r'^time-context: invalid IANA timeZone "Nope/Zone"$'):
        await Context().plugin(plugin, {"zone": "Nope/Zone"})


async def test_failed_apply_raises_own_error_and_leaves_nothing() -> None:
    ctx = Context()
    disposed: list[str] = []

    def child_apply(c: Context, config: object) -> None:
        c.provide("child_service", 1)
        c.defer(lambda: disposed.append("child"))

    async def apply(c: Context, config: object) -> None:
        c.on("e", lambda: "listener")
        c.provide("svc", object())
        c.defer(lambda: disposed.append("deferred"))
        await c.plugin(make_plugin("child", child_apply))
        raise RuntimeError("p: boom")

    with pytest.raises(RuntimeError, match=r"^p: boom$"):
        await ctx.plugin(make_plugin("p", apply))
    assert await ctx.serial("e") is None and ctx.listeners("e") == 0
    assert not ctx.has("svc") and not ctx.has("child_service")
    assert disposed == ["child", "deferred"]
    assert ctx.fiber.children == ()


async def test_pending_plugin_failing_later_is_recorded_not_raised_into_provider() -> None:
    ctx = Context()

    def bad(c: Context, config: object) -> None:
        c.on("e", lambda: 1)
        raise ValueError("consumer: broken")

    fiber = await ctx.plugin(make_plugin("consumer", bad, inject=["agents"]))
    prov = await ctx.plugin(provider("agents", 1))  # does not raise
    assert prov.state == "active"
    assert fiber.state == "failed" and isinstance(fiber.error, ValueError)
    with pytest.raises(ValueError, match="consumer: broken"):
        await fiber.ready()
    assert ctx.listeners("e") == 0


async def test_dispose_undoes_in_reverse_children_first() -> None:
    ctx = Context()
    log: list[str] = []

    def child(tag: str) -> SimpleNamespace:
        def apply(c: Context, config: object) -> None:
            c.defer(lambda: log.append(f"child {tag}"))

        return make_plugin(f"child-{tag}", apply)

    async def apply(c: Context, config: object) -> None:
        c.defer(lambda: log.append("own 1"))
        await c.plugin(child("a"))
        c.on("e", lambda: None)
        c.defer(lambda: log.append("own 2"))
        await c.plugin(child("b"))

        async def async_disposer() -> None:
            await asyncio.sleep(0)
            log.append("own 3 (async)")

        c.defer(async_disposer)

    fiber = await ctx.plugin(make_plugin("parent", apply))
    assert ctx.listeners("e") == 1
    await fiber.dispose()
    assert log == ["child b", "child a", "own 3 (async)", "own 2", "own 1"]
    assert fiber.state == "disposed" and ctx.listeners("e") == 0
    assert ctx.fiber.children == ()
    await fiber.dispose()  # idempotent
    assert len(log) == 5


async def test_failing_disposer_does_not_stop_disposal(caplog: pytest.LogCaptureFixture) -> None:
    ctx = Context()
    log: list[str] = []

    def apply(c: Context, config: object) -> None:
        c.defer(lambda: log.append("first"))

        def bad() -> None:
            raise RuntimeError("disposer broke")

        c.defer(bad)

    fiber = await ctx.plugin(make_plugin("p", apply))
    await fiber.dispose()
    assert log == ["first"]
    assert any("disposer" in r.getMessage() for r in caplog.records)


async def test_root_dispose_disposes_everything() -> None:
    ctx = Context()
    log: list[str] = []
    await ctx.plugin(provider("agents", 1, log))
    pending = await ctx.plugin(make_plugin("waits", lambda c, cfg: None, inject=["never"]))
    ctx.on("e", lambda: None)
    await ctx.dispose()
    assert log == ["agents provider disposed"]
    assert pending.state == "disposed" and ctx.listeners("e") == 0
    with pytest.raises(RuntimeError):
        ctx.on("e", lambda: None)
    with pytest.raises(RuntimeError, match="disposed"):
        await pending.ready()


async def test_registering_on_a_disposed_fiber_raises() -> None:
    ctx = Context()
    saved: list[Context] = []
    fiber = await ctx.plugin(make_plugin("p", lambda c, cfg: saved.append(c)))
    await fiber.dispose()
    with pytest.raises(RuntimeError, match='plugin "p" is disposed'):
        saved[0].on("e", lambda: None)


async def test_listener_remover_also_releases_the_fiber_effect() -> None:
    ctx = Context()
    saved: list[Context] = []
    fiber = await ctx.plugin(make_plugin("p", lambda c, cfg: saved.append(c)))
    for _ in range(100):
        saved[0].on("e", lambda: None)()
    assert fiber._effects == {}


async def test_ready_waits_for_pending_plugin() -> None:
    ctx = Context()
    fiber = await ctx.plugin(make_plugin("p", lambda c, cfg: None, inject=["x"]))
    waiter = asyncio.create_task(fiber.ready())
    await asyncio.sleep(0)
    assert not waiter.done()
    await ctx.plugin(provider("x", 1))
    await asyncio.wait_for(waiter, 1)


async def test_disposing_a_pending_fiber_keeps_it_from_applying() -> None:
    ctx = Context()
    applied: list[bool] = []
    fiber = await ctx.plugin(make_plugin("p", lambda c, cfg: applied.append(True), inject=["x"]))
    await fiber.dispose()
    await ctx.plugin(provider("x", 1))
    assert applied == [] and fiber.state == "disposed"


async def test_plugin_without_apply_is_rejected() -> None:
    with pytest.raises(TypeError, match="has no apply"):
        await Context().plugin(SimpleNamespace(name="nothing"))
    with pytest.raises(TypeError, match="inject must be a list"):
        await Context().plugin(
            SimpleNamespace(name="x", inject="agents", apply=lambda c, cfg: None)
        )


async def test_dependents_apply_after_their_provider_finished_applying() -> None:
    ctx = Context()
    log: list[str] = []

    async def provider_apply(c: Context, config: object) -> None:
        c.provide("svc", 1)
        await asyncio.sleep(0.01)  # deliberate: the dependent must not be applied during this gap
        log.append("provider done")

    await ctx.plugin(make_plugin("dep", lambda c, cfg: log.append("dep applied"), inject=["svc"]))
    await ctx.plugin(make_plugin("prov", provider_apply))
    assert log == ["provider done", "dep applied"]


async def test_long_running_apply_does_not_block_unrelated_gating() -> None:
    ctx = Context()
    release = asyncio.Event()

    async def slow_apply(c: Context, config: object) -> None:
        await release.wait()

    slow = asyncio.create_task(ctx.plugin(make_plugin("slow", slow_apply)))
    await asyncio.sleep(0)
    waiting = await ctx.plugin(make_plugin("waiting", lambda c, cfg: None, inject=["x"]))
    ctx.provide("x", 1)
    await asyncio.wait_for(waiting.ready(), 1)
    release.set()
    await slow


async def test_service_provided_later_by_a_background_task() -> None:
    ctx = Context()
    started: list[asyncio.Task[None]] = []

    def apply(c: Context, config: object) -> None:
        async def later() -> None:
            await asyncio.sleep(0.01)  # scripted: the service arrives after apply returned
            c.provide("late", "ok")

        started.append(asyncio.create_task(later()))

    waiting = await ctx.plugin(make_plugin("w", lambda c, cfg: None, inject=["late"]))
    await ctx.plugin(make_plugin("bg", apply))
    await started[0]
    await asyncio.wait_for(waiting.ready(), 1)


async def test_parent_disposed_while_child_applies() -> None:
    ctx = Context()
    gate = asyncio.Event()
    log: list[str] = []

    async def child_apply(c: Context, config: object) -> None:
        c.defer(lambda: log.append("child undone"))
        await gate.wait()

    async def parent_apply(c: Context, config: object) -> None:
        await c.plugin(make_plugin("child", child_apply))

    task = asyncio.create_task(ctx.plugin(make_plugin("parent", parent_apply)))
    await asyncio.sleep(0)
    (parent,) = ctx.fiber.children
    (child,) = parent.children
    await parent.dispose()
    assert log == ["child undone"] and child.state == "disposed"
    gate.set()
    await task  # the child's apply completes after disposal: nothing is left registered
    assert child.state == "disposed" and child._effects == {}


@pytest.mark.parametrize(
    ("thing", "message"),
    [
        (42, "42 is not a plugin: it has no name and apply(ctx, config)"),
        (SimpleNamespace(name="nothing"), "'nothing' is not a plugin: it has no apply(ctx, config)"),
        (SimpleNamespace(name="x", apply=3), "'x' is not a plugin: its apply is not callable"),
        (
            "dsh.plugins.time_context",
            "'dsh.plugins.time_context' is not a plugin: it has no name and apply(ctx, config) "
            "(load a plugin by name with dsh.runtime.resolve_plugin)",
        ),
    ],
)
async def test_a_non_plugin_is_one_line_naming_what_is_missing(thing: object, message: str) -> None:
    from dsh.runtime import NotAPluginError

    ctx = Context()
    with pytest.raises(NotAPluginError) as caught:
        await ctx.plugin(thing)
    assert str(caught.value) == message
    assert ctx.fiber.children == ()  # nothing registered


async def test_a_class_whose_constructor_cannot_be_applied_is_refused_before_it_is_called() -> None:
    from dsh.agent import Agent

    with pytest.raises(TypeError, match=r"no apply\(ctx, config\) and its constructor does not take"):
        await Context().plugin(Agent)


async def test_agent_registry_is_the_plugin_that_provides_ctx_agents() -> None:
    from dsh.agent import AgentRegistry

    ctx = Context()
    fiber = await ctx.plugin(AgentRegistry)
    assert isinstance(ctx.agents, AgentRegistry) and fiber.name == "agents"
    await fiber.dispose()
    assert not ctx.has("agents")
