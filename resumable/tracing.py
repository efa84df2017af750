"""OpenTelemetry spans for a session's whole life, one trace however long it waits.

Off unless configured: ``configure_tracing()`` (called by the ``resumable``
processes) turns it on only when the ``otel`` extra is installed and the
standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set
(and ``OTEL_SDK_DISABLED`` is not true); spans go out over OTLP/HTTP from a
batch processor. An embedding app that has its own tracer provider calls
``enable_tracing()``. While it is off every hook is one check of a module
global: nothing is imported, created or read.

One trace per session. ``start`` opens a short ``resumable.session.start``
span (a child of the caller's current span, or of the ``traceparent`` header
the HTTP start route received) and stores its W3C context with the session
row (``sessions.trace_context``). Every later span (each run of the session
by a worker, its steps and tool calls, a callback or signal received, the
scheduler waking it) is a child of that stored context, in whatever process
and however many days later: a trace backend shows the session as one tree.
Span links would say "related" and lose the tree; a span left open for the
whole wait would never be exported if its process died. See
docs/architecture.md ("Tracing").
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from resumable._internal.serialization import unstorable_text
from resumable.errors import ConfigurationError
from resumable.settings import checked_http_url

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from resumable.models.database import Database
    from resumable.services.inbox import Receipt

logger = logging.getLogger(__name__)

_INSTRUMENTATION = "resumable"
_TRACE_CONTEXT = "SELECT id, trace_context FROM sessions WHERE id = ANY(%(ids)s)"


class _On:
    """The tracer when tracing is on; None (every hook does nothing) otherwise."""

    tracer: Tracer | None = None


_on = _On()


def enabled() -> bool:
    return _on.tracer is not None


# The batch processor's settings, whole numbers the SDK reads itself: a value
# it cannot use stopped every command as "unexpected ValueError", or logged a
# traceback and went on with its default. (The exporter's timeouts it reads
# as floats: a word it warns about and replaces with 10 s, but "inf", 0 or a
# negative one it takes, and then every export fails: the spans are lost.)
_OTEL_NUMBERS = (
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_EXPORT_TIMEOUT",
)
_MAX_OTEL_NUMBER = 2**31 - 1
_OTEL_TIMEOUTS = ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
_MAX_OTEL_TIMEOUT_SECONDS = 86400.0


def _is_timeout(text: str) -> bool:
    try:
        seconds = float(text)
    except ValueError:
        return False
    return text.isascii() and 0 < seconds <= _MAX_OTEL_TIMEOUT_SECONDS  # False for nan


def _otel_problem() -> str | None:
    """What in the OTEL_* environment the SDK would choke on, naming the
    variable (never its value, as for every other setting)."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        value = os.environ.get(name)
        if not value:
            continue
        try:
            if unstorable_text(value):
                raise ValueError
            urlsplit(value).port  # noqa: B018 - raises for a port that is not a number
        except ValueError:
            return f"{name}: must be an http:// or https:// URL"
        try:
            checked_http_url(value)  # as RESUMABLE_PUBLIC_URL is checked
        except ValueError as exc:
            return f"{name}: {exc}"
    for name in _OTEL_NUMBERS:
        value = os.environ.get(name)
        if value is not None and value.strip():
            text = value.strip()
            if not text.isascii() or not text.isdigit() or not 0 < int(text) <= _MAX_OTEL_NUMBER:
                return f"{name}: must be a whole number from 1 to {_MAX_OTEL_NUMBER}"
    for name in _OTEL_TIMEOUTS:
        value = os.environ.get(name, "").strip()
        if value and not _is_timeout(value):
            return f"{name}: must be a number of seconds above 0 and at most 86400"
    batch = os.environ.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "").strip()
    queue = os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE", "").strip() or "2048"
    if batch and int(batch) > int(queue):
        return "OTEL_BSP_MAX_EXPORT_BATCH_SIZE: must not exceed OTEL_BSP_MAX_QUEUE_SIZE (2048)"
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        value = os.environ.get(name, "")
        if unstorable_text(value):
            return f"{name}: must be UTF-8 text without NUL"
    return None


