"""The ``telemetry`` plugin: live OpenTelemetry traces and metrics of every session on a context.

It listens to the session bus (``session/created``, ``session/event``, ``session/disposed``)
and feeds each appended event to that session's
:class:`~dsh.observability.spans.SessionTracer`, the same derivation ``dsh sessions trace``
replays from a store. Spans carry the log's timestamps and are exported by the SDK's batch
processor on its own thread; nothing here awaits the network, so a turn never waits for (or
fails because of) the collector. A session created with ``parentSession`` (a subagent's child
session) hangs its turns under the parent's innermost open span.

Mounted from a config entry (``name: telemetry``) or, in every composition that goes through
:func:`dsh.compose.mount_spine`, when the standard OpenTelemetry variables ask for it
(:func:`dsh.observability.env.maybe_mount`).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
from collections.abc import Mapping

from dsh.observability import CONTENT_ENV, env_flag
from dsh.observability.cost import prewarm
from dsh.observability.spans import SessionTracer
from dsh.runtime import ConfigError, Context, ServiceKey
from dsh.runtime.config import CheckedConfig
from dsh.session import Event, Session

__all__ = ["TELEMETRY", "Config", "Telemetry", "apply", "name"]

name = "telemetry"
log = logging.getLogger("dsh.telemetry")


class Config(
    CheckedConfig,
    rename={
        "service_name": "serviceName",
        "capture_content": "captureContent",
        "shutdown_timeout_ms": "shutdownTimeoutMs",
        "metric_interval_ms": "metricIntervalMs",
    },
):
    # Base URL of an OTLP/HTTP collector; default: OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT.
    endpoint: str | None = None
    service_name: str | None = None
    # Message contents on spans (off by default): default from
    # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT.
    capture_content: bool | None = None
    metrics: bool = True
    headers: dict[str, str] | None = None
    shutdown_timeout_ms: int = 2000
    metric_interval_ms: int = 60_000

    def __post_init__(self) -> None:
        if self.shutdown_timeout_ms < 0 or self.metric_interval_ms <= 0:
            raise ValueError("telemetry: shutdownTimeoutMs must be >= 0 and metricIntervalMs > 0")


class Telemetry:
    """The live tracers of one context and the pipeline they export through."""

    def __init__(self, config: Config) -> None:
        try:
            from dsh.observability import otel
        except ImportError as exc:
            raise ConfigError(
                f"telemetry: OpenTelemetry is not installed ({exc.name}); install dsh[otel]"
            ) from None
        self.config = config
        self.capture = config.capture_content if config.capture_content is not None else env_flag(CONTENT_ENV)
        self.pipeline = otel.pipeline(
            config.endpoint,
            service_name=config.service_name,
            metrics=config.metrics,
            headers=config.headers,
            metric_interval_ms=config.metric_interval_ms,
        )
        self.sink = self.pipeline.sink()
        prewarm()  # the price table loads off the event loop, before the first model call ends
        self.tracers: dict[str, SessionTracer] = {}
        self._metrics = _Metrics(self.pipeline.meter_provider) if self.pipeline.meter_provider else None
        # A library user who never closes the agent still gets what is queued, within the bound
        # (the SDK's own atexit hook is off: it would wait on a collector that never answers).
        atexit.register(self.pipeline.shutdown, config.shutdown_timeout_ms)

    # -- bus listeners ------------------------------------------------------------------------
    def on_created(self, session: Session) -> None:
        if session.id in self.tracers:
            return
        parent_id = session.header.get("parentSession")
        parent_tracer = self.tracers.get(parent_id) if isinstance(parent_id, str) else None
        tracer = SessionTracer(
            session.id,
            self.sink,
            parent=parent_tracer.innermost() if parent_tracer is not None else None,
            capture_content=self.capture,
        )
        # A resumed session: its earlier turns were traced by the process that ran them; only
        # the model in force carries over (request/header is logged only when it changes).
        for event in reversed(session.events):
            if event.type == "request/header":
                tracer.feed(event.type, event.time, event.data)
                break
        self.tracers[session.id] = tracer

    def on_event(self, session: Session, event: Event) -> None:
        tracer = self.tracers.get(session.id)
        if tracer is None:
            return
        try:
            tracer.feed(event.type, event.time, event.data)
            if tracer.calls:
                if self._metrics is not None:
                    for call in tracer.calls:
                        self._metrics.record(*call)
                tracer.calls.clear()
        except Exception:  # tracing never fails a turn
            log.debug("telemetry: event %s of %s not traced", event.seq, session.id, exc_info=True)

    def on_disposed(self, session: Session) -> None:
        tracer = self.tracers.pop(session.id, None)
        if tracer is not None:
            tracer.close()

    async def dispose(self) -> None:
        for tracer in list(self.tracers.values()):
            tracer.close()
        self.tracers.clear()
        await asyncio.to_thread(self.pipeline.shutdown, self.config.shutdown_timeout_ms)
        atexit.unregister(self.pipeline.shutdown)


class _Metrics:
    """The GenAI client metrics (names from the semantic conventions) and dsh's cost counter."""

    def __init__(self, provider: object) -> None:
        from opentelemetry.sdk.metrics import MeterProvider

        assert isinstance(provider, MeterProvider)
        meter = provider.get_meter("dsh")
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens used per model call"
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="Model call duration"
        )
        self.cost = meter.create_counter("dsh.gen_ai.client.cost", unit="USD", description="Model call cost")

    def record(self, model: str, provider: str, usage: Mapping[str, int], seconds: float, cost: float | None) -> None:
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider, "gen_ai.request.model": model}
        fresh = usage.get("inputTokens", 0) + usage.get("cacheReadTokens", 0) + usage.get("cacheWriteTokens", 0)
        self.tokens.record(fresh, {**attrs, "gen_ai.token.type": "input"})
        self.tokens.record(usage.get("outputTokens", 0), {**attrs, "gen_ai.token.type": "output"})
        self.duration.record(max(seconds, 0.0), attrs)
        if cost is not None:
            self.cost.add(cost, attrs)


TELEMETRY: ServiceKey[Telemetry] = ServiceKey("telemetry")


def apply(ctx: Context, config: Config) -> None:
    if config.endpoint is None and not (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        # The exporter's own default; said once so a missing collector is not a mystery.
        log.debug("telemetry: no endpoint configured; exporting to http://localhost:4318")
    telemetry = Telemetry(config)
    ctx.provide(TELEMETRY, telemetry)
    ctx.on("session/created", telemetry.on_created)
    ctx.on("session/event", telemetry.on_event)
    ctx.on("session/disposed", telemetry.on_disposed)
    ctx.defer(telemetry.dispose)
