"""The wire of ``dsh acp``: a malformed line, a non-request and an unknown method each get a
JSON-RPC error with a clear message, stdout carries nothing but protocol messages, and the
process keeps serving (the request after them is answered)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.apps.conftest import dsh_env

pytestmark = pytest.mark.attack


@pytest.mark.slow
def test_bad_input_gets_errors_and_the_process_keeps_serving(tmp_path: Path) -> None:
    lines = [
        "this is not json",
        "[1, 2]",
        '{"jsonrpc": "2.0", "id": 7}',
        '{"jsonrpc": "2.0", "id": 8, "method": "session/teleport", "params": {}}',
        '{"jsonrpc": "2.0", "id": 9, "method": "session/prompt", "params": {"sessionId": "nope", "prompt": []}}',
        '{"jsonrpc": "2.0", "id": 10, "method": "session/new", "params": {"cwd": 5}}',
        '{"jsonrpc": "2.0", "id": 11, "method": "initialize", "params": {"protocolVersion": 1}}',
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "dsh", "acp"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, cwd=tmp_path, env=dsh_env(), timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(line) for line in proc.stdout.splitlines()]  # every stdout line is JSON-RPC
    by_id: dict[object, list[dict[str, object]]] = {}
    for message in out:
        assert message["jsonrpc"] == "2.0"
        by_id.setdefault(message.get("id"), []).append(message)
    nulls = [m["error"] for m in by_id[None]]
    assert [e["code"] for e in nulls] == [-32700, -32600]  # type: ignore[index]
    assert "not JSON" in nulls[0]["message"]  # type: ignore[index]
    assert "expected a JSON object" in nulls[1]["message"]  # type: ignore[index]
    assert by_id[7][0]["error"]["code"] == -32600  # type: ignore[index]
    assert by_id[8][0]["error"]["code"] == -32601  # type: ignore[index]
    assert "unknown session" in by_id[9][0]["error"]["message"]  # type: ignore[index]
    assert by_id[10][0]["error"]["code"] == -32602  # type: ignore[index]
    assert by_id[11][0]["result"]["agentCapabilities"]["loadSession"] is True  # type: ignore[index]


async def test_transport_splits_lines_across_reads_and_answers_bad_ones() -> None:
    import os

    from dsh.apps.acp.wire import StdioTransport

    read_in, write_in = os.pipe()
    read_out, write_out = os.pipe()
    with os.fdopen(read_in, "rb", buffering=0) as src, os.fdopen(write_out, "wb", buffering=0) as dst:
        transport = StdioTransport(dst, src)
        big = json.dumps({"jsonrpc": "2.0", "method": "x", "params": {"t": "a" * 300_000}}).encode()
        os.write(write_in, big[:1000])
        os.write(write_in, big[1000:] + b"\n{oops\n")
        os.write(write_in, b'{"jsonrpc": "2.0", "id": 1, "result": null}')  # no final newline
        os.close(write_in)
        first = await transport.receive()
        assert first is not None and len(first["params"]["t"]) == 300_000
        assert await transport.receive() == {"jsonrpc": "2.0", "id": 1, "result": None}
        assert await transport.receive() is None
        error = json.loads(os.read(read_out, 1 << 16))
        assert error["error"]["code"] == -32700 and error["id"] is None
    os.close(read_out)


HOSTILE = [
    ("[" * 100_000, -32700, "deeper than 64 levels"),
    ('{"jsonrpc": "2.0", "id": NaN, "method": "initialize", "params": {"protocolVersion": 1}}', -32700, "NaN is not a JSON number"),
    ('{"jsonrpc": "2.0", "id": true, "method": "initialize", "params": {"protocolVersion": 1}}', -32600, '"id" member must be'),
    ('{"jsonrpc": "2.0", "id": 1e400, "method": "initialize", "params": {"protocolVersion": 1}}', -32700, "1e400 is out of range"),
    ('{"jsonrpc": "2.0", "id": -Infinity, "method": "initialize"}', -32700, "-Infinity is not a JSON number"),
    ('{"jsonrpc": "2.0", "id": [], "result": 1}', -32600, '"id" member must be'),
    ('{"jsonrpc": "2.0", "id": "\\udc00", "method": "initialize"}', -32600, "lone surrogate"),
    ('{"jsonrpc": "2.0", "method": "x", "params": {"a": ' + "[" * 200 + "]" * 200 + "}}", -32600, "deeper than 64 levels"),
]


def _refuse(name: str) -> None:
    raise AssertionError(f"{name} on the wire is not JSON")


@pytest.mark.slow
def test_hostile_lines_get_errors_and_the_process_keeps_serving(tmp_path: Path) -> None:
    """Each hostile line gets one JSON-RPC error (``id: null`` where the id is unusable), stdout
    stays valid JSON, and the requests after them are answered by the same process."""
    surrogate_cwd = (
        '{"jsonrpc": "2.0", "id": 5, "method": "session/new", "params": {"cwd": "/tmp/\\ud800", "mcpServers": []}}'
    )
    lines = [line for line, _, _ in HOSTILE] + [
        surrogate_cwd,
        '{"jsonrpc": "2.0", "id": 6, "method": "initialize", "params": {"protocolVersion": 1}}',
        json.dumps({"jsonrpc": "2.0", "id": 7, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}}),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "dsh", "acp"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, cwd=tmp_path, env=dsh_env(), timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    out = [json.loads(line, parse_constant=_refuse) for line in proc.stdout.splitlines()]  # strict JSON
    errors = [m for m in out if m.get("id") is None]
    assert [(m["error"]["code"]) for m in errors] == [code for _, code, _ in HOSTILE]
    for message, (_, _, text) in zip(errors, HOSTILE, strict=True):
        assert text in message["error"]["message"]
    by_id = {m["id"]: m for m in out if m.get("id") is not None}
    assert by_id[5]["error"]["code"] == -32600 and "lone surrogate" in by_id[5]["error"]["message"]
    assert by_id[6]["result"]["agentCapabilities"]["loadSession"] is True
    assert by_id[7]["result"]["sessionId"].startswith("main-session-")
    assert len(out) == len(HOSTILE) + 3
