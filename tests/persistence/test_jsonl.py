"""JSONL store specifics: reference fixtures, byte layout, corruption, torn tails, modes, ids.

Hypothesis properties run each example on a fresh temporary root with ``asyncio.run`` (the
store does its I/O synchronously, so nothing is lost by not sharing the test's loop).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from store_support import closed_turn, events_json, header_of, make_session, open_tool_turn, persist
from tests.fixtures import FIXTURES

from dsh.persistence import jsonl
from dsh.persistence._paths import MAX_ENCODED_ID, decode_session_id, encode_session_id
from dsh.persistence.base import (
    CorruptSessionLog,
    InvalidSessionId,
    SessionNotFound,
    StoreError,
    UnsupportedVersion,
)
from dsh.persistence.jsonl import JsonlStore
from dsh.session import Session

FIXTURE_LOGS = sorted(p for p in FIXTURES.glob("*.jsonl") if p.name != "crash-before-repair.jsonl")


def place(store: JsonlStore, source: Path | bytes) -> tuple[str, Path]:
    """Put a log at the store's ``locate()`` path; returns its id and path."""
    data = source if isinstance(source, bytes) else source.read_bytes()
    header = json.loads(data.split(b"\n", 1)[0])
    located = store.locate(header)
    assert located is not None
    path = Path(located)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return header["id"], path


# -- reference fixtures ------------------------------------------------------------------------


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="reference fixtures are not available")
@pytest.mark.parametrize("fixture", FIXTURE_LOGS, ids=lambda p: p.stem)
async def test_fixture_loads_and_derives_exactly(fixture: Path, tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    session_id, path = place(store, fixture)
    stored = await store.load(session_id)
    assert stored.repaired == 0 and stored.truncated_bytes == 0
    assert path.read_bytes() == fixture.read_bytes()  # a balanced log is never rewritten
    assert stored.session is not None
    derived = json.loads(fixture.with_suffix(".derived.json").read_text())
    assert stored.session.derive_messages() == derived
    naive = Session(session_id, [e.to_json() for e in stored.events], header=stored.header)
    assert naive.derive_messages() == derived
    assert await store.export(session_id) == fixture.read_bytes()
    await store.close()


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="reference fixtures are not available")
async def test_crash_fixture_repair_is_byte_identical(tmp_path: Path) -> None:
    before = (FIXTURES / "crash-before-repair.jsonl").read_bytes()
    after = (FIXTURES / "crash-after-repair.jsonl").read_bytes()
    store = JsonlStore(tmp_path)
    session_id, path = place(store, before)
    read = await store.read(session_id)  # read-only: no repair, no truncation
    assert len(read.events) == 28
    assert path.read_bytes() == before
    stored = await store.load(session_id)
    assert path.read_bytes() == after
    assert stored.repaired == 3
    assert stored.truncated_bytes == 142
    lines = after.split(b"\n")[1:-1]
    assert [jsonl.encode_event(e) for e in stored.events] == lines
    derived = json.loads((FIXTURES / "crash-after-repair.derived.json").read_text())
    assert stored.session is not None and stored.session.derive_messages() == derived
    await store.release(session_id)
    again = await store.load(session_id)
    assert again.repaired == 0 and path.read_bytes() == after
    await store.close()


# -- layout ------------------------------------------------------------------------------------


async def test_layout_header_and_lines(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "root")
    session = make_session("main-session-1", cwd="/home/dev/echo", created_at=42)
    await persist(store, session)
    bucket = "cwd-" + hashlib.sha256(b"/home/dev/echo").hexdigest()[:12]
    path = tmp_path / "root" / bucket / "main-session-1.jsonl"
    assert store.locate(session.header) == str(path)
    data = path.read_bytes()
    lines = data.split(b"\n")
    assert lines[0] == (
        b'{"type":"session","version":0,"id":"main-session-1","createdAt":42,"cwd":"/home/dev/echo"}'
    )
    assert lines[-1] == b"" and len(lines) == len(session) + 2
    assert lines[1:-1] == [jsonl.encode_event(e) for e in session.events]
    assert sorted(os.listdir(path.parent)) == ["main-session-1.jsonl"]  # no temp file left

    no_cwd = make_session("loose", cwd=None)
    no_cwd.header["parentSession"] = "main-session-1"
    no_cwd.header["seedLength"] = 3
    await persist(store, no_cwd)
    first = (tmp_path / "root" / "_no-cwd" / "loose.jsonl").read_bytes().split(b"\n")[0]
    assert first == (
        b'{"type":"session","version":0,"id":"loose","createdAt":1783990800000,'
        b'"parentSession":"main-session-1","seedLength":3}'
    )


