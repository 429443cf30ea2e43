"""The OpenTelemetry side: spans into the SDK, the OTLP/HTTP exporters, metrics, OTLP JSON.

Owns everything that imports ``opentelemetry`` (the ``dsh[otel]`` extra), so it is imported
only when tracing is on or ``dsh sessions trace`` runs:

- :class:`OtelSink` turns :class:`~dsh.observability.spans.SpanData` into SDK spans with the
  log's timestamps (``start_time``/``end_time`` from the events, never the clock).
- :func:`pipeline` builds a tracer provider whose spans are batched by the SDK's
  ``BatchSpanProcessor`` (a worker thread, a bounded queue: ``OTEL_BSP_MAX_QUEUE_SIZE``, 2048 by
  default, dropping beyond) into an OTLP/HTTP exporter, and a meter provider for the GenAI
  metrics. :class:`_Guarded` wraps each exporter so an unreachable collector is one warning line.
- :func:`otlp_json` encodes finished spans as an OTLP/JSON ``ExportTraceServiceRequest``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
from opentelemetry import trace
from opentelemetry.context import Context as OtelContext
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from dsh.observability.spans import SpanData

__all__ = ["OtelSink", "Pipeline", "memory_pipeline", "otlp_json", "pipeline", "signal_url"]

log = logging.getLogger("dsh.telemetry")

SCOPE = "dsh"
_KINDS = {"client": SpanKind.CLIENT, "internal": SpanKind.INTERNAL}
_NS = 1_000_000


def signal_url(base: str, signal: str) -> str:
    """``http://host:4318`` → ``http://host:4318/v1/traces``; a URL already ending in the signal
    path is kept (``--otlp`` takes either, like ``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
    path = f"/v1/{signal}"
    base = base.rstrip("/")
    if base.endswith(path):
        return base
    for other in ("/v1/traces", "/v1/metrics", "/v1/logs"):
        if base.endswith(other):
            base = base[: -len(other)]
    return base + path


class OtelSink:
    """A :class:`~dsh.observability.spans.SpanSink` creating SDK spans on ``tracer``.

    The attributes known when a span opens go to ``start_span`` (samplers see them); at its end
    only what was added or changed since is set, since the SDK re-validates every value set.
    """

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def start(self, span: SpanData) -> None:
        parent = span.parent.handle if span.parent is not None else None
        if isinstance(parent, _Handle):
            context = trace.set_span_in_context(parent.span)
        else:
            context = OtelContext()
        started = dict(span.attributes)
        sdk_span = self.tracer.start_span(
            span.name,
            context=context,
            kind=_KINDS.get(span.kind, SpanKind.INTERNAL),
            attributes=started,
            start_time=span.start_ms * _NS,
        )
        span.handle = _Handle(sdk_span, started, span.name)

    def end(self, span: SpanData) -> None:
        handle = span.handle
        if not isinstance(handle, _Handle):
            return
        sdk_span = handle.span
        if span.name != handle.name:
            sdk_span.update_name(span.name)
        started = handle.attributes
        changed = {k: v for k, v in span.attributes.items() if k not in started or started[k] != v}
        if changed:
            sdk_span.set_attributes(changed)
        for event in span.events:
            sdk_span.add_event(event.name, dict(event.attributes), timestamp=event.time_ms * _NS)
        if span.error is not None:
            sdk_span.set_status(Status(StatusCode.ERROR, span.error))
        sdk_span.end(end_time=(span.end_ms if span.end_ms is not None else span.start_ms) * _NS)


class _Handle:
    """The SDK span of a :class:`SpanData`, with what it was started with."""

    __slots__ = ("attributes", "name", "span")

    def __init__(self, span: trace.Span, attributes: dict[str, Any], name: str) -> None:
        self.span, self.attributes, self.name = span, attributes, name


class _Warned:
    """One warning line per process for an unreachable collector, whichever exporter hits it."""

    lock = threading.Lock()
    done = False

    @classmethod
    def once(cls, url: str, why: str) -> None:
        with cls.lock:
            if cls.done:
                return
            cls.done = True
        log.warning("telemetry: cannot export to %s (%s); traces and metrics are dropped", url, why)


class _Guarded(SpanExporter):
    def __init__(self, inner: SpanExporter, url: str, warn: bool = True) -> None:
        self.inner, self.url, self.warn = inner, url, warn
        self.failed = False
        self.closing = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.closing:  # after the bounded flush at exit: dropped, not retried
            return SpanExportResult.SUCCESS
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # an exporter must never take the worker (or a turn) down
            self._failed(type(exc).__name__)
            return SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._failed("collector unreachable or refused the batch")
        return result

    def _failed(self, why: str) -> None:
        self.failed = True
        if self.warn:
            _Warned.once(self.url, why)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _GuardedMetrics(MetricExporter):
    def __init__(self, inner: MetricExporter, url: str) -> None:
        super().__init__(inner._preferred_temporality, inner._preferred_aggregation)
        self.inner, self.url = inner, url
        self.closing = False

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        if self.closing:
            return MetricExportResult.SUCCESS
        try:
            result = self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception as exc:
            _Warned.once(self.url, type(exc).__name__)
            return MetricExportResult.FAILURE
        if result is not MetricExportResult.SUCCESS:
            _Warned.once(self.url, "collector unreachable or refused the batch")
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)


