"""The ``compact`` plugin's config: typed fields and the validators that word every bad value.

A bad value fails the load with the reference's ``BasicCompactConfig: <name> (<value>) must be
…`` message; the value is shown as JavaScript's ``String(value)`` would (objects and arrays as
JSON). The validators also turn an integral float (``1300.0``) into the integer it stands for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Final, Literal, TypeGuard

import msgspec

from dsh._js import js_string, json_stringify
from dsh.runtime.config import CheckedConfig

__all__ = ["BasicCompactConfig", "Config"]


class _Bad:
    """A validator's answer for a value that breaks its rule."""


_BAD: Final = _Bad()


def _is_number(value: object) -> TypeGuard[int | float]:
    return type(value) is int or type(value) is float


def _is_integer(value: object) -> TypeGuard[int | float]:
    return type(value) is int or (
        type(value) is float and math.isfinite(value) and value.is_integer()
    )


def _positive_integer(value: object) -> object:
    return int(value) if _is_integer(value) and value > 0 else _BAD


def _non_negative_integer(value: object) -> object:
    return int(value) if _is_integer(value) and value >= 0 else _BAD


def _ratio(value: object) -> object:
    return value if _is_number(value) and 0 < value <= 1 else _BAD


def _positive_finite(value: object) -> object:
    return value if _is_number(value) and math.isfinite(value) and value > 0 else _BAD


def _string(value: object) -> object:
    return value if type(value) is str else _BAD


def _boolean(value: object) -> object:
    return value if type(value) is bool else _BAD


def _estimator(value: object) -> object:
    return value if value in ("chars", "deepseek") else _BAD


# Field -> (what the rule says, the validator); checked in field order, so the first bad value
# in that order is the one reported.
_RULES: Final[Mapping[str, tuple[str, Callable[[object], object]]]] = {
    "context_window": ("a positive integer", _positive_integer),
    "threshold_ratio": ("a number in (0, 1]", _ratio),
    "retain_tokens": ("a non-negative integer", _non_negative_integer),
    "summarization_model": ("a string", _string),
    "max_tokens": ("a positive integer", _positive_integer),
    "compaction_retries": ("a non-negative integer", _non_negative_integer),
    "auto": ("a boolean", _boolean),
    "chars_per_token": ("a positive finite number", _positive_finite),
    "estimator": ('"chars" or "deepseek"', _estimator),
}


def _shown(value: object) -> str:
    if isinstance(value, (list, dict)):
        try:
            return json_stringify(value)
        except (TypeError, ValueError):
            return str(value)
    return js_string(value)


def _checked(field: str, key: str, value: object) -> object:
    rule, check = _RULES[field]
    result = check(value)
    if result is _BAD:
        raise ValueError(f"BasicCompactConfig: {key} ({_shown(value)}) must be {rule}")
    return result


class Config(CheckedConfig, rename="camel"):
    """``thresholdRatio``, ``retainTokens``, ``summarizationModel``, ``maxTokens``,
    ``compactionRetries`` (required); ``contextWindow`` (default: the model catalog's window for
    the agent's model), ``auto``, ``charsPerToken``, ``estimator`` (optional). See the package README for what each does."""

    threshold_ratio: float
    retain_tokens: int
    summarization_model: str
    max_tokens: int
    compaction_retries: int
    # None: the context window the model catalog (dsh.llm.catalog) gives the agent's model.
    context_window: int | None = None
    auto: bool = True
    chars_per_token: float = 4
    estimator: Literal["chars", "deepseek"] = "chars"

    @classmethod
    def check_raw(cls, raw: Mapping[str, object]) -> Mapping[str, object]:
        checked = dict(raw)
        for field in msgspec.structs.fields(cls):
            if field.encode_name in raw:
                value = raw[field.encode_name]
                checked[field.encode_name] = _checked(field.name, field.encode_name, value)
        return checked

    def __post_init__(self) -> None:
        # A struct built in code skips check_raw; hold it to the same rules.
        for field in msgspec.structs.fields(self):
            value = getattr(self, field.name)
            if value is None and field.name == "context_window":
                continue  # from the catalog, per model
            setattr(self, field.name, _checked(field.name, field.encode_name, value))

    @property
    def threshold(self) -> int:
        """``floor(contextWindow * thresholdRatio)`` (``contextWindow`` set in the config)."""
        if self.context_window is None:
            raise ValueError("contextWindow is not set: use threshold_for(model)")
        return self.threshold_for(None)

    def threshold_for(self, model: str | None) -> int:
        """``floor(window * thresholdRatio)``, the window being ``contextWindow`` or, unset,
        the catalog's context window for ``model`` (its defaults for a model it lacks)."""
        window = self.context_window
        if window is None:
            from dsh.llm import catalog

            window = catalog.info(model or "").context_window
        product: float = window * self.threshold_ratio
        return math.floor(product)


BasicCompactConfig = Config