async def test_resume_finds_the_log_in_any_bucket(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    await persist(store, make_session("wanderer", cwd="/somewhere/else"))
    loaded = await JsonlStore(tmp_path).load("wanderer")
    assert loaded.header["cwd"] == "/somewhere/else"


@pytest.mark.parametrize("mask", [0o000, 0o077, 0o022])
async def test_modes_regardless_of_umask(
    tmp_path: Path, umask: Callable[[int], None], mask: int
) -> None:
    umask(mask)
    root = tmp_path / "deep" / "root"
    store = JsonlStore(root)
    session = make_session("modes")
    await store.create(header_of(session))
    await store.append("modes", list(session.events))
    path = Path(store.locate(session.header) or "")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "deep").stat().st_mode) == 0o700
    locks = root / ".locks"
    assert stat.S_IMODE(locks.stat().st_mode) == 0o700
    assert stat.S_IMODE((locks / "modes.lock").stat().st_mode) == 0o600
    await store.close()
    assert not (locks / "modes.lock").exists()  # released locks are unlinked


# -- ids ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("session_id", "encoded"),
    [
        (
            "main-session-06342468-22ea-47ce-9478-9f7ded340c7a",
            "main-session-06342468-22ea-47ce-9478-9f7ded340c7a",
        ),
        ("A.b_c-9", "A.b_c-9"),
        ("a~b", "a~007Eb"),
        ("a b/c", "a~0020b~002Fc"),
        (".", "~002E"),
        ("..", "~002E~002E"),
        ("...", "~002E~002E~002E"),
        (".hidden", ".hidden"),
        ("../../etc/passwd", "..~002F..~002Fetc~002Fpasswd"),
        ("/abs", "~002Fabs"),
        ("nul\x00byte", "nul~0000byte"),
        ("é", "~00E9"),
        ("😀", "~D83D~DE00"),
        ("back\\slash", "back~005Cslash"),
    ],
)
def test_id_encoding(session_id: str, encoded: str) -> None:
    assert encode_session_id(session_id) == encoded
    assert decode_session_id(encoded) == session_id


def test_bad_ids() -> None:
    with pytest.raises(InvalidSessionId, match="must not be empty"):
        encode_session_id("")
    encode_session_id("x" * MAX_ENCODED_ID)
    with pytest.raises(InvalidSessionId, match="too long for a file name"):
        encode_session_id("x" * (MAX_ENCODED_ID + 1))
    with pytest.raises(InvalidSessionId, match="too long"):
        encode_session_id("/" * 50)  # 250 once encoded


HOSTILE = [
    "..",
    ".",
    "../escape",
    "/",
    "a/../../b",
    "\x00",
    "~",
    "~002E",
    "CON",
    " ",
    "\n",
    "😀" * 10,
]


@pytest.mark.parametrize("session_id", HOSTILE)
async def test_hostile_ids_stay_inside_the_root(tmp_path: Path, session_id: str) -> None:
    root = tmp_path / "root"
    store = JsonlStore(root)
    session = make_session(session_id, cwd="/x")
    await persist(store, session)
    inside = {p for p in tmp_path.rglob("*")}
    assert all(root in p.parents or p == root for p in inside)
    logs = [p for p in root.rglob("*.jsonl")]
    assert len(logs) == 1 and logs[0].parent.parent == root
    loaded = await store.load(session_id)
    assert loaded.header["id"] == session_id
    assert [info.id for info in await store.list()] == [session_id]
    await store.close()


