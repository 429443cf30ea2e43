"""With tracing off, nothing of OpenTelemetry (or the price table) is imported: not by ``import
dsh``, not by a whole library run, not by ``dsh run``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.apps.conftest import dsh_env

HEAVY = ("opentelemetry", "google.protobuf", "genai_prices")

CHECK = """
import sys
heavy = sorted(m for m in sys.modules if m.startswith({heavy!r}))
print("HEAVY", heavy)
"""


def run_python(code: str, cwd: Path, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=dsh_env(**env), timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_import_dsh_imports_no_opentelemetry(tmp_path: Path) -> None:
    out = run_python("import dsh, dsh.compose, dsh.observability.env, dsh.observability.plugin\n" + CHECK.format(heavy=HEAVY), tmp_path)
    assert "HEAVY []" in out


@pytest.mark.slow
def test_a_library_run_with_tracing_off_imports_no_opentelemetry(tmp_path: Path) -> None:
    code = (
        "import dsh\n"
        "r = dsh.Agent(model='mock-echo', store=None, time_context=False).run_sync('echo hi')\n"
        "print(r.reason)\n" + CHECK.format(heavy=HEAVY[:2])
    )
    out = run_python(code, tmp_path, OTEL_SDK_DISABLED="true", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert "completed" in out and "HEAVY []" in out
    # The same run with an endpoint set does load the SDK (so the check above can fail).
    traced = run_python(code.replace("print(r.reason)", "import time"), tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert "HEAVY []" not in traced
