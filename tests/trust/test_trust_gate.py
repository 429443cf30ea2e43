"""The trust gate and the trust file, in process: the key is (real path, project folder, exact
content); a symlinked file, a trust file inside the project or writable by others, and a FIFO
in place of the file all fail closed."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from dsh import trust
from dsh.plugins.mcp.mcp_json import KIND
from dsh.runtime.config import ConfigError

pytestmark = pytest.mark.attack

MCP = json.dumps({"mcpServers": {"s": {"command": "python3", "args": ["x.py"]}}})


def _file(folder: Path) -> trust.ProjectFile:
    found = trust.read_project_file(folder, ".mcp.json", KIND)
    assert found is not None
    return found


def test_trust_is_keyed_to_the_exact_content(tmp_path: Path) -> None:
    store = trust.TrustStore(tmp_path / "home" / "trust.json")
    project = tmp_path / "p"
    project.mkdir()
    (project / ".mcp.json").write_text(MCP)
    assert trust.check(_file(project), store) == ("new", "new")
    trust.trust([_file(project)], store)
    assert trust.check(_file(project), store)[0] == "trusted"
    (project / ".mcp.json").write_text(MCP + " ")
    assert trust.check(_file(project), store) == ("changed", "changed")
    assert store.path.stat().st_mode & 0o777 == 0o600
    assert not [p for p in store.path.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_symlinked_file_is_judged_by_its_real_path_and_folder(tmp_path: Path) -> None:
    store = trust.TrustStore(tmp_path / "home" / "trust.json")
    trusted, hostile = tmp_path / "trusted", tmp_path / "hostile"
    trusted.mkdir()
    hostile.mkdir()
    (trusted / ".mcp.json").write_text(MCP)
    trust.trust([_file(trusted)], store)
    # The same trusted content, linked from another project, would run that project's x.py.
    (hostile / ".mcp.json").symlink_to(trusted / ".mcp.json")
    linked = _file(hostile)
    assert linked.real == (trusted / ".mcp.json").resolve()
    assert trust.check(linked, store)[0] == "new"
    assert trust.check(_file(trusted), store)[0] == "trusted"


def test_a_trust_file_inside_the_project_trusts_nothing(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / ".mcp.json").write_text(MCP)
    store = trust.TrustStore(project / ".dsh" / "trust.json")
    with pytest.raises(trust.TrustFileError, match="inside the project"):
        trust.trust([_file(project)], store)
    # Even a record the project wrote itself is not believed.
    record = trust.Record(str(project / ".mcp.json"), str(project), KIND.name, _file(project).sha256, "now")
    store.update(lambda _: [record])
    status, why = trust.check(_file(project), store)
    assert status == "unusable" and "inside this project" in why


def test_a_trust_file_others_can_write_trusts_nothing(tmp_path: Path) -> None:
    store = trust.TrustStore(tmp_path / "home" / "trust.json")
    project = tmp_path / "p"
    project.mkdir()
    (project / ".mcp.json").write_text(MCP)
    trust.trust([_file(project)], store)
    store.path.chmod(0o666)
    status, why = trust.check(_file(project), store)
    assert status == "unusable" and "writable by another user" in why
    store.path.chmod(0o600)
    store.path.write_text("{broken")
    assert trust.check(_file(project), store)[0] == "unusable"


def test_a_fifo_in_place_of_the_file_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / ".mcp.json")
    done = threading.Event()

    def read() -> None:
        with pytest.raises(ConfigError, match="not a regular file"):
            trust.read_project_file(tmp_path, ".mcp.json", KIND)
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    assert done.is_set()


def test_revoke_by_path_or_folder(tmp_path: Path) -> None:
    store = trust.TrustStore(tmp_path / "home" / "trust.json")
    project = tmp_path / "p"
    project.mkdir()
    (project / ".mcp.json").write_text(MCP)
    trust.trust([_file(project)], store)
    assert [r.path for r in trust.revoke(Path(".mcp.json"), project, store)] == [str(_file(project).real)]
    assert store.records() == []
    trust.trust([_file(project)], store)
    assert len(trust.revoke(None, project, store)) == 1
    assert trust.revoke(None, project, store) == []


def test_the_one_line_shows_terminal_controls_escaped(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "s": {"command": "evil\x1b]0;title\x07", "args": ["a\nb", "\x1b[2J"]},
        "w": {"url": "http://h/mcp"},
    }}))
    line = trust.untrusted_line(_file(tmp_path), "new")
    assert "\n" not in line and "\x1b" not in line and "\x07" not in line
    assert "'evil\\x1b]0;title\\x07' 'a\\nb' '\\x1b[2J', connect to http://h/mcp;" in line
