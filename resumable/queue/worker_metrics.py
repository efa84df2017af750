"""Prometheus metrics measured where the work happens: in worker processes.

Step durations, tool calls and resume latency happen in the workers, not in
the web process that serves ``/metrics``, so each worker serves its own
``/metrics`` on ``RESUMABLE_WORKER_METRICS_PORT`` (as dramatiq's Prometheus
middleware does); Prometheus scrapes every worker and sums across them. Off
(the default, port 0) nothing is measured: every hook checks one global.

The counts that are the same whichever process answers (sessions by status,
lingering sessions, dead letters) stay in the web process's ``/metrics``,
read from PostgreSQL.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

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
    )


class _Served:
    """The worker's metrics when served; None (every hook does nothing) otherwise."""

    metrics: WorkerMetrics | None = None


served = _Served()


def serve(port: int, host: str) -> WorkerMetrics | None:
    """Serve this process's metrics on `port` (0: off, nothing is measured)."""
    if port == 0:
        return None
    built = _build()
    start_http_server(port, addr=host, registry=built.registry)
    served.metrics = built
    logger.info(
        "worker metrics on http://%s:%d/metrics", host, port, extra={"action": "metrics_serving"}
    )
    return built


def enable_in_process() -> WorkerMetrics:
    """Measure without serving (tests and embedding apps that export the
    registry themselves)."""
    served.metrics = _build()
    return served.metrics
