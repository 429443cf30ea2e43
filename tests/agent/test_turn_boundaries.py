"""Turns written outside the driver (side_turn) and the opt-in history freeze."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from tests.support.rig import make_rig

from dsh.agent import heap
from dsh.agent.agent import side_turn
from dsh.session import Session
from dsh.session.vocab import COMPLETED, TurnEndReason
from dsh.testing import Reply


def test_side_turn_writes_one_closed_injection_turn() -> None:
    session = Session("s")

    def body(turn: int) -> TurnEndReason:
        session.append("context/message", {"content": [{"type": "text", "text": "x"}], "source": {"kind": "k"}}, surface_op="append")
        return COMPLETED

    assert side_turn(session, {"kind": "k"}, body) == 1
    assert [(e.type, e.data.get("turn")) for e in session.events] == [
        ("turn/start", 1), ("context/message", None), ("turn/end", 1)
    ]
    assert session.events[0].data["trigger"] == {"kind": "injection", "source": {"kind": "k"}}
    assert session.open_turn is None


def test_a_failing_side_turn_body_still_closes_its_turn() -> None:
    session = Session("s")

    def body(turn: int) -> TurnEndReason:
        raise ValueError("boom")

    with pytest.raises(ValueError):
        side_turn(session, {"kind": "k"}, body)
    assert session.open_turn is None
    assert session.events[-1].data == {"turn": 1, "reason": {"kind": "error", "step": 0, "message": "boom"}}


@pytest.fixture
def tiny_heap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(heap.HistoryHeap, "FIRST", 1)
    gc.unfreeze()
    yield
    gc.unfreeze()


async def run_turns(config: dict[str, object]) -> None:
    rig = await make_rig(default=Reply(text="ok"), loop_config=config)
    try:
        agent = rig.agent()
        for i in range(3):
            agent.send([{"type": "text", "text": f"m{i}"}])
            await agent.when_idle()
    finally:
        await rig.dispose()


async def test_the_loop_leaves_the_collector_alone_by_default(tiny_heap: None) -> None:
    await run_turns({})
    assert gc.get_freeze_count() == 0


async def test_an_application_can_opt_in_to_the_history_freeze(tiny_heap: None) -> None:
    await run_turns({"freezeHistory": True})
    assert gc.get_freeze_count() > 0
