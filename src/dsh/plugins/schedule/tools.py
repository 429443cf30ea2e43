"""The three model-facing tools: ``schedule_create``, ``schedule_list``, ``schedule_delete``.

Owns argument checking (with the reference's error codes and messages), the creation of
records from ``after_seconds`` / ``at`` / ``every_seconds``, and the canonical results: every
result, success or error, is the value as compact JSON text (``JSON.stringify``), never a tool
error. Each call first flushes the session (a store that cannot write makes the answer
``persistence_uncertain`` instead of a promise it cannot keep), folds the log, appends at most
one ``schedule/change`` and flushes again before answering.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from dsh import _clock
from dsh._js import is_safe_integer, json_stringify
from dsh.agent.sessions import SESSIONS
from dsh.plugins.schedule.fold import (
    EVENT_TYPE,
    VERSION,
    Folded,
    Record,
    ScheduleLogError,
    fold_session,
)
from dsh.plugins.schedule.timespec import (
    MAX_MS,
    MIN_EVERY_SECONDS,
    OUT_OF_RANGE,
    ScheduleInputError,
    future_instant,
    parse_at,
)
from dsh.session.vocab import JsonObject
from dsh.tools.types import ContentBlock, Tool, ToolCall, define_tool

if TYPE_CHECKING:
    from dsh.agent.agent import Agent
    from dsh.runtime import Context

SELECTORS: Final = ("after_seconds", "at", "every_seconds")

CREATE_DESCRIPTION: Final = (
    "Create one reminder in the current session. Give a non-empty prompt and exactly one of: "
    "after_seconds (a positive integer delay), at (an RFC 3339 time with Z or an offset, such as "
    "2026-12-01T09:00:00+01:00, or {date: YYYY-MM-DD, time: HH:mm:ss, time_zone: IANA zone}), or "
    "every_seconds (a fixed rate of at least 300 seconds, aligned to the creation time). When the "
    "reminder is due and the agent is idle, a new turn opens with the reminder."
)
LIST_DESCRIPTION: Final = (
    "List every active reminder in the current session in creation order, including its exact id, "
    "UTC target, scheduled or overdue state, and delivery mode."
)
DELETE_DESCRIPTION: Final = (
    "Delete one active reminder in the current session by the exact id returned by schedule_create "
    "or schedule_list. Unknown or already-finished ids return deleted false."
)

CREATE_PARAMETERS: Final = {
    "type": "object",
    "properties": {
        "prompt": {"type": "string", "description": "Reminder content to present when the target becomes due."},
        "after_seconds": {"type": "integer", "description": "Positive safe-integer delay in seconds."},
        "at": {
            "description": "Absolute target: an RFC 3339 string with Z or a numeric offset, or a local "
            "{date, time, time_zone} object with an IANA zone.",
            "anyOf": [
                {"type": "string"},
                {
                    "type": "object",
                    "properties": {
                        "date": {"type": "string", "description": "YYYY-MM-DD"},
                        "time": {"type": "string", "description": "HH:mm:ss[.fff]"},
                        "time_zone": {"type": "string", "description": "UTC or an IANA zone, e.g. Europe/Berlin"},
                    },
                    "required": ["date", "time", "time_zone"],
                },
            ],
        },
        "every_seconds": {"type": "integer", "description": "Fixed interval in seconds, at least 300."},
    },
    "required": ["prompt"],
}


def _error(code: str, message: str) -> JsonObject:
    return {"code": code, "message": message}


CORRUPT: Final = _error("corrupt_schedule_log", "The session schedule log is corrupt.")
INTERNAL: Final = _error("internal_error", "The schedule operation failed.")


def _uncertain(operation: str, schedule_id: str | None = None) -> JsonObject:
    out: JsonObject = {
        "code": "persistence_uncertain",
        "message": "Schedule persistence is uncertain; retry with schedule_list before relying on this result.",
        "operation": operation,
    }
    if schedule_id is not None:
        out["id"] = schedule_id
    return out


def _text(value: object) -> list[ContentBlock]:
    return [{"type": "text", "text": json_stringify(value)}]


def build_record(schedule_id: str, args: object, now: int) -> Record:
    """Validate ``schedule_create`` arguments into a record (raises :class:`ScheduleInputError`)."""
    if type(args) is not dict:
        raise ScheduleInputError("invalid_selector", "schedule_create accepts exactly one of after_seconds, at, or every_seconds.")
    chosen = [key for key in SELECTORS if key in args]
    if len(chosen) != 1 or any(key != "prompt" and key not in SELECTORS for key in args):
        raise ScheduleInputError("invalid_selector", "schedule_create accepts exactly one of after_seconds, at, or every_seconds.")
    prompt = args.get("prompt")
    if type(prompt) is not str or not prompt.strip():
        raise ScheduleInputError("invalid_prompt", "prompt must be non-empty after trimming.")
    prompt = prompt.strip()
    selector = chosen[0]
    value = args[selector]
    if selector == "after_seconds":
        if not is_safe_integer(value) or value <= 0:
            raise ScheduleInputError("invalid_rule", "after_seconds must be a positive safe integer.")
        seconds = int(value)
        target = now + seconds * 1000
        if target > MAX_MS:
            raise ScheduleInputError("time_out_of_range", OUT_OF_RANGE)
        return Record(schedule_id, "after", prompt, target, seconds)
    if selector == "every_seconds":
        if not is_safe_integer(value):
            raise ScheduleInputError("invalid_rule", "every_seconds must be a safe integer.")
        if value < MIN_EVERY_SECONDS:
            raise ScheduleInputError("frequency_too_high", f"every_seconds must be at least {MIN_EVERY_SECONDS}.")
        seconds = int(value)
        target = now + seconds * 1000
        if target > MAX_MS:
            raise ScheduleInputError("time_out_of_range", OUT_OF_RANGE)
        return Record(schedule_id, "every", prompt, target, seconds)
    return Record(schedule_id, "at", prompt, future_instant(parse_at(value), now))


class ScheduleTools:
    """The tools, bound to a context; ``on_change(agent)`` runs after a durable create or delete."""

    def __init__(self, ctx: Context, on_change: Callable[[Agent], None]) -> None:
        self._ctx = ctx
        self._on_change = on_change

    async def _flush(self, agent: Agent) -> bool:
        try:
            await self._ctx.require(SESSIONS).flush(agent.session)
        except Exception:
            return False
        return True

    def _fold(self, agent: Agent) -> Folded:
        session = agent.session
        return fold_session(session)

    async def create(self, args: object, call: ToolCall) -> list[ContentBlock]:
        agent = call.agent
        if agent is None:
            return _text(INTERNAL)
        if not await self._flush(agent):
            return _text(_uncertain("create"))
        try:
            state = self._fold(agent)
        except ScheduleLogError:
            return _text(CORRUPT)
        now = _clock.now_ms()
        try:
            record = build_record(state.next_id(), args, now)
        except ScheduleInputError as exc:
            return _text(_error(exc.code, exc.message))
        agent.session.append(EVENT_TYPE, {"version": VERSION, "operation": "create", "schedule": record.to_json()})
        if not await self._flush(agent):
            return _text(_uncertain("create", record.id))
        self._on_change(agent)
        return _text(record.view(_clock.now_ms()))

    async def list_(self, args: object, call: ToolCall) -> list[ContentBlock]:
        agent = call.agent
        if agent is None:
            return _text(INTERNAL)
        if not await self._flush(agent):
            return _text(_uncertain("list"))
        try:
            state = self._fold(agent)
        except ScheduleLogError:
            return _text(CORRUPT)
        now = _clock.now_ms()
        return _text([record.view(now) for record in state.active.values()])

    async def delete(self, args: object, call: ToolCall) -> list[ContentBlock]:
        raw = args.get("id") if type(args) is dict else None
        if type(raw) is not str or not raw or raw.strip() != raw:
            return _text(_error("invalid_rule", "schedule_delete id must be non-empty without surrounding whitespace."))
        agent = call.agent
        if agent is None:
            return _text(INTERNAL)
        if not await self._flush(agent):
            return _text(_uncertain("delete", raw))
        try:
            state = self._fold(agent)
        except ScheduleLogError:
            return _text(CORRUPT)
        if raw not in state.active:
            return _text({"id": raw, "deleted": False, "code": "schedule_not_found"})
        agent.session.append(EVENT_TYPE, {"version": VERSION, "operation": "delete", "id": raw})
        if not await self._flush(agent):
            return _text(_uncertain("delete", raw))
        self._on_change(agent)
        return _text({"id": raw, "deleted": True})

    def tools(self) -> list[Tool]:
        # The tools check their own arguments: a bad one is answered with the reference's coded
        # JSON error (e.g. ``invalid_rule``), which the registry's schema check would pre-empt.
        return [
            define_tool(
                name="schedule_create",
                description=CREATE_DESCRIPTION,
                parameters=CREATE_PARAMETERS,
                execute=self.create,
                validate_arguments=False,
            ),
            define_tool(name="schedule_list", description=LIST_DESCRIPTION, parameters=None, execute=self.list_, validate_arguments=False),
            define_tool(
                name="schedule_delete",
                description=DELETE_DESCRIPTION,
                parameters={
                    "type": "object",
                    "properties": {"id": {"type": "string", "description": "Exact session-local schedule id."}},
                    "required": ["id"],
                },
                execute=self.delete,
                validate_arguments=False,
            ),
        ]
