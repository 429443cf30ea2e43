"""Property tests of the session core: the surface fold, derivation, validation and lossless JSON.

The oracle is written here from docs/surface-and-derivation.md without looking at the incremental
implementation: fold the raw log from scratch (append pushes, replace splices the positional
slice), then project each surface node. Random valid append/replace sequences must keep
``Session``'s incremental state equal to it after every step.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.session import (
    Event,
    InvalidEventError,
    Session,
    derive_messages,
    encode_event,
)

SURFACE = (
    "user/message",
    "assistant/message",
    "tool/result",
    "context/message",
    "steering/message",
)
LOG_ONLY = (
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "assistant/chunk",
    "todo/write",
    "plugin/custom",
)

# -- the oracle --------------------------------------------------------------------------------


def naive_surface(events: list[Event]) -> list[int]:
    surface: list[int] = []
    for event in events:
        if event.type not in SURFACE:
            continue
        op = event.surface_op
        if op == "append":
            surface.append(event.seq)
        else:
            assert isinstance(op, dict)
            i, j = surface.index(op["start"]), surface.index(op["end"])
            surface[i : j + 1] = [event.seq]
    return surface


def naive_project(event: Event) -> dict[str, Any] | None:
    data = event.data
    if event.type == "user/message":
        return {"role": "user", "content": data["content"]}
    if event.type == "assistant/message":
        return {"role": "assistant", "content": data["content"]} if data["content"] else None
    if event.type == "tool/result":
        block = {
            "type": "tool-result",
            "toolCallId": data["callId"],
            "content": data["content"],
            "isError": data["isError"],
        }
        return {"role": "user", "content": [block]}
    if event.type in ("context/message", "steering/message"):
        if event.type == "context/message" and data.get("envelope") == "raw":
            return {"role": "user", "content": data["content"]}
        tag = "context" if event.type == "context/message" else "steering"
        kind = json.dumps(data["source"]["kind"])
        return {
            "role": "user",
            "content": [
                {"type": "text", "text": f"<{tag} source={kind}>"},
                *data["content"],
                {"type": "text", "text": f"</{tag}>"},
            ],
        }
    return None


def naive_derive(events: list[Event]) -> list[dict[str, Any]]:
    messages = []
    for seq in naive_surface(events):
        message = naive_project(events[seq])
        if message is not None:
            messages.append(message)
    return messages


# -- random valid operations -------------------------------------------------------------------

TEXT = st.text(max_size=8)
TEXT_BLOCK = st.builds(lambda t: {"type": "text", "text": t}, TEXT)
CONTENT = st.lists(TEXT_BLOCK, max_size=3)
SOURCE = st.sampled_from([{"kind": "user"}, {"kind": "plugin", "plugin": "p"}])


def surface_data(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    if kind == "user/message":
        return {"content": draw(CONTENT), "source": draw(SOURCE)}
    if kind == "assistant/message":
        content = draw(CONTENT)
        if draw(st.booleans()):
            content.append({"type": "tool-call", "id": draw(TEXT), "name": "t", "arguments": "{}"})
        return {"turn": 1, "step": 1, "content": content}
    if kind == "tool/result":
        return {
            "turn": 1,
            "step": 1,
            "callId": draw(TEXT),
            "content": draw(CONTENT),
            "isError": draw(st.booleans()),
        }
    if kind == "context/message":
        data: dict[str, Any] = {"content": draw(CONTENT), "source": draw(SOURCE)}
        envelope = draw(st.sampled_from([None, "context", "raw"]))
        if envelope is not None:
            data["envelope"] = envelope
        if draw(st.booleans()):
            data["meta"] = {"hidden": True}
        return data
    return {"turn": 1, "content": draw(CONTENT), "source": draw(SOURCE)}


def log_data(draw: st.DrawFn, kind: str, turn: int) -> dict[str, Any]:
    if kind == "turn/start":
        return {"turn": turn + 1, "trigger": {"kind": "message", "source": {"kind": "user"}}}
    if kind == "turn/end":
        return {"turn": turn, "reason": {"kind": "completed"}}
    if kind in ("step/start", "step/end"):
        return {"turn": turn, "step": 1}
    # -0.0 is not lossless JSON (the contract refuses it), so it is not a valid payload here.
    finite = st.floats(allow_nan=False, allow_infinity=False).filter(
        lambda f: not (f == 0 and math.copysign(1, f) < 0)
    )
    return {"x": draw(st.integers()), "y": draw(finite)}


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, str, Any, Any, Any]]:
    """A list of ``(kind, type, data, surface_op, source_event_seqs)`` that is valid in order."""
    ops: list[tuple[str, str, Any, Any, Any]] = []
    surface: list[int] = []
    turn = 0
    for seq in range(draw(st.integers(1, 40))):
        choice = draw(st.sampled_from(["append", "append", "log", "replace"]))
        if choice == "replace" and not surface:
            choice = "append"
        if choice == "log":
            kind = draw(st.sampled_from(LOG_ONLY))
            data = log_data(draw, kind, turn)
            if kind == "turn/start":
                turn += 1
            ops.append(("log", kind, data, None, None))
            continue
        kind = draw(st.sampled_from(SURFACE))
        data = surface_data(draw, kind)
        if choice == "append":
            provenance = None
            if seq and draw(st.booleans()):
                provenance = draw(
                    st.lists(st.integers(0, seq - 1), min_size=1, max_size=4, unique=True)
                )
            ops.append(("append", kind, data, "append", provenance))
            surface.append(seq)
            continue
        i = draw(st.integers(0, len(surface) - 1))
        j = draw(st.integers(i, len(surface) - 1))
        shadowed = surface[i : j + 1]
        extra = draw(st.lists(st.integers(0, seq - 1), max_size=3, unique=True)) if seq else []
        provenance = list(dict.fromkeys([*extra, *draw(st.permutations(shadowed))]))
        op = {"op": "replace", "start": surface[i], "end": surface[j]}
        ops.append(("replace", kind, data, op, provenance))
        surface[i : j + 1] = [seq]
    return ops


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(ops=operations())
def test_random_valid_sequences_keep_the_fold_equal_to_a_naive_fold(ops: list[Any]) -> None:
    session = Session("prop")
    snapshots: list[tuple[Any, list[dict[str, Any]]]] = []
    replaces = 0
    last_turn = 0
    open_turn: int | None = None
    for kind, type_, data, surface_op, provenance in ops:
        event = session.append(type_, data, surface_op=surface_op, source_event_seqs=provenance)
        replaces += kind == "replace"
        if type_ == "turn/start":
            last_turn = open_turn = data["turn"]
        elif type_ == "turn/end":
            open_turn = None
        events = list(session.events)
        assert event is events[-1] and event.seq == len(events) - 1
        assert list(session.surface) == naive_surface(events)
        derived = session.derive_messages()
        assert derived == naive_derive(events)
        assert len(derived) == len(naive_derive(events))
        assert session.replace_generation == replaces
        assert session.last_turn == last_turn and session.open_turn == open_turn
        surface = session.surface
        assert len(set(surface)) == len(surface)
        assert all(events[s].type in SURFACE for s in surface)
        snapshots.append((derived, copy.deepcopy(derived.to_list())))
    # Every snapshot handed out along the way still shows what it showed then.
    for snapshot, frozen in snapshots:
        assert snapshot == frozen
        assert list(snapshot) == frozen
    # Seeding (replay) and a from-scratch derivation agree with the live session.
    replay = Session("prop", [e.to_json() for e in session.events])
    assert replay.derive_messages() == session.derive_messages()
    assert derive_messages(session.events) == naive_derive(list(session.events))
    restored = Session.restore("prop", list(session.events))
    assert restored.surface == session.surface


# -- validation texts (§1.4) -------------------------------------------------------------------


def _base() -> Session:
    session = Session("v")
    session.append("user/message", {"content": [], "source": {"kind": "user"}}, surface_op="append")
    session.append(
        "turn/start", {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}}
    )
    session.append("user/message", {"content": [], "source": {"kind": "user"}}, surface_op="append")
    return session  # surface [0, 2]


USER = {"content": [{"type": "text", "text": "x"}], "source": {"kind": "user"}}
REPLACE = {"op": "replace", "start": 0, "end": 2}

INVALID = [
    (
        ("user/message", USER),
        {},
        'session event "user/message" is surface-eligible and requires a surfaceOp marker',
    ),
    (
        ("turn/start", {"turn": 2}),
        {"surface_op": "append"},
        'session event "turn/start" is not surface-eligible and cannot carry surfaceOp',
    ),
    (
        ("todo/write", {"todos": []}),
        {"source_event_seqs": [0]},
        'session event "todo/write" is not surface-eligible and cannot carry sourceEventSeqs',
    ),
    (
        ("user/message", USER),
        {"surface_op": {**REPLACE, "x": 1}, "source_event_seqs": [0, 2]},
        'session event "user/message" carries an invalid replace surfaceOp',
    ),
    (
        ("user/message", USER),
        {"surface_op": "prepend"},
        'session event "user/message" carries an invalid replace surfaceOp',
    ),
    (
        ("user/message", USER),
        {"surface_op": {**REPLACE, "start": 1}, "source_event_seqs": [0]},
        "surface replace: start seq 1 not found in surface",
    ),
    (
        ("user/message", USER),
        {"surface_op": {**REPLACE, "end": 99}, "source_event_seqs": [0]},
        "surface replace: end seq 99 not found in surface",
    ),
    (
        ("user/message", USER),
        {"surface_op": {**REPLACE, "start": 2, "end": 0}, "source_event_seqs": [0, 2]},
        "surface replace: start seq 2 (index 1) is after end seq 0 (index 0)",
    ),
    (
        ("user/message", USER),
        {"surface_op": "append", "source_event_seqs": []},
        "sourceEventSeqs must not be empty when present",
    ),
    (
        ("user/message", USER),
        {"surface_op": "append", "source_event_seqs": [1, 1]},
        "sourceEventSeqs must not contain duplicates",
    ),
    (
        ("user/message", USER),
        {"surface_op": "append", "source_event_seqs": [3]},
        "sourceEventSeqs must reference earlier events: 3 >= current seq 3",
    ),
    (
        ("user/message", USER),
        {"surface_op": REPLACE, "source_event_seqs": [0, 1]},
        "surface replace: sourceEventSeqs must include every shadowed surface node; missing 2",
    ),
    (
        ("user/message", USER),
        {"surface_op": REPLACE},
        "surface replace: sourceEventSeqs must include every shadowed surface node; missing 0, 2",
    ),
    (
        ("request/header-delta", {}),
        {},
        'legacy session event "request/header-delta" is not supported',
    ),
    (
        ("request/header", {"header": {}, "reason": "fallback"}),
        {},
        'request/header reason "fallback" is not supported (expected initial, resume or change)',
    ),
]


@pytest.mark.parametrize(("args", "kwargs", "text"), INVALID, ids=[t for *_, t in INVALID])
def test_append_validation_texts_and_nothing_logged(args: Any, kwargs: Any, text: str) -> None:
    session = _base()
    before = (list(session.events), session.surface, session.derive_messages().to_list())
    with pytest.raises(InvalidEventError) as info:
        session.append(*args, **kwargs)
    assert str(info.value) == text
    assert (list(session.events), session.surface, session.derive_messages().to_list()) == before


def test_replace_positions_not_numeric_ranges() -> None:
    session = _base()
    session.append(
        "user/message",
        USER,
        surface_op={"op": "replace", "start": 0, "end": 2},
        source_event_seqs=[0, 2],
    )
    session.append("user/message", USER, surface_op="append")  # surface [3, 4]
    session.append(
        "user/message",
        USER,
        surface_op={"op": "replace", "start": 4, "end": 4},
        source_event_seqs=[4],
    )
    assert session.surface == (3, 5)
    with pytest.raises(
        InvalidEventError, match=r"start seq 5 \(index 1\) is after end seq 3 \(index 0\)"
    ):
        session.append(
            "user/message",
            USER,
            surface_op={"op": "replace", "start": 5, "end": 3},
            source_event_seqs=[3, 5],
        )


# -- lossless JSON -----------------------------------------------------------------------------

_cycle_list: list[Any] = []
_cycle_list.append(_cycle_list)
_cycle_dict: dict[str, Any] = {}
_cycle_dict["self"] = _cycle_dict

NOT_JSON = [
    ("nan", {"v": math.nan}),
    ("inf", {"v": math.inf}),
    ("-inf", {"v": [-math.inf]}),
    ("-0.0", {"v": -0.0}),
    ("nested -0.0", {"a": [{"b": -0.0}]}),
    ("tuple", {"v": (1, 2)}),
    ("set", {"v": {1}}),
    ("frozenset", {"v": frozenset()}),
    ("bytes", {"v": b"x"}),
    ("bytearray", {"v": bytearray(b"x")}),
    ("list cycle", {"v": _cycle_list}),
    ("dict cycle", _cycle_dict),
    ("int key", {1: "x"}),
    ("none key", {None: "x"}),
    ("nested int key", {"a": {2: "x"}}),
    ("object", {"v": object()}),
    ("complex", {"v": 1j}),
    ("top-level tuple", ("a",)),
]


@pytest.mark.parametrize(("label", "value"), NOT_JSON, ids=[label for label, _ in NOT_JSON])
def test_non_lossless_json_is_rejected(label: str, value: Any) -> None:
    session = Session("j")
    with pytest.raises(TypeError) as info:
        session.append("todo/write", value)
    assert str(info.value) == 'session event "todo/write" carries non-JSON-serializable data'
    assert len(session) == 0


LOSSLESS = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False).filter(
        lambda f: not (f == 0 and math.copysign(1, f) < 0)
    )
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(value=LOSSLESS)
def test_lossless_values_round_trip_and_are_snapshotted(value: Any) -> None:
    session = Session("j")
    data = {"v": value}
    original = copy.deepcopy(data)
    event = session.append("todo/write", data)
    assert event.data == original
    assert json.loads(encode_event(event))["data"] == original
    if isinstance(value, (list, dict)):
        data["v"] = "mutated"
        value.clear()
    assert event.data == original  # the caller's later mutation does not reach the log


def test_strings_containing_minus_zero_are_fine() -> None:
    session = Session("j")
    event = session.append("todo/write", {"v": "2026-07-14 -0 :-0", "n": -0.5, "z": 0.0})
    assert event.data == {"v": "2026-07-14 -0 :-0", "n": -0.5, "z": 0.0}


# -- derive snapshots --------------------------------------------------------------------------


def test_derive_snapshot_is_immutable_and_stable() -> None:
    session = _base()
    session.append("user/message", USER, surface_op="append")
    snapshot = session.derive_messages()
    frozen = copy.deepcopy(snapshot.to_list())
    with pytest.raises(TypeError):
        snapshot[0] = {}  # type: ignore[index]
    with pytest.raises(AttributeError):
        snapshot.append({})  # type: ignore[attr-defined]
    session.append("user/message", USER, surface_op="append")
    assert snapshot == frozen and len(snapshot) == 3
    session.append(
        "user/message",
        USER,
        surface_op={"op": "replace", "start": 0, "end": 3},
        source_event_seqs=[0, 2, 3],
    )
    assert snapshot == frozen
    assert len(session.derive_messages()) == 2
    copied = snapshot.to_list()
    copied.append({})
    assert snapshot == frozen  # to_list() hands out a copy
    assert snapshot[-1] == frozen[-1] and snapshot[0:2] == frozen[0:2]
    with pytest.raises(IndexError):
        snapshot[3]
