"""The write coordinator (docs/stores.md) driven through the real runtime and sessions service."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from store_support import closed_turn, events_json, open_tool_turn
from tests.support.wait import stays

from dsh.agent import sessions as sessions_plugin
from dsh.persistence import jsonl, sqlite
from dsh.persistence.base import SessionLocked, SessionStore
from dsh.persistence.coordinator import mount_coordinator
from dsh.persistence.jsonl import JsonlStore
from dsh.runtime import ConfigError, Context
from dsh.session import Event, Session, fork_session


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    context = Context()
    await context.plugin(sessions_plugin)
    try:
        yield context
    finally:
        await context.dispose()


def lines_of(path: str | None) -> list[bytes]:
    assert path is not None
    return Path(path).read_bytes().split(b"\n")[1:-1]


async def test_config_root_is_required(ctx: Context) -> None:
    with pytest.raises(ConfigError, match=r"^\$\.root: missing required value$"):
        await ctx.plugin(jsonl, {})
    with pytest.raises(ConfigError, match=r"^\$\.path: missing required value$"):
        await ctx.plugin(sqlite, {})


async def test_flush_writes_each_event_once(ctx: Context, tmp_path: Path) -> None:
    await ctx.plugin(jsonl, {"root": str(tmp_path)})
    store: JsonlStore = ctx.session_store
    session: Session = ctx.sessions.create("s1", cwd="/w")
    path = store.locate(session.header)
    await ctx.sessions.flush(session)
    assert not Path(path or "").exists()  # nothing to write yet: no file
    closed_turn(session, "one")
    await ctx.sessions.flush(session)
    assert len(lines_of(path)) == 7
    await ctx.sessions.flush(session)
    closed_turn(session, "two")
    await ctx.sessions.flush(session)
    assert lines_of(path) == [jsonl.encode_event(e) for e in session.events]
    with pytest.raises(SessionLocked):
        await JsonlStore(tmp_path).load("s1")
    await ctx.sessions.dispose(session)
    loaded = await JsonlStore(tmp_path).load("s1")  # the lock went with the final drain
    assert events_json(loaded.events) == events_json(session.events)


async def test_created_but_never_flushed_leaves_no_file(ctx: Context, tmp_path: Path) -> None:
    fiber = await ctx.plugin(jsonl, {"root": str(tmp_path)})
    session = ctx.sessions.create("idle", cwd="/w")
    await asyncio.sleep(0)
    await ctx.sessions.dispose(session)
    await fiber.dispose()
    assert list(tmp_path.rglob("*.jsonl")) == []


async def test_plugin_disposal_drains_everything(ctx: Context, tmp_path: Path) -> None:
    fiber = await ctx.plugin(jsonl, {"root": str(tmp_path)})
    store: JsonlStore = ctx.session_store
    sessions = [ctx.sessions.create(f"d{i}", cwd="/w") for i in range(3)]
    for session in sessions:
        closed_turn(session)
    await fiber.dispose()
    for session in sessions:
        assert lines_of(store.locate(session.header)) == [
            jsonl.encode_event(e) for e in session.events
        ]
    assert store.stored_count("d0") is None  # closed: every lock released
    await JsonlStore(tmp_path).load("d0")


async def test_failed_flush_is_retried_without_duplicates(
    ctx: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ctx.plugin(jsonl, {"root": str(tmp_path)})
    store: JsonlStore = ctx.session_store
    session = ctx.sessions.create("retry", cwd="/w")
    closed_turn(session, "one")
    await ctx.sessions.flush(session)
    closed_turn(session, "two")
    real_append = store.append
    failures = {"left": 2}

    async def flaky(session_id: str, events: Sequence[Event], *, sync: bool = True) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise OSError(28, "No space left on device")
        await real_append(session_id, events, sync=sync)

    monkeypatch.setattr(store, "append", flaky)
    with pytest.raises(OSError):
        await ctx.sessions.flush(session)
    closed_turn(session, "three")
    with pytest.raises(OSError):
        await ctx.sessions.flush(session)
    await ctx.sessions.flush(session)
    assert lines_of(store.locate(session.header)) == [jsonl.encode_event(e) for e in session.events]


async def test_events_appended_during_a_flush_stay_buffered(
    ctx: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ctx.plugin(jsonl, {"root": str(tmp_path)})
    store: JsonlStore = ctx.session_store
    session = ctx.sessions.create("busy", cwd="/w")
    closed_turn(session, "one")
    real_append = store.append
    gate = asyncio.Event()
    entered = asyncio.Event()
    calls: list[list[int]] = []

    async def slow(session_id: str, events: Sequence[Event], *, sync: bool = True) -> None:
        calls.append([e.seq for e in events])
        entered.set()
        await gate.wait()
        await real_append(session_id, events, sync=sync)

    monkeypatch.setattr(store, "append", slow)
    first = asyncio.create_task(ctx.sessions.flush(session))
    await asyncio.wait_for(entered.wait(), 30)  # the first write is in flight
    closed_turn(session, "two")  # lands while the first write is in flight
    second = asyncio.create_task(ctx.sessions.flush(session))  # serialised behind the first
    await stays(lambda: len(calls) == 1, 0.05, what="the second write waiting for the first")
    gate.set()
    await asyncio.gather(first, second)
    assert calls == [list(range(7)), list(range(7, 14))]
    assert lines_of(store.locate(session.header)) == [jsonl.encode_event(e) for e in session.events]


async def test_fork_seeds_are_written_by_the_first_flush(ctx: Context, tmp_path: Path) -> None:
    await ctx.plugin(jsonl, {"root": str(tmp_path)})
    store: JsonlStore = ctx.session_store
    parent = ctx.sessions.create("parent", cwd="/w")
    closed_turn(parent, "one")
    closed_turn(parent, "two")
    child = ctx.sessions.adopt(fork_session(parent, 6, "child"))
    closed_turn(child, "three")
    await ctx.sessions.flush(child)
    path = store.locate(child.header)
    assert Path(path or "").read_bytes().split(b"\n")[0] == (
        b'{"type":"session","version":0,"id":"child","createdAt":'
        + str(child.header["createdAt"]).encode()
        + b',"cwd":"/w","parentSession":"parent","seedLength":7}'
    )
    assert lines_of(path) == [jsonl.encode_event(e) for e in child.events]


@pytest.mark.parametrize("plugin", [jsonl, sqlite], ids=["jsonl", "sqlite"])
async def test_resume_writes_only_new_events(ctx: Context, tmp_path: Path, plugin: Any) -> None:
    config = {"root": str(tmp_path)} if plugin is jsonl else {"path": str(tmp_path / "s.db")}
    fiber = await ctx.plugin(plugin, config)
    session = ctx.sessions.create("resume-me", cwd="/w")
    closed_turn(session, "one")
    open_tool_turn(session)
    await ctx.sessions.flush(session)
    await ctx.sessions.dispose(session)
    await fiber.dispose()

    await ctx.plugin(plugin, config)
    store: SessionStore = ctx.session_store
    stored = await store.load("resume-me")
    assert stored.repaired == 3 and stored.session is not None
    live = ctx.sessions.adopt(stored.session)
    assert store.stored_count("resume-me") == len(live)
    closed_turn(live, "after")
    await ctx.sessions.flush(live)
    read = await store.read("resume-me")
    assert events_json(read.events) == events_json(live.events)
    assert read.events[len(session) + 2].data["reason"] == {"kind": "interrupted"}


async def test_create_failure_surfaces_at_flush_and_is_retried(
    ctx: Context, tmp_path: Path
) -> None:
    await ctx.plugin(jsonl, {"root": str(tmp_path)})
    blocker = JsonlStore(tmp_path)
    await blocker.create({"version": 0, "id": "contested", "createdAt": 1})
    session = ctx.sessions.create("contested", cwd="/w")
    closed_turn(session)
    with pytest.raises(SessionLocked):
        await ctx.sessions.flush(session)
    await blocker.close()
    await ctx.sessions.flush(session)  # the init is retried, then everything is written
    store: JsonlStore = ctx.session_store
    assert len(lines_of(store.locate(session.header))) == len(session)


class FakeContext:
    """Just enough of ``Context`` to call ``mount_coordinator`` directly."""

    def __init__(self) -> None:
        self.listeners: dict[str, Callable[..., Any]] = {}
        self.disposers: list[Callable[[], object]] = []

    def on(self, event: str, listener: Callable[..., Any]) -> Callable[[], None]:
        self.listeners[event] = listener
        return lambda: None

    def provide(self, name: str, service: object) -> None:
        pass

    def defer(self, disposer: Callable[[], object]) -> None:
        self.disposers.append(disposer)


async def test_dispose_aggregates_failures(tmp_path: Path) -> None:
    fake = FakeContext()
    store = JsonlStore(tmp_path)
    coordinator = mount_coordinator(fake, store)
    await JsonlStore(tmp_path).create({"version": 0, "id": "taken", "createdAt": 1})
    ok = Session("fine", header={"createdAt": 1})
    bad = Session("taken", header={"createdAt": 1})
    for session in (ok, bad):
        closed_turn(session)  # seeded before the announcement: buffered at registration
        fake.listeners["session/created"](session)
    with pytest.raises(ExceptionGroup) as info:
        await coordinator.dispose()
    assert str(info.value).startswith("jsonl dispose failed")
    assert [type(e) for e in info.value.exceptions] == [SessionLocked]
    assert len((await JsonlStore(tmp_path).read("fine")).events) == 7


async def test_session_event_without_created_registers_lazily(tmp_path: Path) -> None:
    fake = FakeContext()
    store = JsonlStore(tmp_path)
    coordinator = mount_coordinator(fake, store)
    session = Session("late", header={"createdAt": 1})
    closed_turn(session)
    fake.listeners["session/event"](session, session.events[-1])  # first sighting mid-session
    fake.listeners["session/event"](session, session.events[-1])  # a replay is ignored
    await fake.listeners["session/flush"](session)
    assert len((await JsonlStore(tmp_path).read("late")).events) == 7
    await coordinator.dispose()
