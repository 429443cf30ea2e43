"""The zone each prompt carries from ``dsh run``/``dsh chat``, and the gap since the last exchange,
through the real CLI (mock-echo, keyless) and the stored log.

``dsh`` runs in a subprocess; where the wall clock matters it runs under time-machine (frozen,
``tick=False``), started by a two-line wrapper, so durations are exact.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.apps.conftest import dsh_env, run_dsh, session_files

T0 = 1_796_112_000  # 2026-12-01T08:00:00Z, in seconds
GAP = 3 * 86_400 + 2 * 3_600 + 5 * 60  # 3d 2h 5m
LINE = "Browser time zone for this request: {}. Interpret otherwise-unqualified dates and times in this zone."
FROZEN = (
    "import runpy, sys, time_machine\n"
    "time_machine.travel(float(sys.argv.pop(1)), tick=False).start()\n"
    "sys.argv[0] = 'dsh'\n"
    "runpy.run_module('dsh', run_name='__main__', alter_sys=True)\n"
)


def frozen_dsh(at: float, args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", FROZEN, str(at), *args],
        capture_output=True, text=True, cwd=cwd, env=dsh_env(**env), timeout=60,
    )


def events(cwd: Path) -> list[dict[str, object]]:
    [log] = session_files(cwd)
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]


def readings(cwd: Path) -> list[str]:
    return [
        e["data"]["content"][0]["text"]  # type: ignore[index]
        for e in events(cwd)
        if e["type"] == "context/message" and e["data"]["source"] == {"kind": "plugin", "plugin": "time-context"}  # type: ignore[index]
    ]


def prompt_sources(cwd: Path) -> list[dict[str, object]]:
    return [e["data"]["source"] for e in events(cwd) if e["type"] == "user/message"]  # type: ignore[index,misc]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    cwd = tmp_path / "project"
    cwd.mkdir()
    return cwd


@pytest.mark.slow
def test_run_time_zone_under_utc_reads_tokyo_time_with_the_zone_line(workdir: Path) -> None:
    result = frozen_dsh(T0, ["run", "--time-zone", "Asia/Tokyo", "when is lunch?"], workdir, TZ="UTC")
    assert result.returncode == 0, result.stderr
    [source] = prompt_sources(workdir)
    assert list(source) == ["kind", "rpcId", "clientTimeZone"] and source["clientTimeZone"] == "Asia/Tokyo"
    assert readings(workdir) == [
        "Time sampled while preparing turn 1, step 1: 2026-12-01T17:00:00+09:00[Asia/Tokyo]\n"
        f"{LINE.format('Asia/Tokyo')}\n"
        "Elapsed since the preceding model-visible message: unavailable."
    ]
    # `dsh sessions requests` rebuilds the exact reading the model read; `show` names the zone.
    [log] = session_files(workdir)
    shown = run_dsh(["sessions", "requests", log.stem], workdir, TZ="UTC")
    assert shown.returncode == 0, shown.stderr
    assert f"{LINE.format('Asia/Tokyo')}\nElapsed since the preceding model-visible message: unavailable." in shown.stdout
    show = run_dsh(["sessions", "show", log.stem], workdir, TZ="UTC")
    [you] = [line for line in show.stdout.splitlines() if " you " in line]
    assert you.endswith("when is lunch?  · zone Asia/Tokyo"), you


def test_without_the_flag_the_terminal_zone_is_recorded(workdir: Path) -> None:
    result = run_dsh(["run", "hi"], workdir, TZ="Europe/Berlin")
    assert result.returncode == 0, result.stderr
    assert [s["clientTimeZone"] for s in prompt_sources(workdir)] == ["Europe/Berlin"]
    [reading] = readings(workdir)
    assert "[Europe/Berlin]\n" in reading and LINE.format("Europe/Berlin") in reading
    # A resume elsewhere keeps what was recorded; the new prompt carries the new zone.
    again = run_dsh(["run", "--continue", "again"], workdir, TZ="America/New_York")
    assert again.returncode == 0, again.stderr
    assert [s["clientTimeZone"] for s in prompt_sources(workdir)] == ["Europe/Berlin", "America/New_York"]
    assert LINE.format("America/New_York") in readings(workdir)[1]


@pytest.mark.parametrize("command", ["run", "chat"])
@pytest.mark.parametrize("bad", ["CST", "+09:00", "Not/A_Real_Zone", ""])
def test_a_bad_time_zone_is_one_line_and_exit_2(workdir: Path, command: str, bad: str) -> None:
    args = [command, "--time-zone", bad] + (["hi"] if command == "run" else ["--plain"])
    result = run_dsh(args, workdir, stdin="hi\n")
    assert result.returncode == 2
    assert result.stderr == f"dsh: --time-zone must be UTC or a valid IANA Area/Location name, got {json.dumps(bad)}\n"
    assert session_files(workdir) == []


def test_chat_prompts_carry_the_flag_zone(workdir: Path) -> None:
    result = run_dsh(["chat", "--plain", "--time-zone", "america/new_york"], workdir, stdin="one\ntwo\n", TZ="UTC")
    assert result.returncode == 0, result.stderr
    assert [s["clientTimeZone"] for s in prompt_sources(workdir)] == ["America/New_York"] * 2
    assert all(LINE.format("America/New_York") in r for r in readings(workdir))


@pytest.mark.slow
def test_resume_after_three_days_reads_the_gap_since_the_last_exchange(workdir: Path) -> None:
    first = frozen_dsh(T0, ["run", "before the weekend"], workdir, TZ="UTC")
    assert first.returncode == 0, first.stderr
    second = frozen_dsh(T0 + GAP, ["run", "--continue", "back again"], workdir, TZ="UTC")
    assert second.returncode == 0, second.stderr
    one, two = readings(workdir)
    assert one.endswith("Elapsed since the preceding model-visible message: unavailable.")  # the first turn
    assert two == (
        "Time sampled while preparing turn 2, step 1: 2026-12-04T10:05:00+00:00[UTC]\n"
        f"{LINE.format('UTC')}\n"
        "Elapsed since the preceding model-visible message: 3d 2h 5m 0s."
    )


@pytest.mark.slow
def test_with_the_options_off_the_seed_texts_are_unchanged(workdir: Path) -> None:
    config = workdir / "plain.yml"
    config.write_text(
        "- {id: llm, name: echo-llm, config: {answer: userText}}\n"
        "- {id: time-context, name: time-context}\n"
        "- {id: app, name: stdio-app, config: {model: mock-echo, persistenceRoot: ./sessions}}\n"
    )
    for at, args in ((T0, ["run", "--config", str(config), "one"]),
                     (T0 + GAP, ["run", "--config", str(config), "--continue", "two"])):
        result = frozen_dsh(at, args, workdir, TZ="UTC")
        assert result.returncode == 0, result.stderr
    [log] = sorted((workdir / "sessions").glob("cwd-*/*.jsonl"))
    lines = [json.loads(x) for x in log.read_text().splitlines()[1:]]
    assert [e["data"]["source"] for e in lines if e["type"] == "user/message"] == [{"kind": "user"}] * 2
    texts = [e["data"]["content"][0]["text"] for e in lines if e["type"] == "context/message"]
    assert texts == [
        "Time sampled while preparing turn 1, step 1: 2026-12-01T08:00:00+00:00[UTC]\n"
        "Elapsed since the preceding model-visible message: 0s.",
        "Time sampled while preparing turn 2, step 1: 2026-12-04T10:05:00+00:00[UTC]\n"
        "Elapsed since the preceding model-visible message: 0s.",
    ]