# A command that exits on its own (enqueue, sessions, dlq ...) exports its
# spans as it exits, and the exporter retries an unreachable collector for
# its whole timeout (10 s by default): every command took 9-12 s. Its export
# gets this long unless OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT says otherwise.
ONE_SHOT_EXPORT_TIMEOUT_SECONDS = 2.0


def configure_tracing(service_name: str, *, long_running: bool = True) -> bool:
    """Export spans over OTLP/HTTP when the environment asks for it; True if
    on. ConfigurationError for an OTEL_* value the SDK could not use."""
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not endpoint or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    problem = _otel_problem()
    if problem:
        raise ConfigurationError(f"invalid setting {problem}")
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        logger.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not installed "
            "(pip install 'resumable[otel]'); tracing is off",
            extra={"action": "tracing_unavailable"},
        )
        return False
    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    timeout_set = any(os.environ.get(name, "").strip() for name in _OTEL_TIMEOUTS)
    timeout = None if long_running or timeout_set else ONE_SHOT_EXPORT_TIMEOUT_SECONDS
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(timeout=timeout)))
    trace.set_tracer_provider(provider)
    _on.tracer = provider.get_tracer(_INSTRUMENTATION)
    return True


def enable_tracing(tracer: Tracer | None = None) -> None:
    """Turn spans on in an embedding app, with its tracer (default: one from
    the global tracer provider the app configured)."""
    from opentelemetry import trace

    _on.tracer = tracer or trace.get_tracer(_INSTRUMENTATION)


def disable_tracing() -> None:
    _on.tracer = None


def flush(timeout_millis: int = 5000) -> None:
    """Export what is buffered (before a process exits on its own)."""
    if _on.tracer is None:
        return
    from opentelemetry import trace

    force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if force_flush is not None:
        force_flush(timeout_millis)


# -- capture: the trace context a session is stored with ------------------------------------


@contextlib.contextmanager
def session_start(agent: str, session_id: uuid.UUID) -> Iterator[dict[str, str] | None]:
    """Around creating a session: yields the trace context to store with it.

    On: a ``resumable.session.start`` span, whose context is stored. Off: the
    caller's own current span, if the app traces with OpenTelemetry, so the
    session's later spans (when a worker traces) still join the caller's
    trace; else None."""
    if _on.tracer is None:
        yield _current_carrier()
        return
    with _on.tracer.start_as_current_span(
        "resumable.session.start",
        attributes={"resumable.session.id": str(session_id), "resumable.agent": agent},
    ):
        yield _inject()


def _current_carrier() -> dict[str, str] | None:
    if not _api_installed():
        return None
    from opentelemetry import trace

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    return _inject()


@functools.cache
def _api_installed() -> bool:
    """Looked up once: a failed import on every start would search sys.path each time."""
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def _inject(context: Context | None = None) -> dict[str, str]:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=context)
    return carrier


def _extract(carrier: Mapping[str, Any] | None) -> Context | None:
    if not carrier:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(
        {k: str(v) for k, v in carrier.items() if k in ("traceparent", "tracestate")}
    )


@contextlib.contextmanager
def remote_parent(headers: Mapping[str, str]) -> Iterator[None]:
    """Make an HTTP request's ``traceparent`` header the current context (the
    start route), so the session's trace continues the caller's."""
    if _on.tracer is None or "traceparent" not in headers:
        yield
        return
    from opentelemetry import context

    parent = _extract({"traceparent": headers["traceparent"], **_state(headers)})
    assert parent is not None
    token = context.attach(parent)
    try:
        yield
    finally:
        context.detach(token)


def _state(headers: Mapping[str, str]) -> dict[str, str]:
    state = headers.get("tracestate")
    return {"tracestate": state} if state else {}


# -- spans in the session's trace ---------------------------------------------------------


