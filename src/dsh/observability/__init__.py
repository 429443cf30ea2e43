"""Observability: OpenTelemetry GenAI traces and metrics, live and replayed, and cost in money.

This package owns deriving spans from the durable log (:mod:`.spans`, the one mapping shared by
the live ``telemetry`` plugin and ``dsh sessions trace``), the OpenTelemetry SDK side
(:mod:`.otel`, the ``dsh[otel]`` extra), the plugin (:mod:`.plugin`), replay (:mod:`.replay`)
and the price of a model call (:mod:`.cost`, on ``genai-prices``). See README.md beside this file.

This module itself only reads the environment (when tracing is on, for the composition root in
:mod:`.env`): ``import dsh`` never imports OpenTelemetry.
"""

from __future__ import annotations

import os

__all__ = ["CONTENT_ENV", "enabled_by_env", "env_flag"]


CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_ENDPOINT_ENV = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def enabled_by_env() -> bool:
    """Tracing is on when an OTLP endpoint variable is set, unless ``OTEL_SDK_DISABLED=true``
    or ``OTEL_TRACES_EXPORTER=none``."""
    if env_flag("OTEL_SDK_DISABLED") or os.environ.get("OTEL_TRACES_EXPORTER", "").strip() == "none":
        return False
    return any(os.environ.get(name, "").strip() for name in _ENDPOINT_ENV)