async def test_distinct_ids_never_share_a_file(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    for session_id in ("~002E", ".", "a~007Eb", "a~b"):
        await persist(store, make_session(session_id))
    assert sorted(info.id for info in await store.list()) == sorted(
        ["~002E", ".", "a~007Eb", "a~b"]
    )


async def test_long_id_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    with pytest.raises(InvalidSessionId, match="too long for a file name"):
        await store.create({"version": 0, "id": "é" * 100, "createdAt": 1})
    assert not any(tmp_path.iterdir())


# -- load: header errors, corruption, torn tails -----------------------------------------------


@pytest.mark.parametrize(
    ("content", "error", "text"),
    [
        (b"", CorruptSessionLog, "empty or header-less session log: "),
        (
            b'{"type":"session","version":0,"id":"x","createdAt":1}',
            CorruptSessionLog,
            "empty or header-less",
        ),
        (b"{not json\n", CorruptSessionLog, "header line is not valid JSON"),
        (
            b'{"type":"other","version":0,"id":"x","createdAt":1}\n',
            CorruptSessionLog,
            "first line is not a session header",
        ),
        (
            b'{"type":"session","version":"0","id":"x","createdAt":1}\n',
            CorruptSessionLog,
            "first line is not a session header",
        ),
        (
            b'{"type":"session","version":0,"id":7,"createdAt":1}\n',
            CorruptSessionLog,
            "first line is not a session header",
        ),
        (b"[1]\n", CorruptSessionLog, "first line is not a session header"),
        (
            b'{"type":"session","version":1,"id":"x","createdAt":1}\n',
            UnsupportedVersion,
            'unsupported session format version 1 for "x" (only v0 is supported)',
        ),
        (
            b'{"type":"session","version":0,"id":"y","createdAt":1}\n',
            CorruptSessionLog,
            'header names session "y"',
        ),
    ],
)
async def test_header_errors(
    tmp_path: Path, content: bytes, error: type[Exception], text: str
) -> None:
    store = JsonlStore(tmp_path)
    path = tmp_path / "_no-cwd" / "x.jsonl"
    path.parent.mkdir()
    path.write_bytes(content)
    for call in (store.load, store.read):
        with pytest.raises(error) as info:
            await call("x")
        assert text in str(info.value)
    assert path.read_bytes() == content
    assert store.stored_count("x") is None
    # The failed load released its lock.
    assert not (tmp_path / ".locks" / "x.lock").exists()


async def _persisted(
    tmp_path: Path, turns: int = 3, *, open_turn: bool = False
) -> tuple[JsonlStore, Session, Path]:
    store = JsonlStore(tmp_path)
    session = make_session("log", turns=turns)
    if open_turn:
        open_tool_turn(session)
    await persist(store, session)
    return store, session, Path(store.locate(session.header) or "")


async def test_unparsable_committed_line_is_refused_and_file_untouched(tmp_path: Path) -> None:
    store, _session, path = await _persisted(tmp_path)
    lines = path.read_bytes().split(b"\n")
    lines[5] = lines[5][:-3] + b"@@@"  # event index 4, file line 6
    data = b"\n".join(lines)
    path.write_bytes(data)
    with pytest.raises(CorruptSessionLog) as info:
        await store.load("log")
    assert str(info.value) == f"corrupt session log: unparsable committed event at line 5 ({path}, file line 6)"
    assert path.read_bytes() == data
    with pytest.raises(CorruptSessionLog):
        await store.read("log")
    assert path.read_bytes() == data


async def test_seq_gap_in_committed_region(tmp_path: Path) -> None:
    store, _session, path = await _persisted(tmp_path)
    lines = path.read_bytes().split(b"\n")
    del lines[3]  # event seq 2 (file line 4) goes missing
    data = b"\n".join(lines)
    path.write_bytes(data)
    with pytest.raises(CorruptSessionLog) as info:
        await store.load("log")
    assert str(info.value) == (
        f"corrupt session log: seq gap in committed region at line 3 (expected 2, got 3) ({path}, file line 4)"
    )
    assert path.read_bytes() == data


async def test_surface_violation_is_corruption(tmp_path: Path) -> None:
    store, _session, path = await _persisted(tmp_path)
    data = path.read_bytes().replace(b',"surfaceOp":"append"}', b"}", 1)
    path.write_bytes(data)
    with pytest.raises(
        CorruptSessionLog,
        match=r"^corrupt session log: invalid event at line 2: .*requires a surfaceOp.*, file line 3\)$",
    ):
        await store.load("log")
    assert path.read_bytes() == data


async def test_negative_zero_is_refused(tmp_path: Path) -> None:
    store, _session, path = await _persisted(tmp_path)
    original = path.read_bytes()
    lines = original.split(b"\n")
    lines[2] = lines[2].replace(b'"source":{"kind":"user"}', b'"source":{"kind":"user","n":-0.0}')
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(CorruptSessionLog, match=r"unparsable committed event at line 2 \(.*, file line 3\)"):
        await store.load("log")
    # A "-0" inside a string is fine.
    lines[2] = original.split(b"\n")[2].replace(b'"text":"message 0"', b'"text":"x:-0,[-0"')
    path.write_bytes(b"\n".join(lines))
    loaded = await store.load("log")
    assert loaded.events[1].data["content"][0]["text"] == "x:-0,[-0"


async def test_torn_tail_is_truncated(tmp_path: Path) -> None:
    store, session, path = await _persisted(tmp_path, turns=2)
    good = path.read_bytes()
    path.write_bytes(good + b'{"type":"turn/start","seq":14,"ti')
    loaded = await store.load("log")
    assert loaded.truncated_bytes == 33 and loaded.repaired == 0
    assert path.read_bytes() == good
    assert events_json(loaded.events) == events_json(session.events)


async def test_unparsable_lines_after_the_last_turn_end_are_torn(tmp_path: Path) -> None:
    store, session, path = await _persisted(tmp_path, turns=2, open_turn=True)
    good = path.read_bytes()
    path.write_bytes(good + b"garbage\n" + good.split(b"\n")[3] + b"\n")
    loaded = await store.load("log")
    # The open turn's complete events survive; the garbage and what follows it are cut.
    assert events_json(loaded.events[: len(session)]) == events_json(session.events)
    assert loaded.repaired == 3
    assert path.read_bytes().startswith(good)
    assert len(path.read_bytes().split(b"\n")) == len(session) + 3 + 2


async def test_seq_error_after_the_last_turn_end_is_torn(tmp_path: Path) -> None:
    store, _session, path = await _persisted(tmp_path, turns=1)
    good = path.read_bytes()
    stray = good.split(b"\n")[1]  # seq 0 again
    path.write_bytes(good + stray + b"\n")
    loaded = await store.load("log")
    assert loaded.truncated_bytes == len(stray) + 1 and loaded.repaired == 0
    assert path.read_bytes() == good


async def test_read_neither_locks_nor_repairs(tmp_path: Path) -> None:
    store, session, path = await _persisted(tmp_path, turns=1, open_turn=True)
    data = path.read_bytes() + b'{"torn'
    path.write_bytes(data)
    holder = JsonlStore(tmp_path)
    await holder.create({"version": 0, "id": "other", "createdAt": 1})
    read = await store.read("log")
    assert len(read.events) == len(session) and read.repaired == 0
    assert path.read_bytes() == data
    assert await store.export("log") == data[: -len(b'{"torn')]
    await holder.close()


async def test_failed_append_is_cut_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = JsonlStore(tmp_path)
    session = make_session("flaky", turns=1)
    await persist(store, session, release=False)
    path = Path(store.locate(session.header) or "")
    good = path.read_bytes()
    before = len(session)
    closed_turn(session, "more")
    real_fsync = os.fsync
    calls = {"n": 0}

    def failing_fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output error"):
        await store.append("flaky", list(session.events)[before:])
    assert path.read_bytes() == good
    assert store.stored_count("flaky") == before
    await store.append("flaky", list(session.events)[before:])  # the retry writes it once
    monkeypatch.undo()
    await store.release("flaky")
    loaded = await store.load("flaky")
    assert events_json(loaded.events) == events_json(session.events)


async def test_failed_first_append_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path)
    session = make_session("first", turns=1)
    await store.create(header_of(session))

    def broken_link(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "link", broken_link)
    with pytest.raises(OSError, match="No space"):
        await store.append("first", list(session.events))
    monkeypatch.undo()
    path = Path(store.locate(session.header) or "")
    assert not path.exists() and os.listdir(path.parent) == []
    await store.append("first", list(session.events))
    assert len(path.read_bytes().split(b"\n")) == len(session) + 2