def session_contexts(db: Database, session_ids: list[uuid.UUID]) -> dict[uuid.UUID, Context | None]:
    """The stored trace contexts of these sessions (one query). Tracing never
    fails the work it watches: if the database cannot answer, the spans
    start traces of their own."""
    try:
        with db.connection() as conn:
            rows = conn.execute(_TRACE_CONTEXT, {"ids": session_ids}).fetchall()
    except Exception as exc:
        logger.warning(
            "trace context not read (%s); spans start their own traces",
            exc,
            extra={"action": "tracing_degraded"},
        )
        return {}
    return {uuid.UUID(str(row["id"])): _extract(_mapping(row["trace_context"])) for row in rows}


def _mapping(value: object) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


@contextlib.contextmanager
def session_span(
    db: Database, session_id: uuid.UUID, name: str, attributes: dict[str, Any]
) -> Iterator[Span | None]:
    """A span in the session's trace (its stored context is read first), made
    current so the spans below it (steps, tool calls) nest in it."""
    if _on.tracer is None:
        yield None
        return
    parent = session_contexts(db, [session_id]).get(session_id)
    with _on.tracer.start_as_current_span(
        name, context=parent, attributes={"resumable.session.id": str(session_id), **attributes}
    ) as span:
        yield span


@contextlib.contextmanager
def child_span(name: str, attributes: dict[str, Any]) -> Iterator[Span | None]:
    """A span under the current one (a step under its run, a tool call under its step)."""
    if _on.tracer is None:
        yield None
        return
    with _on.tracer.start_as_current_span(name, attributes=attributes) as span:
        yield span


def instant_spans(
    db: Database,
    name: str,
    sessions: Mapping[uuid.UUID, dict[str, Any]],
    *,
    began_ns: int | None = None,
) -> None:
    """A moment in each session's trace (a delivery received, a wake-up), one
    query for all of them. ``began_ns`` (``time.time_ns()``) is when the act
    began: the span is recorded after it, and by then a resume the act set off
    in a worker may already have started, so a span starting at the recording
    would wrongly follow its own effect in the trace."""
    if _on.tracer is None or not sessions:
        return
    parents = session_contexts(db, list(sessions))
    for session_id, attributes in sessions.items():
        _on.tracer.start_span(
            name,
            context=parents.get(session_id),
            attributes={"resumable.session.id": str(session_id), **attributes},
            start_time=began_ns,
        ).end()


def delivery_received(db: Database, kind: str, receipt: Receipt, began_ns: int) -> None:
    """A callback or signal received (the web routes, on a database thread):
    a moment in its session's trace from ``began_ns``, with what became of
    it (accepted, duplicate, ...)."""
    if _on.tracer is None or receipt.session_id is None:
        return
    attributes: dict[str, Any] = {
        "resumable.delivery.kind": kind,
        "resumable.delivery.verdict": receipt.verdict.value,
        "resumable.delivery.woke": receipt.woke,
    }
    if receipt.delivery_id is not None:
        attributes["resumable.delivery.id"] = receipt.delivery_id
    instant_spans(
        db, f"resumable.{kind} received", {receipt.session_id: attributes}, began_ns=began_ns
    )


def woken(db: Database, rows: list[dict[str, Any]], *, began_ns: int | None = None) -> None:
    """Sessions the scheduler woke (rows with ``id`` and ``kind``): a
    ``resumable.wake`` moment in each one's trace, from ``began_ns``."""
    if _on.tracer is None or not rows:
        return
    instant_spans(
        db,
        "resumable.wake",
        {uuid.UUID(str(row["id"])): {"resumable.wake.kind": str(row["kind"])} for row in rows},
        began_ns=began_ns,
    )


def recovered(db: Database, began_ns: int, **found: list[uuid.UUID]) -> None:
    """Sessions the reconciler re-enqueued, by why (``pending``: the message was
    lost; ``expired``/``orphaned``: its worker died): a ``resumable.recover``
    moment in each one's trace, from ``began_ns``, when the pass began."""
    if _on.tracer is None:
        return
    sessions = {
        session_id: {"resumable.recover.reason": reason}
        for reason, ids in found.items()
        for session_id in ids
    }
    instant_spans(db, "resumable.recover", sessions, began_ns=began_ns)
