"""Torn and corrupt session logs: load either keeps everything committed or refuses cleanly.

Complements ``tests/persistence/test_jsonl.py`` (which cuts inside the last line and applies one
flip/delete/insert/newline/truncate to small synthetic logs): here the logs are real agent-loop
logs with tool calls, truncation is tried at *every* byte offset, and the corruptions are
compound (several flipped bits, duplicated, missing or swapped lines, wrong headers, invalid
UTF-8, lines split in two, multi-megabyte lines), for the JSONL store, the SQLite store and the
``dsh chat --resume`` command. The oracle is ``support.check_corrupt_outcome``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
import re
import shutil
import sqlite3
import tempfile
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dsh.persistence.base import CorruptSessionLog, StoreError, UnsupportedVersion
from dsh.persistence.sqlite import SqliteStore
from dsh.session import decode_event, encode_event
from tests.reliability.support import (
    CORRUPTIONS,
    bucket_of,
    build_base_log,
    check_jsonl_corruption,
    corrupt,
    decode,
    expected_closers,
    first_damaged_line,
    load_corrupted_jsonl,
    run_dsh,
    scratch_dir,
)

SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@cache
def base_logs() -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as root:
        return {
            "closed": build_base_log(Path(root) / "closed"),
            "open": build_base_log(Path(root) / "open", open_turn=True),
            "compact-open": build_base_log(Path(root) / "compact", open_turn=True, compact=True),
        }


def test_base_logs_are_valid_and_realistic() -> None:
    logs = base_logs()
    for data in logs.values():
        assert load_corrupted_jsonl(data, data).startswith("loaded")
    types = [decode(line)["type"] for line in logs["open"].split(b"\n")[1:-1]]
    assert types.count("tool/call") == 4 and types.count("turn/end") == 3
    closers = expected_closers([decode(line) for line in logs["open"].split(b"\n")[1:-1]])
    assert [c["type"] for c in closers] == ["tool/result", "step/end", "turn/end"]


@pytest.mark.slow
def test_truncation_at_every_offset_of_a_real_log(tmp_path: Path) -> None:
    """Every prefix of a log (two turns, two echo calls, an open turn with a pending call) is a
    state a crashed writer could leave: each must load, keep every complete line before the cut,
    and be closed with exactly the reference's crash closers."""
    data = base_logs()["compact-open"]

    async def sweep(root: Path) -> collections.Counter[str]:
        seen: collections.Counter[str] = collections.Counter()
        for offset in range(len(data) + 1):
            try:
                seen[await check_jsonl_corruption(root, data, data[:offset])] += 1
            except AssertionError as exc:
                raise AssertionError(f"truncated at byte {offset} of {len(data)}: {exc}") from exc
        return seen

    with tempfile.TemporaryDirectory(dir=scratch_dir()) as root:
        seen = asyncio.run(sweep(Path(root)))
    assert sum(seen.values()) == len(data) + 1
    refused = {label for label in seen if label.startswith("refused")}
    # Only a cut inside the header line may refuse; everything after it loads.
    assert refused == {"refused: empty or header-less session log"}, seen
    assert seen["refused: empty or header-less session log"] == data.index(b"\n") + 1
    # Cuts inside the tool-calling step leave pending calls: 2 results + step/end + turn/end.
    assert any(label.startswith("loaded (closers=4") for label in seen), seen


@pytest.mark.slow
@SETTINGS
@given(
    which=st.sampled_from(["closed", "open"]),
    how=st.sampled_from(CORRUPTIONS),
    rng=st.randoms(use_true_random=False),
)
def test_compound_corruptions_of_a_real_log(which: str, how: str, rng: random.Random) -> None:
    original = base_logs()[which]
    corrupted = corrupt(original, how, rng)
    label = load_corrupted_jsonl(original, corrupted)
    event(f"{how}: {label}")


