"""Zoned times use the newer of the system's and the tzdata package's zone data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tzdata  # type: ignore[import-untyped]

from dsh import _zones
from tests.apps.conftest import dsh_env, run_dsh, session_files

FROZEN = """
import sys, time_machine
from datetime import datetime, timezone
# An epoch float, not an aware datetime: time-machine would set TZ from the datetime's zone.
with time_machine.travel(datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc).timestamp()):
    from dsh.cli import main
    sys.exit(main(sys.argv[1:]))
"""


def test_the_newer_data_wins() -> None:
    assert _zones.choose("2025b", "/usr/share/zoneinfo", "2026f").from_package
    assert not _zones.choose("2026g", "/usr/share/zoneinfo", "2026f").from_package
    assert not _zones.choose("2026f", "/usr/share/zoneinfo", "2026f").from_package  # a tie: system
    assert _zones.choose("2025z", "/usr/share/zoneinfo", "2026a").from_package
    assert _zones.choose(None, None, "2026f").from_package  # no system data at all
    assert not _zones.choose("2025b", "/usr/share/zoneinfo", None).from_package


@pytest.mark.slow
def test_casablanca_in_december_2026_is_utc_in_a_real_session(workdir: Path) -> None:
    # Morocco's 2026 rules: the newest data (and the reference) say +00:00 on 2026-12-01; the
    # 2025b data Debian ships says +01:00. With either data source newer than 2025b this holds.
    result = subprocess.run(
        [sys.executable, "-c", FROZEN, "chat"], input="hi\n", capture_output=True, text=True,
        cwd=workdir, env=dsh_env(TZ="Africa/Casablanca"), timeout=60,
    )
    assert result.returncode == 0, result.stderr
    [log] = session_files(workdir)
    events = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    [reading] = [
        e for e in events
        if e["type"] == "context/message" and e["data"]["source"].get("plugin") == "time-context"
    ]
    text = "".join(b.get("text", "") for b in reading["data"]["content"])
    assert "2026-12-01T12:00:" in text and "+00:00[Africa/Casablanca]" in text, text


def test_version_reports_dsh_python_and_zone_data(workdir: Path) -> None:
    result = run_dsh(["--version"], workdir)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("dsh ")
    assert lines[1].startswith("Python ") and sys.version.split()[0] in lines[1]
    data = _zones.zone_data()
    assert lines[2] == f"zone data {data.describe()}"
    system, _ = _zones.system_data()
    if system is not None and system < tzdata.IANA_VERSION:
        assert lines[2] == f"zone data {tzdata.IANA_VERSION} (tzdata package)"
