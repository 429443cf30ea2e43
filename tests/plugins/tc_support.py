"""Shared helpers for the time-context tests: a frozen clock and an agent spine with the plugin."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import time_machine

from dsh.agent.agent import Agent
from dsh.plugins import time_context
from dsh.runtime import AbortController, AbortSignal, Context, Fiber
from dsh.session import Event, Session

T0 = 1_783_987_200_000  # 2026-07-14T00:00:00Z
SOURCE = {"kind": "plugin", "plugin": "time-context"}
READINGS_FIXTURE = Path(__file__).parent / "data" / "time-context-readings.json"


# A fixed non-zero offset on purpose: time-machine sets ``TZ`` itself when handed a UTC or
# ZoneInfo datetime, and the plugin resolves the process zone from ``TZ`` at load.
_PLAIN_OFFSET = timezone(timedelta(hours=1))


def at(ms: int) -> datetime:
    """An exact aware datetime for epoch milliseconds (a float would lose the last digit)."""
    return datetime.fromtimestamp(ms // 1000, _PLAIN_OFFSET).replace(microsecond=(ms % 1000) * 1000)


class Clock:
    """The frozen wall clock (time-machine, ``tick=False``), moved in milliseconds."""

    def __init__(self, traveller: time_machine.Traveller) -> None:
        self._traveller = traveller

    def set(self, ms: int) -> None:
        self._traveller.move_to(at(ms))

    def advance(self, ms: int) -> None:
        self._traveller.shift(ms / 1000)


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


class Rig:
    """A ``Context`` with the agent spine; agents are real, their drivers idle unless sent work.

    ``fire`` dispatches ``agent/pre-step`` exactly as the loop does and returns the events the
    dispatch appended.
    """

    def __init__(self, ctx: Context, clock: Clock) -> None:
        self.ctx = ctx
        self.clock = clock

    async def load(self, config: Any = None) -> Fiber:
        return await self.ctx.plugin(time_context, config)

    def agent(self, agent_id: str = "main") -> Agent:
        agent: Agent = self.ctx.agent_loop.create(agent_id, model="m")
        return agent

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
