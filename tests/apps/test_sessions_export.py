"""``dsh sessions export``/``import`` use the stores' own paths (issue 14).

Export returns the stored bytes (nothing decoded and re-encoded), so a line another program
wrote in a spelling dsh would not produce (here ``1e2`` for a hundred) comes back exactly.
Import checks a file as a load does, with the reference's corruption texts.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dsh.persistence.jsonl import JsonlStore
from tests.apps.conftest import run_dsh
from tests.persistence.store_support import make_session, persist


def _log_with_foreign_spelling(root: Path) -> tuple[str, Path]:
    session = make_session("spelled", turns=1)
    store = JsonlStore(root)
    asyncio.run(persist(store, session))
    path = Path(str(store.locate(dict(session.header))))
    seq = len(session)
    with path.open("ab") as log:
        log.write(b'{"type":"note/x","seq":%d,"time":1,"data":{"v":1e2}}\n' % seq)
    return session.id, path


@pytest.mark.slow
def test_export_returns_the_stored_bytes(tmp_path: Path) -> None:
    session_id, path = _log_with_foreign_spelling(tmp_path / "s")
    out = run_dsh(["sessions", "export", session_id, "--root", str(tmp_path / "s")], tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.encode() == path.read_bytes()


def test_import_refuses_a_corrupt_committed_line_with_the_reference_text(tmp_path: Path) -> None:
    _, path = _log_with_foreign_spelling(tmp_path / "s")
    lines = path.read_bytes().split(b"\n")
    lines[2] = b'{"type":"user/mess'
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join(lines))
    out = run_dsh(["sessions", "import", str(bad), "--root", str(tmp_path / "t")], tmp_path)
    assert out.returncode == 1
    # One line number, the file's (the CLI's wording for every corrupt log).
    assert out.stderr.strip().splitlines()[-1].startswith(
        f"dsh: corrupt session log: unparsable committed event at file line 3 ({bad})"
    )
