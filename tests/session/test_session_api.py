"""The public session API: observers, reentrancy, seeds, fork, snapshots, legacy rejects."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from dsh.session import Event, ForkError, InvalidEventError, Session, fork_session, to_json

USER = {"kind": "user"}


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "source": USER}


def closed_turn(session: Session, value: str) -> None:
    turn = session.last_turn + 1
    session.append("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": USER}})
    session.append("user/message", text(value), surface_op="append")
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


def test_observers_run_after_commit_and_their_failures_are_contained(caplog: pytest.LogCaptureFixture) -> None:
    session = Session("s")
    seen: list[tuple[int, int]] = []
    session.subscribe(lambda s, e: seen.append((e.seq, len(s.events))))
    session.subscribe(lambda s, e: 1 / 0)
    with caplog.at_level(logging.ERROR):
        event = session.append("user/message", text("hi"), surface_op="append")
    assert seen == [(0, 1)]  # the event was already committed when observers ran
    assert event.seq == 0 and "observer failed" in caplog.text


def test_an_observer_cannot_append_to_the_same_session() -> None:
    session = Session("s")
    errors: list[str] = []

    def reenter(s: Session, e: Event) -> None:
        try:
            s.append("user/message", text("again"), surface_op="append")
        except RuntimeError as exc:
            errors.append(str(exc))

    session.subscribe(reenter)
    session.append("user/message", text("hi"), surface_op="append")
    assert errors == ["session append cannot reenter while another append is being published"]
    assert len(session.events) == 1


def test_seeding_validates_like_append_and_notifies_nobody() -> None:
    source = Session("a")
    closed_turn(source, "one")
    seeded = Session("b", [e.to_json() for e in source.events])
    assert seeded.derive_messages() == source.derive_messages()
    assert seeded.events[1] == source.events[1]
    bad = [e.to_json() for e in source.events]
    bad[1] = {**bad[1], "seq": 5}
    with pytest.raises(InvalidEventError, match=r"^invalid seed event at index 1: seq 5"):
        Session("c", bad)
    missing = [e.to_json() for e in source.events]
    del missing[1]["surfaceOp"]
    with pytest.raises(InvalidEventError, match=r"index 1: .*requires a surfaceOp marker"):
        Session("d", missing)
    extra = [{**e.to_json(), "extra": 1} for e in source.events]
    with pytest.raises(InvalidEventError, match="index 0: unexpected envelope key"):
        Session("e", extra)


def test_derive_snapshots_never_change_and_compare_as_lists() -> None:
    session = Session("s")
    session.append("user/message", text("one"), surface_op="append")
    before = session.derive_messages()
    session.append("user/message", text("two"), surface_op="append")
    assert len(before) == 1 and len(session.derive_messages()) == 2
    session.append("user/message", text("three"), surface_op={"op": "replace", "start": 0, "end": 1},
                   source_event_seqs=[0, 1])
    assert before == [{"role": "user", "content": [{"type": "text", "text": "one"}]}]
    assert session.derive_messages() == [{"role": "user", "content": [{"type": "text", "text": "three"}]}]
    assert json.loads(json.dumps(session.derive_messages().to_list()))[0]["role"] == "user"


def test_durable_json_key_order() -> None:
    session = Session("s")
    session.append("user/message", text("a"), surface_op="append")
    event = session.append("user/message", text("b"), surface_op={"end": 0, "start": 0, "op": "replace"},
                           source_event_seqs=[0])
    assert list(event.to_json()) == ["type", "seq", "time", "data", "sourceEventSeqs", "surfaceOp"]
    line = to_json(event)
    assert line.index('"sourceEventSeqs"') < line.index('"surfaceOp"')
    assert '"surfaceOp":{"op":"replace","start":0,"end":0}' in line
    assert " " not in line.replace('"text":"a"', "")


@pytest.mark.parametrize(
    ("kind", "data", "message"),
    [
        ("request/header-delta", {"delta": {}}, 'legacy session event "request/header-delta"'),
        ("request/header", {"header": {"config": {"model": "m"}}, "reason": "fallback"}, '"fallback" is not supported'),
    ],
)
def test_legacy_header_records_are_refused(kind: str, data: dict[str, Any], message: str) -> None:
    session = Session("s")
    with pytest.raises(InvalidEventError, match=message):
        session.append(kind, data)
    assert len(session.events) == 0
    with pytest.raises(InvalidEventError, match=message):
        Session("t", [{"type": kind, "seq": 0, "time": 1, "data": data}])


def test_fork_at_a_turn_end() -> None:
    source = Session("parent", header={"createdAt": 1, "cwd": "/w"})
    closed_turn(source, "one")
    closed_turn(source, "two")
    child = fork_session(source, 2, "child")
    assert child.header["parentSession"] == "parent" and child.header["seedLength"] == 3
    assert child.header["cwd"] == "/w" and [e.seq for e in child.events] == [0, 1, 2]
    assert fork_session(source).header["seedLength"] == 6
    with pytest.raises(ForkError) as invalid:
        fork_session(source, 1)
    assert invalid.value.code == "INVALID_BOUNDARY"
    source.append("turn/start", {"turn": 3, "trigger": {"kind": "message", "source": USER}})
    with pytest.raises(ForkError) as open_turn:
        fork_session(source)
    assert open_turn.value.code == "OPEN_TURN"
