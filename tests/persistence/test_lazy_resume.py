"""Resume without a fold snapshot keeps log-only events as their lines (issue 20).

``assistant/chunk``, ``step/*``, ``tool/call`` and ``turn/end`` lines are checked with an
envelope struct that skips ``data`` and decoded on first access. Nothing of the load contract
may change: every event reads back with the same values, and a broken line gives exactly the
error the eager scan gives.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from store_support import make_session, persist

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
        b'{"type":"assistant/chunk","seq":SEQ,"time":1,"data":{"v":1' + b"0" * 320 + b'.0}}',
    ],
)
async def test_a_broken_lazy_line_fails_as_the_eager_scan_does(tmp_path: Path, broken: bytes) -> None:
    store, path = await _written(tmp_path)
    lines = path.read_bytes().split(b"\n")
    index = next(i for i, line in enumerate(lines) if b'"assistant/chunk"' in line)
    lines[index] = broken.replace(b"SEQ", str(index - 1).encode())
    path.write_bytes(b"\n".join(lines))
    expected = _eager(path)
    assert isinstance(expected, str)
    with pytest.raises(CorruptSessionLog) as info:
        await store.read("lazy")
    assert str(info.value) == expected
