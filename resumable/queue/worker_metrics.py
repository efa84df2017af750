"""Prometheus metrics measured where the work happens, and each worker
process's own health, served beside them.

Step durations, tool calls and resume latency happen in the workers, not in
the web process that serves ``/metrics``, so each worker serves its own
``/metrics`` on ``RESUMABLE_WORKER_METRICS_PORT`` (as dramatiq's Prometheus
middleware does); Prometheus scrapes every worker and sums across them. Off
(the default, port 0) nothing is measured: every hook checks one global.

The counts that are the same whichever process answers (sessions by status,
lingering sessions, dead letters) stay in the web process's ``/metrics``,
read from PostgreSQL.

The same port answers ``/healthz`` and ``/readyz`` for this process: 200 while
its vital threads run (``vitals.py``), 503 with the problem once one died or
hung (and while it starts). A probe asks the process itself, not its sockets.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from resumable.queue.vitals import VitalSigns

logger = logging.getLogger(__name__)

# Steps and tool calls are LLM and API calls: from a few ms to minutes.
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


@dataclass(frozen=True)
class WorkerMetrics:
    registry: CollectorRegistry
    step_seconds: Histogram
    tool_seconds: Histogram
    tool_failures: Counter
    resume_latency: Histogram
    divergences: Counter
    healthy: Gauge


def _build() -> WorkerMetrics:
    registry = CollectorRegistry(auto_describe=False)
    return WorkerMetrics(
        registry=registry,
        step_seconds=Histogram(
            "resumable_step_duration_seconds",
            "Time a step ran (the agent's code, its tool calls and validation; not the "
            "commit), by agent, step and outcome (ok, error).",
            ["agent", "step", "outcome"],
            buckets=_SECONDS,
            registry=registry,
        ),
        tool_seconds=Histogram(
            "resumable_tool_call_duration_seconds",
            "Time a tool call's function ran (not replays from the cache), by tool and "
            "outcome (ok, error).",
            ["tool", "outcome"],
            buckets=_SECONDS,
            registry=registry,
        ),
        tool_failures=Counter(
            "resumable_tool_call_failures",
            "Tool calls whose function raised, by tool and exception type.",
            ["tool", "error"],
            registry=registry,
        ),
        resume_latency=Histogram(
            "resumable_resume_latency_seconds",
            "From a callback or signal being stored to a worker starting the session's "
            "next run, by agent and delivery kind.",
            ["agent", "kind"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60),
            registry=registry,
        ),
        divergences=Counter(
            "resumable_replay_divergences",
            "Sessions parked as blocked because replay diverged from the record, by agent.",
            ["agent"],
            registry=registry,
        ),
        healthy=Gauge(
            "resumable_worker_healthy",
            "1 while every vital thread of this worker process (consumers, worker threads, "
            "lease keeper, heartbeat, event loop) runs; 0 once one died or hung (the process "
            "then hands its sessions back and exits) or while it starts.",
            registry=registry,
        ),
    )


class _Served:
    """The worker's metrics when served; None (every hook does nothing) otherwise."""

    metrics: WorkerMetrics | None = None
    #: The running worker's vital signs (None while it starts).
    vitals: VitalSigns | None = None

    def problem(self) -> str | None:
        vitals = self.vitals
        if vitals is None:
            return "starting"
        return vitals.problem


served = _Served()


def watch(vitals: VitalSigns) -> None:
    """From now on, health answers from `vitals`."""
    served.vitals = vitals


_WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _with_health(metrics_app: _WSGIApp) -> _WSGIApp:
    """``/healthz`` and ``/readyz`` from this process's vital signs; every
    other path is Prometheus's (as with ``start_http_server``)."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") not in ("/healthz", "/readyz"):
            return metrics_app(environ, start_response)
        problem = served.problem()
        body = {"status": "ok" if problem is None else "unavailable"}
        if problem is not None:
            body["problem"] = problem
        data = json.dumps(body).encode()
        status = "200 OK" if problem is None else "503 Service Unavailable"
        start_response(
            status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
        )
        return [data]

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes are not worth a log line each."""


def _server_class(host: str, port: int) -> type[ThreadingWSGIServer]:
    """A threading WSGI server of the host's address family (IPv6 too)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]

    class Server(ThreadingWSGIServer):
        address_family = family

    return Server


def serve(port: int, host: str) -> WorkerMetrics | None:
    """Serve this process's metrics and health on `port` (0: off, nothing is measured)."""
    if port == 0:
        return None
    built = _build()
    built.healthy.set_function(lambda: 1.0 if served.problem() is None else 0.0)
    app = _with_health(make_wsgi_app(built.registry))
    httpd = make_server(host, port, app, _server_class(host, port), handler_class=_QuietHandler)
    threading.Thread(target=httpd.serve_forever, name="resumable-metrics", daemon=True).start()
    served.metrics = built
    logger.info(
        "worker metrics on http://%s:%d/metrics, its health at /readyz",
        host,
        port,
        extra={"action": "metrics_serving"},
    )
    return built


def enable_in_process() -> WorkerMetrics:
    """Measure without serving (tests and embedding apps that export the
    registry themselves)."""
    served.metrics = _build()
    return served.metrics
