"""``dsh sessions`` and the errors a person can cause, through the real command."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.apps.conftest import Interactive, bucket, default_root, dsh_env, run_dsh, session_files
from tests.fixtures import FIXTURES


def one_session(cwd: Path, text: str = "hello") -> Path:
    result = run_dsh(["chat"], cwd, stdin=f"{text}\n")
    assert result.returncode == 0, result.stderr
    [log] = session_files(cwd)
    return log


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("dsh: ")
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.slow
def test_sessions_list_show_requests_rm(workdir: Path) -> None:
    log = one_session(workdir)
    sid = log.stem
    listing = run_dsh(["sessions", "list", "--json"], workdir)
    assert listing.returncode == 0, listing.stderr
    [row] = json.loads(listing.stdout)
    assert row["id"] == sid and row["turns"] == 1 and row["cwd"] == str(workdir)
    table = run_dsh(["sessions", "list"], workdir)
    assert sid in table.stdout and "TURNS" in table.stdout

    show = run_dsh(["sessions", "show", sid], workdir)
    assert show.returncode == 0, show.stderr
    assert "⏱ reading  Time sampled while preparing turn 1, step 1:" in show.stdout
    assert "you        hello" in show.stdout
    raw = run_dsh(["sessions", "show", sid, "--json"], workdir)
    assert raw.stdout.encode() == log.read_bytes()

    requests = run_dsh(["sessions", "requests", sid, "--json"], workdir)
    [request] = json.loads(requests.stdout)
    assert request["turn"] == 1 and request["step"] == 1 and request["model"] == "mock-echo"
    assert request["messages"][0] == {"role": "user", "content": [{"type": "text", "text": "hello"}]}
    assert request["messages"][1]["content"][0] == {"type": "text", "text": '<context source="plugin">'}
    one = run_dsh(["sessions", "requests", sid, "--step", "1.1"], workdir)
    assert "── turn 1 step 1 · model mock-echo" in one.stdout

    refused = run_dsh(["sessions", "rm", sid], workdir)
    assert_one_line_error(refused, 2, "--yes")
    assert log.exists()
    removed = run_dsh(["sessions", "rm", sid, "--yes"], workdir)
    assert removed.returncode == 0 and not log.exists()


@pytest.mark.slow
def test_show_escapes_terminal_control_sequences(workdir: Path) -> None:
    one_session(workdir, text="\x1b[31mred\x1b[0m \x07bell")
    [log] = session_files(workdir)
    show = run_dsh(["sessions", "show", log.stem], workdir)
    assert "\x1b" not in show.stdout and "\x07" not in show.stdout
    assert "\\x1b[31mred" in show.stdout


@pytest.mark.slow
def test_unknown_session_id_is_one_line(workdir: Path) -> None:
    result = run_dsh(["chat", "--resume", "no-such-session"], workdir, stdin="hi\n")
    assert_one_line_error(result, 1, 'session "no-such-session" not found')
    result = run_dsh(["sessions", "show", "no-such-session"], workdir)
    assert_one_line_error(result, 1, "not found")


@pytest.mark.slow
def test_corrupt_committed_line_is_refused_and_file_untouched(workdir: Path) -> None:
    one_session(workdir, "first")
    [log] = session_files(workdir)
    lines = log.read_bytes().split(b"\n")
    lines[3] = lines[3][:20] + b"#garbage"
    log.write_bytes(b"\n".join(lines))
    before = log.read_bytes()
    result = run_dsh(["chat", "--resume", log.stem], workdir, stdin="again\n")
    assert_one_line_error(result, 1, "corrupt session log", "line")
    assert log.read_bytes() == before


@pytest.mark.slow
def test_reference_crash_log_resumes_through_the_app(workdir: Path) -> None:
    header_line, events = (FIXTURES / "crash-before-repair.jsonl").read_bytes().split(b"\n", 1)
    header = json.loads(header_line)
    # Recorded in this folder: a session is only resumed in the folder it was recorded in.
    header["cwd"] = str(workdir)
    target = bucket(default_root(), workdir) / f"{header['id']}.jsonl"
    target.parent.mkdir(parents=True)
    target.write_bytes(json.dumps(header, separators=(",", ":")).encode() + b"\n" + events)
    result = run_dsh(["chat", "--resume", header["id"]], workdir, stdin="after the crash\n")
    assert result.returncode == 0, result.stderr
    data = target.read_bytes().split(b"\n", 1)[1]
    assert data.startswith((FIXTURES / "crash-after-repair.jsonl").read_bytes().split(b"\n", 1)[1])
    assert "[main turn 3]" in result.stdout


@pytest.mark.slow
def test_bad_config_names_the_entry(workdir: Path) -> None:
    (workdir / "bad.yml").write_text(
        "- id: clock\n  name: time-context\n  config:\n    timeZone: Nope/Zone\n"
        "- id: echo\n  name: echo-llm\n- id: app\n  name: stdio-app\n  config:\n    model: mock-echo\n"
    )
    result = run_dsh(["chat", "--config", "bad.yml"], workdir, stdin="hi\n")
    assert_one_line_error(result, 2, 'plugin "clock"', 'invalid IANA timeZone "Nope/Zone"')
    (workdir / "unknown.yml").write_text("- id: x\n  name: no-such-plugin\n")
    result = run_dsh(["chat", "--config", "unknown.yml"], workdir)
    assert_one_line_error(result, 2, 'plugin "x"')
    result = run_dsh(["chat", "--config", "missing.yml"], workdir)
    assert_one_line_error(result, 2, "missing.yml")
    result = run_dsh(["chat", "--bogus"], workdir)
    assert_one_line_error(result, 2)


@pytest.mark.slow
def test_missing_api_key_is_a_config_error(workdir: Path) -> None:
    result = run_dsh(["chat", "--model", "deepseek-v4-flash"], workdir, stdin="hi\n")
    assert_one_line_error(result, 2, "an API key is required")


@pytest.mark.slow
def test_second_writer_is_refused(workdir: Path) -> None:
    log = one_session(workdir)
    (workdir / "slow.yml").write_text(
        "- id: echo\n  name: echo-llm\n  config: {delayMs: 0}\n"
        "- id: app\n  name: stdio-app\n  config: {model: mock-echo}\n"
    )
    holder = Interactive(["chat", "--config", "slow.yml", "--resume", log.stem], workdir)
    holder.read_until("> ")
    try:
        other = run_dsh(["chat", "--resume", log.stem], workdir, stdin="hi\n")
        assert_one_line_error(other, 1, f'session "{log.stem}" is open in another process')
        reader = run_dsh(["sessions", "show", log.stem], workdir)
        assert reader.returncode == 0
    finally:
        holder.proc.kill()
        holder.proc.wait()
    # The lock died with the killed holder.
    again = run_dsh(["chat", "--resume", log.stem], workdir, stdin="hi\n")
    assert again.returncode == 0, again.stderr


@pytest.mark.slow
def test_python_dash_m_and_console_script_agree(workdir: Path) -> None:
    exe = Path(sys.executable).with_name("dsh")
    result = subprocess.run([str(exe), "chat"], input="hi\n", capture_output=True, text=True, cwd=workdir,
                            env=dsh_env(), timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ready.\n> ")


@pytest.mark.slow
@pytest.mark.perf
def test_export_import_round_trip(workdir: Path, tmp_path: Path) -> None:
    log = one_session(workdir)
    exported = run_dsh(["sessions", "export", log.stem, "-o", str(tmp_path / "out.jsonl")], workdir)
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "out.jsonl").read_bytes() == log.read_bytes()
    other = tmp_path / "elsewhere"
    other.mkdir()
    imported = run_dsh(["sessions", "import", str(tmp_path / "out.jsonl")], other, DSH_HOME=str(other))
    assert imported.returncode == 0, imported.stderr
    [copy] = list((other / "sessions").rglob("*.jsonl"))
    assert copy.read_bytes() == log.read_bytes()
    start = time.monotonic()
    assert time.monotonic() - start < 5


@pytest.mark.slow
def test_sessions_config_reads_the_database_the_app_wrote(workdir: Path) -> None:
    (workdir / "conf").mkdir()
    (workdir / "conf" / "dsh.yml").write_text(
        "- id: echo\n  name: echo-llm\n  config: {delayMs: 0}\n"
        "- id: app\n  name: stdio-app\n  config: {model: mock-echo, store: sqlite, sqlitePath: data/s.db}\n"
    )
    chat = run_dsh(["chat", "--config", "conf/dsh.yml"], workdir, stdin="hi\n")
    assert chat.returncode == 0, chat.stderr
    # Relative to the config file's folder, as its .py plugins are, not to the cwd.
    assert (workdir / "conf" / "data" / "s.db").exists()
    assert not (workdir / "data").exists()
    listing = run_dsh(["sessions", "list", "--json", "--config", "conf/dsh.yml"], workdir)
    assert listing.returncode == 0, listing.stderr
    assert [row["turns"] for row in json.loads(listing.stdout)] == [1]
    resumed = run_dsh(["chat", "--resume", json.loads(listing.stdout)[0]["id"]], workdir, stdin="x\n")
    assert resumed.returncode == 1  # the default JSONL store does not have it: a clear error
    assert "not found" in resumed.stderr
