"""A subagent's approval question names the child (and its chain) on the terminal prompt."""

from __future__ import annotations

from types import SimpleNamespace

from dsh.agent.agent import AgentOptions
from dsh.apps.approval_prompt import describe
from dsh.plugins.subagent.lineage import delegation_root, label_of
from dsh.tools.workspace.approval import ApprovalRequest


def test_the_question_names_the_child_and_the_chain() -> None:
    root = SimpleNamespace(options=AgentOptions())
    child = SimpleNamespace(options=AgentOptions(label="reviewer", delegated_by=(root, "call-1")))
    grandchild = SimpleNamespace(options=AgentOptions(label="general-purpose", delegated_by=(child, "call-2")))
    ask = ApprovalRequest(agent=grandchild, tool_name="write", reason="outside the workspace", arguments={"a": 1})
    assert describe(ask).splitlines()[0] == "approval needed: write (asked by subagent reviewer › general-purpose)"
    assert delegation_root(grandchild) == (root, "call-1")
    assert label_of(root) is None
    top = ApprovalRequest(agent=root, tool_name="write", reason="r", arguments={})
    assert describe(top).splitlines()[0] == "approval needed: write"
