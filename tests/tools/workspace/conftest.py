"""Fixtures for the workspace-tool tests (helpers live in ws_support)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ws_support import Workspace, make_agent

import dsh.tools.registry as tools_plugin
from dsh.runtime import Context
from dsh.tools.workspace import plugin as workspace_plugin


@pytest.fixture
def make_ws(tmp_path: Path) -> Callable[..., Any]:
    contexts: list[Context] = []

    async def make(**config: Any) -> Workspace:
        root = tmp_path / "ws"
        root.mkdir(exist_ok=True)
        config.setdefault("spillDir", str(tmp_path / "spill"))
        ctx = Context()
        await ctx.plugin(tools_plugin)
        await ctx.plugin(workspace_plugin, config)
        contexts.append(ctx)
        return Workspace(ctx, Path(str(root)).resolve(), make_agent(root.resolve()))

    return make
