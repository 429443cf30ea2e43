"""Observability: OpenTelemetry GenAI traces and metrics, live and replayed, and cost in money.

This package owns deriving spans from the durable log (:mod:`.spans`, the one mapping shared by
the live ``telemetry`` plugin and ``dsh sessions trace``), the OpenTelemetry SDK side
(:mod:`.otel`, the ``dsh[otel]`` extra), the plugin (:mod:`.plugin`), replay (:mod:`.replay`)
and the price of a model call (:mod:`.cost`, on ``genai-prices``). See README.md beside this file.

This module itself only reads the environment: ``import dsh`` never imports OpenTelemetry.
"""

from __future__ import annotations

from dsh.observability.env import CONTENT_ENV, enabled_by_env, env_flag

__all__ = ["CONTENT_ENV", "enabled_by_env", "env_flag"]