@pytest.mark.slow
def test_each_corruption_kind_is_exercised() -> None:
    """The corruptions above are not vacuous: each kind changes the file, and the seeded run
    below sees both outcomes."""
    original = base_logs()["open"]
    rng = random.Random(7)
    outcomes: dict[str, set[str]] = collections.defaultdict(set)
    for how in CORRUPTIONS:
        for _ in range(6):
            corrupted = corrupt(original, how, rng)
            assert corrupted != original or how in ("truncate", "flip"), how
            outcomes[how].add(load_corrupted_jsonl(original, corrupted).split(" ")[0])
    assert {"refused:", "loaded"} <= set().union(*outcomes.values())
    for how in ("duplicate-line", "missing-line", "wrong-header", "invalid-utf8", "huge-line"):
        assert "refused:" in outcomes[how], (how, outcomes[how])


# -- SQLite ------------------------------------------------------------------------------------

SQLITE_CORRUPTIONS = ("flip", "invalid-utf8", "delete-row", "rekey-row", "drop-tail", "huge-line", "header")


def _sqlite_rows(path: Path, session_id: str) -> tuple[bytes, list[tuple[int, bytes]]]:
    db = sqlite3.connect(path)
    try:
        db.text_factory = bytes
        header = db.execute("SELECT header FROM sessions WHERE id = ?", (session_id,)).fetchone()[0]
        rows = db.execute(
            "SELECT seq, line FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
    finally:
        db.close()
    return header, rows


def _corrupt_sqlite(path: Path, session_id: str, how: str, rng: random.Random) -> int:
    """Damage the stored session; returns the 1-based first damaged row (0 for the header)."""
    _, rows = _sqlite_rows(path, session_id)
    index = rng.randrange(len(rows))
    seq, line = rows[index]
    db = sqlite3.connect(path, isolation_level=None)
    try:
        if how == "flip":
            damaged = bytearray(line)
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
            db.execute("UPDATE events SET line = ? WHERE session_id = ? AND seq = ?", (bytes(damaged), session_id, seq))
        elif how == "invalid-utf8":
            at = rng.randrange(len(line) + 1)
            db.execute(
                "UPDATE events SET line = ? WHERE session_id = ? AND seq = ?",
                (line[:at] + b"\xed\xa0\x80" + line[at:], session_id, seq),
            )
        elif how == "delete-row":
            db.execute("DELETE FROM events WHERE session_id = ? AND seq = ?", (session_id, seq))
        elif how == "rekey-row":
            db.execute("UPDATE events SET seq = ? WHERE session_id = ? AND seq = ?", (len(rows) + 5, session_id, seq))
        elif how == "drop-tail":
            db.execute("DELETE FROM events WHERE session_id = ? AND seq >= ?", (session_id, seq))
            return len(rows) + 1
        elif how == "huge-line":
            db.execute(
                "UPDATE events SET line = ? WHERE session_id = ? AND seq = ?",
                ("x" * (3 << 20), session_id, seq),
            )
        else:
            db.execute("UPDATE sessions SET header = ? WHERE id = ?", ('{"type":"session","version":1}', session_id))
            return 0
    finally:
        db.close()
    return index + 1


@pytest.mark.slow
@SETTINGS
@given(
    which=st.sampled_from(["closed", "open"]),
    how=st.sampled_from(SQLITE_CORRUPTIONS),
    rng=st.randoms(use_true_random=False),
)
def test_sqlite_row_corruptions(which: str, how: str, rng: random.Random) -> None:
    original = base_logs()[which]
    lines = original.split(b"\n")[:-1]
    header = json.loads(lines[0])
    session_id = header.pop("id")
    events = [decode_event(line) for line in lines[1:]]

    async def scenario(path: Path) -> str:
        store = SqliteStore(path)
        await store.create({"id": session_id, **{k: v for k, v in header.items() if k != "type"}})
        await store.append(session_id, events)
        await store.close()
        damaged = _corrupt_sqlite(path, session_id, how, rng)
        before = _sqlite_rows(path, session_id)
        store = SqliteStore(path)
        try:
            loaded = await store.load(session_id)
        except (CorruptSessionLog, UnsupportedVersion) as exc:
            text = str(exc)
            assert "\n" not in text
            assert text.startswith(("corrupt session log", "unsupported session")), text
            for number in [int(n) for n in re.findall(r"\brow (\d+)", text)]:
                assert number >= damaged, f"{text} names a row before the damage (row {damaged})"
            assert _sqlite_rows(path, session_id) == before, "a refused session was modified"
            return "refused: " + text.split(": ", 1)[-1].split(" at row")[0][:50]
        except StoreError as exc:
            raise AssertionError(f"unexpected store error {exc!r}") from exc
        finally:
            await store.close()
        after = _sqlite_rows(path, session_id)
        kept_rows = before[1][: damaged - 1] if damaged else []
        assert after[1][: len(kept_rows)] == kept_rows, "rows before the damage changed"
        assert [encode_event(e) for e in loaded.events] == [line for _, line in after[1]]
        assert [seq for seq, _ in after[1]] == list(range(len(after[1])))
        return f"loaded (repaired={loaded.repaired})"

    with tempfile.TemporaryDirectory(dir=scratch_dir()) as root:
        label = asyncio.run(scenario(Path(root) / "s.sqlite3"))
    event(f"{how}: {label}")


# -- through the CLI ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A real ``dsh chat`` log (mock-echo, two turns, one calling the echo tool)."""
    cwd = tmp_path_factory.mktemp("corrupt-cli")
    result = run_dsh(["chat", "--root", ".sessions"], cwd, stdin="hello\necho hi\n")
    assert result.returncode == 0, result.stderr
    [log] = list(bucket_of(cwd / ".sessions", cwd).glob("*.jsonl"))
    return log, log.read_bytes()


def _cli_corruption(data: bytes, how: str) -> bytes:
    lines = data.split(b"\n")[:-1]
    if how == "seq-gap":
        del lines[4]
    elif how == "invalid-utf8":
        lines[3] = lines[3][:30] + b"\xc3\x28" + lines[3][30:]
    elif how == "wrong-header":
        lines[0] = lines[0].replace(b'"type":"session"', b'"type":"sessions"')
    elif how == "huge-line":
        lines.insert(5, b'{"type":"note","seq":4,"data":"' + b"A" * (5 << 20) + b'"')
    elif how == "header-less":
        return lines[0][:-3]
    return b"\n".join(lines) + b"\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "needle"),
    [
        # One line number, the file's (the header is line 1), as `sed -n Np` counts.
        ("seq-gap", "seq gap in committed region at file line 5 (expected 3, got 4)"),
        ("invalid-utf8", "unparsable committed event at file line 4"),
        ("wrong-header", "first line is not a session header"),
        ("huge-line", "unparsable committed event at file line 6"),
        ("header-less", "empty or header-less session log"),
    ],
)
def test_resume_of_a_corrupt_log_is_one_line_and_touches_nothing(
    chat_log: tuple[Path, bytes], tmp_path: Path, how: str, needle: str
) -> None:
    log, data = chat_log
    cwd = tmp_path / "project"
    target = bucket_of(cwd / ".sessions", cwd) / log.name
    target.parent.mkdir(parents=True)
    shutil.copy(log, target)
    corrupted = _cli_corruption(data, how)
    target.write_bytes(corrupted)
    assert first_damaged_line(data, corrupted) >= 1
    result = run_dsh(["chat", "--resume", log.stem, "--root", ".sessions"], cwd, stdin="more\n")
    assert result.returncode == 1, (result.stdout, result.stderr)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("dsh: ") and needle in line, line
    assert "Traceback" not in result.stderr
    assert target.read_bytes() == corrupted
    assert sorted(p.name for p in target.parent.iterdir()) == [log.name]
    if how == "seq-gap":
        shown = run_dsh(["sessions", "show", log.stem, "--root", ".sessions"], cwd)
        assert shown.returncode == 1 and needle in shown.stderr, shown.stderr
        assert target.read_bytes() == corrupted
