"""--sandbox / --approval reach the workspace-tools entry, in the default composition and over a
YAML config (whose own keys they override)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsh.cli import build_parser, composition


def _workspace(entries: list[Any]) -> dict[str, Any]:
    [entry] = [e for e in entries if e.name == "workspace-tools"]
    return dict(entry.config or {})


def test_default_composition_mounts_the_tools_and_instructions() -> None:
    entries, _ = composition(build_parser().parse_args(["chat"]))
    names = [e.name for e in entries]
    assert "workspace-tools" in names and "agent-instructions" in names
    assert _workspace(entries) == {}  # the plugin's defaults: workspace-write, ask
    args = build_parser().parse_args(["chat", "--sandbox", "read-only", "--approval", "never"])
    assert _workspace(composition(args)[0]) == {"sandbox": "read-only", "approval": "never"}


def test_flags_override_the_yaml_keys(tmp_path: Path) -> None:
    config = tmp_path / "dsh.yaml"
    config.write_text(
        "- {id: llm, name: echo-llm}\n"
        "- {id: ws, name: workspace-tools, config: {sandbox: danger-full-access, approval: never, network: true}}\n"
        "- {id: app, name: stdio-app, config: {model: mock-echo}}\n"
    )
    kept = composition(build_parser().parse_args(["chat", "--config", str(config)]))[0]
    assert _workspace(kept) == {"sandbox": "danger-full-access", "approval": "never", "network": True}
    args = build_parser().parse_args(["chat", "--config", str(config), "--sandbox", "workspace-write"])
    assert _workspace(composition(args)[0]) == {"sandbox": "workspace-write", "approval": "never", "network": True}
