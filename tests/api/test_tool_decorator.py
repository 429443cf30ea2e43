"""``@dsh.tool``: the schema a function's signature and docstring produce, and the checks made
before the function runs."""

from __future__ import annotations

import asyncio
import enum
import threading
from typing import Annotated, Literal, TypedDict

import pytest

import dsh
from dsh.runtime import AbortController
from dsh.tools import ToolCall, ToolRegistry


class Unit(enum.Enum):
    C = "c"
    F = "f"


class Place(TypedDict):
    lat: float
    lon: float


def _call(name: str = "t") -> ToolCall:
    return ToolCall(call_id="c1", name=name, agent=None, signal=AbortController().signal)


def test_schema_from_type_hints_defaults_and_docstring() -> None:
    @dsh.tool
    async def forecast(
        city: str,
        days: int = 1,
        unit: Unit = Unit.C,
        mode: Literal["brief", "full"] = "brief",
        near: Place | None = None,
        note: Annotated[str, "free text for the forecaster"] = "",
        call: ToolCall | None = None,
    ) -> str:
        """Look up the forecast for a city.

        Longer explanation that the model does not need.

        Args:
            city: the city's name,
                in English.
            days: how many days ahead
        """
        return city

    schema = forecast.schema()
    assert schema["name"] == "forecast"
    assert schema["description"] == "Look up the forecast for a city."
    params = schema["parameters"]
    assert params["type"] == "object" and params["additionalProperties"] is False
    assert params["required"] == ["city"]  # parameters without a default
    props = params["properties"]
    assert list(props) == ["city", "days", "unit", "mode", "near", "note"]  # the ToolCall is not shown
    assert props["city"] == {"type": "string", "description": "the city's name, in English."}
    assert props["days"] == {"type": "integer", "description": "how many days ahead", "default": 1}
    assert props["unit"] == {"$ref": "#/$defs/Unit", "default": "c"}
    assert props["mode"] == {"enum": ["brief", "full"], "default": "brief"}
    assert props["note"]["description"] == "free text for the forecaster"
    assert params["$defs"]["Place"]["required"] == ["lat", "lon"]


def test_decorator_options_and_the_function_stays_callable() -> None:
    @dsh.tool(name="add_numbers", description="Add two numbers.")
    def add(a: int, b: int) -> int:
        return a + b

    assert isinstance(add, dsh.Tool) and add.name == "add_numbers" and add.description == "Add two numbers."
    assert add(2, 3) == 5


@pytest.mark.parametrize(
    "definition",
    ["def f(x): return x", "def f(*args: int) -> None: ...", "def f(x: object) -> None: ..."],
)
def test_functions_that_cannot_be_described_are_refused_at_decoration(definition: str) -> None:
    namespace: dict[str, object] = {}
    exec(definition, namespace)
    with pytest.raises(TypeError, match=r'@dsh\.tool "f"'):
        dsh.tool(namespace["f"])  # type: ignore[arg-type]


async def test_validation_happens_before_the_call_and_values_are_converted() -> None:
    calls: list[tuple[Unit, Place | None]] = []

    @dsh.tool
    async def t(unit: Unit, near: Place | None = None) -> str:
        """Test."""
        calls.append((unit, near))
        return "ok"

    assert await t.execute({"unit": "f", "near": {"lat": 1, "lon": 2}}, _call()) == "ok"
    assert calls == [(Unit.F, {"lat": 1.0, "lon": 2.0})]
    registry = ToolRegistry()
    registry.register(t)
    for bad, detail in [
        ({"unit": "k"}, "$.unit: 'k' is not one of ['c', 'f']"),
        ({"unit": "c", "near": {"lat": 1}}, "$.near"),
        ([1, 2], "$: expected object, got array"),
    ]:
        # The registry validates before the function runs.
        result = await registry.execute(call_id="c", name="t", arguments=bad)
        assert result.is_error and result.error == {"name": "InvalidToolArguments", "code": "INVALID_ARGUMENTS"}
        text = result.content[0]["text"]
        assert text.startswith('Error: invalid arguments for tool "t"') and detail in text, text
    assert len(calls) == 1


async def test_through_the_registry_a_mismatch_is_an_error_result() -> None:
    ran: list[object] = []

    @dsh.tool
    def t(n: int) -> str:
        """Test."""
        ran.append(n)
        return "ok"

    registry = ToolRegistry()
    registry.register(t)
    result = await registry.execute(call_id="c", name="t", arguments={"n": "x"})
    assert result.is_error and result.error == {"name": "InvalidToolArguments", "code": "INVALID_ARGUMENTS"}
    assert result.content == [{"type": "text", "text": 'Error: invalid arguments for tool "t": $.n: expected integer, got string'}]
    assert ran == []
    ok = await registry.execute(call_id="c", name="t", arguments={"n": 3})
    assert ok.content == [{"type": "text", "text": "ok"}] and not ok.is_error


async def test_plain_functions_run_off_the_event_loop_and_results_normalise() -> None:
    loop_thread = threading.get_ident()

    @dsh.tool
    def where() -> list[dict[str, str]]:
        """Which thread."""
        return [{"type": "text", "text": "loop" if threading.get_ident() == loop_thread else "worker"}]

    @dsh.tool
    async def data() -> dict[str, int]:
        """JSON data."""
        await asyncio.sleep(0)
        return {"a": 1}

    assert await where.execute({}, _call()) == [{"type": "text", "text": "worker"}]
    assert await data.execute(None, _call()) == '{"a":1}'


async def test_the_tool_call_parameter_receives_the_call() -> None:
    @dsh.tool
    async def t(x: int, call: ToolCall) -> str:
        """Test."""
        return f"{call.call_id}:{x}:{call.signal.aborted}"

    assert await t.execute({"x": 1}, _call()) == "c1:1:False"
