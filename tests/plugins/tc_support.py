"""Shared helpers for the time-context tests: reading texts, and a rig with the plugin."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path
from typing import Any

from tests.support.clock import Clock, at
from tests.support.rig import Rig, Rigs

from dsh.agent.agent import Agent
from dsh.plugins import time_context
from dsh.runtime import AbortController, AbortSignal, Fiber
from dsh.session import Event, Session

SOURCE = {"kind": "plugin", "plugin": "time-context"}
READINGS_FIXTURE = Path(__file__).parent / "data" / "time-context-readings.json"


def reading_texts(session: Session) -> list[str]:
    """The texts of every time-context reading in the raw log (shadowed ones included)."""
    return [e.data["content"][0]["text"] for e in session.events if time_context.is_reading(e)]


def text_of(event: Event) -> str:
    assert time_context.is_reading(event), event
    text: str = event.data["content"][0]["text"]
    return text


def reading_line(turn: int, step: int, stamp: str, elapsed: str) -> str:
    kind = "model-visible message" if step == 1 else "step context"
    return (
        f"Time sampled while preparing turn {turn}, step {step}: {stamp}\n"
        f"Elapsed since the preceding {kind}: {elapsed}."
    )


def utc_stamp(ms: int) -> str:
    return at(ms).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") + "+00:00[UTC]"


def load_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(READINGS_FIXTURE.read_text())["cases"]
    return cases


class TimeContextRig(Rig):
    """A rig (``tests.support.rig``) for the time-context plugin: its agents are real, their
    drivers idle unless sent work; they talk to the scripted model ``m``.

    ``fire`` dispatches ``agent/pre-step`` exactly as the loop does and returns the events the
    dispatch appended.
    """

    async def load(self, config: Any = None) -> Fiber:
        return await self.ctx.plugin(time_context, config)

    @staticmethod
    def open_turn(agent: Agent, turn: int, text: str | None = "hi") -> None:
        session = agent.session
        session.append(
            "turn/start", {"turn": turn, "trigger": {"kind": "message", "source": {"kind": "user"}}}
        )
        if text is not None:
            session.append(
                "user/message",
                {"content": [{"type": "text", "text": text}], "source": {"kind": "user"}},
                surface_op="append",
            )

    @staticmethod
    def close_turn(agent: Agent, turn: int) -> None:
        agent.session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})

    async def fire(
        self, agent: Agent, turn: int, step: int, signal: AbortSignal | None = None
    ) -> list[Event]:
        session = agent.session
        before = len(session)
        if signal is None:
            signal = AbortController().signal
        await self.ctx.serial("agent/pre-step", agent, turn, step, "", [], signal)
        return list(session.events[before:])

    async def reading(self, agent: Agent, turn: int, step: int) -> str | None:
        """Fire once; the appended reading's text, or ``None`` when the attempt was suppressed."""
        events = await self.fire(agent, turn, step)
        assert len(events) <= 1, events
        return text_of(events[0]) if events else None


async def tc_rig(rigs: Rigs, clock: Clock, *replies: Any, **options: Any) -> TimeContextRig:
    """The shared builder with what these tests share: the clock and the scripted model ``m``
    (default reply ``done``)."""
    return await rigs.make(*replies, clock=clock, models=("m",), default="done", rig_class=TimeContextRig, **options)