async def test_list_reads_only_headers_and_skips_junk(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    await persist(store, make_session("ok", created_at=5))
    bucket = tmp_path / "_no-cwd"
    bucket.mkdir()
    (bucket / "junk.jsonl").write_bytes(b"not json\n{}\n")
    (bucket / "headeronly.jsonl").write_bytes(
        b'{"type":"session","version":0,"id":"headeronly","createdAt":9}\n'
    )
    (bucket / "torn.jsonl").write_bytes(
        b'{"type":"session","version":0,"id":"torn","createdAt":9}\n{"ty'
    )
    (bucket / "ok.jsonl.0123456789ab.tmp").write_bytes(b"")
    (tmp_path / "not-a-bucket").mkdir()
    (tmp_path / "not-a-bucket" / "x.jsonl").write_bytes(
        b'{"type":"session","version":0,"id":"x","createdAt":9}\n{}\n'
    )
    # A huge committed log is listed from its first lines only.
    big = make_session("big", created_at=7)
    await persist(store, big)
    infos = await store.list()
    assert [i.id for i in infos] == ["big", "ok"]
    assert infos[0].location == store.locate(big.header)
    assert infos[0].modified_ms is not None


# -- hypothesis properties ---------------------------------------------------------------------

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


def _session_from(texts: list[str], open_turn: bool) -> Session:
    session = make_session("prop", turns=0)
    for text in texts:
        closed_turn(session, text)
    if open_turn:
        open_tool_turn(session)
    return session


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(TEXT, min_size=1, max_size=4), open_turn=st.booleans())
def test_save_load_save_is_byte_identical(texts: list[str], open_turn: bool) -> None:
    session = _session_from(texts, open_turn)
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:

        async def scenario() -> None:
            first = JsonlStore(a)
            await persist(first, session)
            loaded = await first.load("prop")
            saved = Path(first.locate(session.header) or "").read_bytes()
            second = JsonlStore(b)
            await second.create(loaded.header)
            await second.append("prop", loaded.events)
            assert Path(second.locate(loaded.header) or "").read_bytes() == saved
            await first.close()
            await second.close()

        _run(scenario())


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(texts=st.lists(TEXT, min_size=1, max_size=3), cut=st.floats(0, 1, exclude_max=True))
def test_cutting_inside_the_last_line_loses_nothing_committed_before_it(
    texts: list[str], cut: float
) -> None:
    session = _session_from(texts, False)
    with tempfile.TemporaryDirectory() as root:

        async def scenario() -> None:
            store = JsonlStore(root)
            await persist(store, session)
            path = Path(store.locate(session.header) or "")
            data = path.read_bytes()
            start = data.rindex(b"\n", 0, len(data) - 1) + 1
            at = start + int(
                cut * (len(data) - start)
            )  # anywhere in the last line, its \n included
            path.write_bytes(data[:at])
            loaded = await store.load("prop")
            kept = len(session) - 1
            assert events_json(loaded.events[:kept]) == events_json(list(session.events)[:kept])
            assert loaded.truncated_bytes == at - start
            assert path.read_bytes()[:start] == data[:start]
            # The turn whose turn/end was cut is closed as interrupted.
            assert loaded.events[-1].data["reason"] == {"kind": "interrupted"}
            await store.close()

        _run(scenario())


