"""``Session.append``'s shortcuts decide exactly as the checks they skip.

An append skips the JSON walk of valid provenance and the bytes scan for ``-0`` in a payload
without a "."; these properties hold each shortcut to the long way's verdict and error text.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dsh import _json
from dsh.session import Session
from dsh.session.event import check_surface_fields

USER = {"content": [{"type": "text", "text": "x"}], "source": {"kind": "user"}}
PRIOR = 6  # events before the one under test, so valid seqs are 0..5

SEQ_ITEMS = (
    st.integers(min_value=-3, max_value=PRIOR + 2)
    | st.integers()
    | st.booleans()
    | st.floats()
    | st.none()
    | st.text(max_size=3)
    | st.lists(st.integers(min_value=0, max_value=PRIOR - 1), max_size=2)
)
SEQS = st.lists(SEQ_ITEMS, max_size=6) | st.lists(
    st.integers(min_value=0, max_value=PRIOR - 1), min_size=1, max_size=PRIOR, unique=True
)


def _outcome(call: Any) -> Any:
    try:
        return ("ok", call())
    except (TypeError, ValueError) as exc:
        return (type(exc).__name__, str(exc))


def _long_way(seqs: list[Any]) -> Any:
    """What the append did before the shortcut: a lossless copy, then every envelope rule."""

    def run() -> list[Any]:
        try:
            copy = _json.lossless_copy(list(seqs))
        except _json.NotLosslessJSON:
            raise TypeError('session event "user/message" carries non-JSON-serializable data') from None
        check_surface_fields("user/message", PRIOR, "append", copy)
        return copy

    return _outcome(run)


def _session() -> Session:
    session = Session("fast")
    for turn in range(PRIOR):
        session.append("turn/start", {"turn": turn + 1})
    return session


@settings(max_examples=300, deadline=None)
@given(seqs=SEQS, as_tuple=st.booleans())
def test_provenance_shortcut_agrees_with_the_full_check(seqs: list[Any], as_tuple: bool) -> None:
    session = _session()
    given_seqs = tuple(seqs) if as_tuple else seqs
    got = _outcome(
        lambda: session.append("user/message", USER, surface_op="append", source_event_seqs=given_seqs)
    )
    expected = _long_way(seqs)
    if expected[0] != "ok":
        assert got == expected
        assert len(session) == PRIOR
        return
    assert got[0] == "ok"
    stored = got[1].source_event_seqs
    assert stored == expected[1] and [type(s) for s in stored] == [type(s) for s in expected[1]]
    seqs.append(0)  # the caller's list is not the log's
    assert stored == expected[1]


FLOATS = st.sampled_from([-0.0, 0.0, 1.5, -0.5, math.nan, math.inf, -math.inf]) | st.floats()
TEXTS = st.sampled_from(["-0", ":-0", "[-0", ",-0", "2026-07-14", "x.y", "a"]) | st.text(max_size=4)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | FLOATS | TEXTS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(TEXTS, inner, max_size=3)
        | st.lists(inner, max_size=2).map(tuple)
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(value=VALUES)
def test_payload_is_accepted_exactly_when_it_is_lossless(value: Any) -> None:
    session = Session("j")
    result = _outcome(lambda: session.append("todo/write", {"v": value}))
    if _json.is_lossless(value):
        assert result[0] == "ok"
        assert _json.encode(result[1].data) == _json.encode({"v": value})
    else:
        assert result == ("TypeError", 'session event "todo/write" carries non-JSON-serializable data')
        assert len(session) == 0
