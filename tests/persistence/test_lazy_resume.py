"""Resume without a fold snapshot keeps log-only events as their lines (issue 20).

``assistant/chunk``, ``step/*``, ``tool/call`` and ``turn/end`` lines are checked with an
envelope struct that skips ``data`` and decoded on first access. Nothing of the load contract
may change: every event reads back with the same values, and a broken line gives exactly the
error the eager scan gives; a log damaged at random reads back exactly as the eager scan reads it.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_support import closed_turn, make_session, open_tool_turn, persist

from dsh.persistence._v0 import parse_header, restore_log, scan_event_lines
from dsh.persistence.base import CorruptSessionLog, StoreError
from dsh.persistence.jsonl import JsonlStore
from dsh.session import decode_event


def _eager(path: Path) -> object:
    """What the eager scan makes of the file: the events, or the error text."""
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    header = parse_header(lines[0], str(path))
    body = lines[1:-1]

    def where(index: int) -> tuple[str, str]:
        return f"line {index + 1}", f", file line {index + 2}"

    try:
        events = scan_event_lines(body, str(path), where)
        session, _ = restore_log(header["id"], header, events, str(path), repair=False, position=where)
    except StoreError as exc:
        return str(exc)
    return [event.to_json() for event in session.events]


def _put(path: Path, line: bytes, where: float = 0) -> object:
    """Put ``line`` (``SEQ`` standing for its seq) in place of an ``assistant/chunk`` line of the
    log at ``path`` (the first, or the one ``where`` of the way through them); what the eager
    scan makes of the result."""
    lines = path.read_bytes().split(b"\n")
    chunks = [index for index, old in enumerate(lines) if b'"assistant/chunk"' in old]
    index = chunks[int(where * len(chunks))]
    lines[index] = line.replace(b"SEQ", str(index - 1).encode())
    path.write_bytes(b"\n".join(lines))
    return _eager(path)


async def _written(tmp_path: Path) -> tuple[JsonlStore, Path]:
    store = JsonlStore(tmp_path)
    session = make_session("lazy", turns=3)
    await persist(store, session)
    return store, Path(str(store.locate(dict(session.header))))


async def test_lazy_events_read_back_with_the_same_values(tmp_path: Path) -> None:
    store, path = await _written(tmp_path)
    stored = await store.read("lazy")
    lines = path.read_bytes().split(b"\n")[1:-1]
    assert [stored.events[i] for i in range(len(lines))] == [decode_event(line) for line in lines]
    assert [event.to_json() for event in stored.events] == _eager(path)
    assert stored.live().derive_messages() == (await JsonlStore(tmp_path).read("lazy")).live().derive_messages()


@pytest.mark.parametrize(
    "broken",
    [
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"x":}}',  # not JSON
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{},"extra":1}',  # unknown key
        b'{"type":"assistant/chunk","seq":SEQ,"time":"1","data":{}}',  # wrong envelope type
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":-0}}',  # negative zero
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{},"sourceEventSeqs":[0]}',
        b'{"type":"step/end","seq":SEQ,"time":-1,"data":{}}',  # negative time
        b'{"type":"tool/call","seq":SEQ,"time":1,"data":{},"surfaceOp":"append"}',
        b'{"type":"turn/end","seq":99,"time":1,"data":{}}',  # seq gap
        # What skipping data does not check by itself: UTF-8 inside strings, float overflow.
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"t":"\x80"}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"t":"\xed\xa0\x80"}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":1.5e999}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":1E+999}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":1' + b"0" * 320 + b'.0}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":' + b"7" * 4400 + b"}}",
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":[-0.0]}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":-0e5}}',
        # Not JSON inside data: the skip checks syntax as a full decode does.
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"t":"open}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"t":"a" "b"}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":[1,]}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"t":"\\q"}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"t":"\\ud800"}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":01}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":1.}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"t":"tab\there"}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":' + b"[" * 5000 + b"]" * 5000 + b"}",
        # Two values on one line, or one line that is not an object.
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{}}{"type":"x"}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{}} 1',
        b"   ",
        b"",
        b"[]",
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{},"surface_first":true}',
    ],
)
async def test_a_broken_lazy_line_fails_as_the_eager_scan_does(tmp_path: Path, broken: bytes) -> None:
    store, path = await _written(tmp_path)
    expected = _put(path, broken)
    assert isinstance(expected, str)
    with pytest.raises(CorruptSessionLog) as info:
        await store.read("lazy")
    assert str(info.value) == expected


@pytest.mark.parametrize(
    "line",
    [
        # Valid lines that hold what the search for skipped trouble looks at: each reads back
        # exactly as the eager scan reads it.
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":1.5e-05,"w":-3,"t":"2026-07-14"}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":1e308,"w":' + b"9" * 299 + b"}}",
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"t":"file1 e0 -0 1e999"}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"t":"\xc3\xa9t\xc3\xa9 \xe4\xbd\xa0"}}',
        b' {"type":"step/end","seq":SEQ,"time":1,"data":{}}\t',
        b'{"seq":SEQ,"data":{"x":[]},"time":0,"type":"tool/call"}',
        b'{"type":"my/plugin","seq":SEQ,"time":1,"data":{"n":-1}}',
    ],
)
async def test_a_valid_line_reads_back_as_the_eager_scan_reads_it(tmp_path: Path, line: bytes) -> None:
    store, path = await _written(tmp_path)
    expected = _put(path, line)
    assert isinstance(expected, list)
    stored = await store.read("lazy")
    assert [event.to_json() for event in stored.events] == expected
    assert [event.to_json() for event in (await store.read("lazy")).events[::-1]] == expected[::-1]


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":-0}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":1e999}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"x":}}',
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":1e99,"t":"2026-07-14"}}',
    ],
)
@pytest.mark.parametrize("where", [0.4, 0.97])
async def test_a_line_deep_in_a_long_log_reads_back_as_the_eager_scan_reads_it(
    tmp_path: Path, line: bytes, where: float
) -> None:
    # Long enough for the scan to take it in several blocks; the line is in a later one.
    store = JsonlStore(tmp_path)
    session = make_session("lazy", turns=400)
    await persist(store, session)
    expected = _put(Path(str(store.locate(dict(session.header)))), line, where)
    try:
        stored = await store.read("lazy")
    except StoreError as exc:
        assert str(exc) == expected
    else:
        assert [event.to_json() for event in stored.events] == expected


# -- a log damaged at random reads back as the eager scan reads it ----------------------------

_SNIPPETS = [
    b"\n", b"{", b"}", b"[", b"]", b'"', b":", b",", b" ", b"\\", b"-0", b"-", b"0", b"1e999",
    b"e", b"E", b"+", b"\x80", b"\xc3\xa9", b"\xff", b"\r", b"null", b'"x":1,', b"9" * 320,
]


def _log(turns: int, open_turn: bool) -> bytes:
    session = make_session("rand", turns=0)
    for index in range(turns):
        closed_turn(session, f"text {index} 2026-07-14 1e5 \u00e9")
    if open_turn:
        open_tool_turn(session)

    async def write(root: str) -> bytes:
        store = JsonlStore(root)
        await persist(store, session)
        await store.close()
        return Path(str(store.locate(dict(session.header)))).read_bytes()

    with tempfile.TemporaryDirectory() as root:
        return asyncio.run(write(root))


_LOGS = {(turns, open_turn): _log(turns, open_turn) for turns in (1, 3) for open_turn in (False, True)}

# Members a decode accepts as JSON that the load refuses or must decode in full, put at the start
# of an object (the envelope, or an object inside data).
_MEMBERS = [
    b'"v":-0,', b'"v":[-0.0],', b'"v":1e999,', b'"v":1E+400,', b'"v":1.5e-5,', b'"v":"\x80",',
    b'"v":"\xe4\xbd\xa0",', b'"v":' + b"1" * 310 + b".5,", b'"v":"2026-07-14 e5",', b'"v":{},',
]

_WHERE = st.floats(0, 1, exclude_max=True)
_DAMAGE = st.lists(
    st.tuples(
        st.sampled_from(["overwrite", "insert", "delete", "truncate"]),
        _WHERE,
        st.sampled_from(_SNIPPETS) | st.binary(min_size=1, max_size=3),
    )
    | st.tuples(st.just("member"), _WHERE, st.sampled_from(_MEMBERS)),
    min_size=1,
    max_size=3,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=st.sampled_from([1, 3]), open_turn=st.booleans(), damage=_DAMAGE)
def test_a_randomly_damaged_log_reads_back_as_the_eager_scan_reads_it(
    turns: int, open_turn: bool, damage: list[tuple[str, float, bytes]]
) -> None:
    data = _LOGS[turns, open_turn]
    header_end = data.index(b"\n") + 1
    for how, where, snippet in damage:  # the header line stays intact
        at = header_end + int(where * (len(data) - header_end))
        if how == "overwrite":
            data = data[:at] + snippet + data[at + len(snippet) :]
        elif how == "insert":
            data = data[:at] + snippet + data[at:]
        elif how == "delete":
            data = data[:at] + data[at + len(snippet) :]
        elif how == "member":
            braces = [i for i in range(header_end, len(data)) if data[i] == ord("{")]
            if braces:
                at = braces[int(where * len(braces))] + 1
                data = data[:at] + snippet + data[at:]
        else:
            data = data[:at]
    with tempfile.TemporaryDirectory() as root:

        async def read() -> object:
            store = JsonlStore(root)
            path = Path(str(store.locate({"id": "rand", "cwd": "/home/dev/p"})))
            path.parent.mkdir(parents=True)
            path.write_bytes(data)
            expected = _eager(path)
            try:
                stored = await store.read("rand")
            except StoreError as exc:
                got: object = str(exc)
            else:
                got = [event.to_json() for event in stored.events]
            await store.close()
            assert got == expected

        asyncio.run(read())