CORRUPTIONS = st.sampled_from(["flip", "delete", "insert", "newline", "truncate"])


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(TEXT, min_size=1, max_size=3),
    open_turn=st.booleans(),
    where=st.floats(0, 1, exclude_max=True),
    how=CORRUPTIONS,
    byte=st.integers(0, 255),
)
def test_random_corruption_never_loses_or_rewrites_committed_bytes(
    texts: list[str], open_turn: bool, where: float, how: str, byte: int
) -> None:
    session = _session_from(texts, open_turn)
    with tempfile.TemporaryDirectory() as root:

        async def scenario() -> None:
            store = JsonlStore(root)
            await persist(store, session)
            path = Path(store.locate(session.header) or "")
            data = path.read_bytes()
            at = int(where * len(data))
            if how == "flip":
                bad = (
                    data[:at]
                    + bytes([byte if byte != data[at] else (byte + 1) % 256])
                    + data[at + 1 :]
                )
            elif how == "delete":
                bad = data[:at] + data[at + 1 :]
            elif how == "insert":
                bad = data[:at] + bytes([byte]) + data[at:]
            elif how == "newline":
                bad = data[:at] + b"\n" + data[at:]
            else:
                bad = data[:at]
            path.write_bytes(bad)
            line_start = bad.rfind(b"\n", 0, at) + 1  # bytes before the damaged line are intact
            intact_events = max(0, bad.count(b"\n", 0, line_start) - 1)
            try:
                loaded = await store.load("prop")
            except (CorruptSessionLog, UnsupportedVersion) as exc:
                event(f"refused: {str(exc).split(': ', 1)[-1][:40]}")
                assert path.read_bytes() == bad  # a refused log is never touched
                return
            except StoreError as exc:
                raise AssertionError(f"unexpected store error {exc!r}") from exc
            event(f"loaded (repaired={loaded.repaired > 0}, torn={loaded.truncated_bytes > 0})")
            after = path.read_bytes()
            assert after[:line_start] == bad[:line_start]
            assert events_json(loaded.events[:intact_events]) == events_json(
                list(session.events)[:intact_events]
            )
            await store.release("prop")
            again = await store.load("prop")  # the repaired log is stable
            assert again.repaired == 0 and again.truncated_bytes == 0
            assert events_json(again.events) == events_json(loaded.events)
            await store.close()

        _run(scenario())


def test_missing_root_lists_nothing(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "absent")
    assert _run(store.list()) == []
    with pytest.raises(SessionNotFound):
        _run(store.load("x"))
    shutil.rmtree(tmp_path / "absent", ignore_errors=True)