@dataclass
class Pipeline:
    """A tracer (and optionally a meter) provider and how to stop them within a bound."""

    tracer_provider: TracerProvider
    exporters: list[_Guarded | _GuardedMetrics]
    meter_provider: MeterProvider | None = None
    memory: InMemorySpanExporter | None = None
    guarded: _Guarded | None = None
    closed: bool = False

    def failed(self) -> bool:
        """Whether an export of spans failed."""
        return self.guarded is not None and self.guarded.failed

    def sink(self) -> OtelSink:
        return OtelSink(self.tracer_provider.get_tracer(SCOPE))

    def shutdown(self, timeout_ms: int) -> None:
        """Flush for at most ``timeout_ms``, then stop: a collector that is down or never answers
        costs the process at most about that long at exit. The SDK's own shutdown (which joins
        an exporter blocked on the network) runs in a daemon thread that is waited for no
        longer; the exporters' retries are cut short. A second call does nothing."""
        if self.closed:
            return
        self.closed = True
        done = threading.Event()

        def stop() -> None:
            self.tracer_provider.force_flush(timeout_ms)
            if self.meter_provider is not None:
                self.meter_provider.force_flush(timeout_ms)
            for exporter in self.exporters:
                exporter.closing = True
                exporter.inner.shutdown()  # aborts a retry still waiting
            self.tracer_provider.shutdown()
            if self.meter_provider is not None:
                self.meter_provider.shutdown(timeout_millis=timeout_ms)
            done.set()

        threading.Thread(target=stop, name="dsh-telemetry-shutdown", daemon=True).start()
        if not done.wait(timeout_ms / 1000 + 0.5) and self.guarded is not None:
            self.guarded._failed(f"no answer within {timeout_ms} ms")


def _resource(service_name: str | None) -> Resource:
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are read by Resource.create; an explicit
    # serviceName in the plugin config wins, and "dsh" is the default instead of unknown_service.
    attrs: dict[str, str] = {}
    if service_name:
        attrs["service.name"] = service_name
    elif not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        attrs["service.name"] = "dsh"
    return Resource.create(attrs)


def _quiet_sdk_loggers() -> None:
    # The exporters log every retry; dsh says it once (_Warned). --debug keeps them.
    for name in ("opentelemetry.exporter", "opentelemetry.sdk", "opentelemetry.exporter.otlp.common.http"):
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET and not logging.getLogger().isEnabledFor(logging.DEBUG):
            logger.setLevel(logging.CRITICAL)


def pipeline(
    endpoint: str | None,
    *,
    service_name: str | None = None,
    metrics: bool = True,
    headers: Mapping[str, str] | None = None,
    batch: bool = True,
    metric_interval_ms: int = 60_000,
    warn: bool = True,
) -> Pipeline:
    """Providers exporting over OTLP/HTTP to ``endpoint`` (a base URL; ``None``: the standard
    ``OTEL_EXPORTER_OTLP_*`` variables)."""
    _quiet_sdk_loggers()
    resource = _resource(service_name)
    traces_url = signal_url(endpoint, "traces") if endpoint else None
    exporter = OTLPSpanExporter(endpoint=traces_url, headers=dict(headers) if headers else None)
    guarded = _Guarded(exporter, traces_url or exporter._endpoint, warn)
    # No atexit hooks: Pipeline.shutdown bounds the exit; the SDK's hook would join a blocked export.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(guarded) if batch else SimpleSpanProcessor(guarded))
    exporters: list[_Guarded | _GuardedMetrics] = [guarded]
    meter_provider = None
    if metrics:
        metrics_url = signal_url(endpoint, "metrics") if endpoint else None
        metric_exporter = OTLPMetricExporter(endpoint=metrics_url, headers=dict(headers) if headers else None)
        guarded_metrics = _GuardedMetrics(metric_exporter, metrics_url or metric_exporter._endpoint)
        reader = PeriodicExportingMetricReader(guarded_metrics, export_interval_millis=metric_interval_ms)
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
        exporters.append(guarded_metrics)
    return Pipeline(provider, exporters, meter_provider, guarded=guarded)


def memory_pipeline(service_name: str | None = None) -> Pipeline:
    """Spans kept in memory (``dsh sessions trace --json``)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=_resource(service_name), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return Pipeline(provider, [], None, memory)


_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(node: object) -> None:
    # OTLP/JSON spells trace and span ids in hex, where the protobuf JSON mapping uses base64.
    import base64

    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


def otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """An OTLP/JSON ``ExportTraceServiceRequest`` holding ``spans``."""
    body: dict[str, Any] = MessageToDict(encode_spans(spans))
    _hex_ids(body)
    return body
