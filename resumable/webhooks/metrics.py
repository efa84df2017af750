"""Prometheus metrics, read from PostgreSQL (and Redis) at scrape time.

PostgreSQL is the truth, so the gauges are counted there on each scrape and
are the same whichever web process answers: sessions by agent and status,
open dead letters, pending alerts, lingering sessions (hung, unserved,
overdue, blocked, and the conditions the alert job has open), the oldest
pending session's age; the queue's depth is read from Redis. The counters
are this process's own (callbacks and signals by outcome). What happens in
workers (step and tool-call durations, resume latency) is served by each
worker (``resumable/queue/worker_metrics.py``).

A scrape costs the same at a thousand sessions and at a million: it never
reads finished sessions (see ``models/metrics_queries.py``); every count is
of live sessions, through a partial or status-led index, or of a few rows
kept by triggers. ``benchmarks/scrape.py`` measures it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import dramatiq
from dramatiq.common import dq_name
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from resumable.broker.lanes import lanes
from resumable.client import hung_sessions, unserved_agents
from resumable.models import metrics_queries
from resumable.models.database import Database
from resumable.services import slots
from resumable.services.rate_limits import rate_limits

logger = logging.getLogger(__name__)

# Counted up to this many; past it the gauge says "at least".
_HUNG_COUNT_LIMIT = 10_000
# The concurrency keys a scrape reports, the most waiting first.
SLOT_KEYS_SHOWN = 50
# A suspended session this long past its wake time was missed by the scheduler.
OVERDUE_GRACE_SECONDS = 60.0


class DatabaseCollector(Collector):
    def __init__(
        self, db: Database, broker: dramatiq.Broker | None = None, queue: str | None = None
    ) -> None:
        self.db = db
        self.broker = broker
        self.queue = queue

    def collect(self) -> Iterator[GaugeMetricFamily]:
        sessions = GaugeMetricFamily(
            "resumable_sessions", "Sessions by agent and status.", labels=["agent", "status"]
        )
        conditions = GaugeMetricFamily(
            "resumable_sessions_lingering",
            "Sessions in a lingering condition an alert is open for (overdue, unserved, hung, "
            "blocked; see RESUMABLE_ALERT_*_SECONDS), by condition.",
            labels=["condition"],
        )
        with self.db.connection() as conn:
            for count in metrics_queries.sessions_by_agent_and_status(conn):
                sessions.add_metric([count.agent, count.status], _num(count.n))
            for open_count in metrics_queries.open_conditions(conn):
                conditions.add_metric([open_count.condition], _num(open_count.n))
            others = metrics_queries.backlog(conn, grace=OVERDUE_GRACE_SECONDS)
        yield sessions
        yield conditions
        yield GaugeMetricFamily(
            "resumable_dead_letters_open", "Open dead letters.", value=_num(others.dead_letters)
        )
        yield GaugeMetricFamily(
            "resumable_alerts_pending", "Alerts not delivered yet.", value=_num(others.alerts)
        )
        yield GaugeMetricFamily(
            "resumable_sessions_hung",
            "Running sessions whose current step is past its time limit or has run"
            " longer than 10 minutes (a step blocked where a time limit cannot reach).",
            value=float(len(hung_sessions(self.db, limit=_HUNG_COUNT_LIMIT))),
        )
        unserved = GaugeMetricFamily(
            "resumable_sessions_unserved",
            "Sessions waiting because no live worker loads their agent, by agent.",
            labels=["agent"],
        )
        for waiting in unserved_agents(self.db):
            unserved.add_metric([waiting.agent], float(waiting.sessions))
        yield unserved
        yield GaugeMetricFamily(
            "resumable_sessions_overdue",
            f"Suspended sessions more than {OVERDUE_GRACE_SECONDS:g} s past their timer or "
            "deadline (the scheduler is down or behind).",
            value=_num(others.overdue),
        )
        yield GaugeMetricFamily(
            "resumable_oldest_pending_seconds",
            "Age of the longest-waiting pending session (a stuck queue shows here).",
            value=_num(others.oldest_pending),
        )
        yield from self._slots()
        yield from self._rate_limits()
        depth = self._queue_depth()
        if depth is not None:
            yield depth

    def _slots(self) -> Iterator[GaugeMetricFamily]:
        """Concurrency keys (``resumable/limits.py``): the busiest
        ``SLOT_KEYS_SHOWN`` by waiting sessions, so a key per tenant does
        not grow the scrape without bound."""
        families = {
            "running": GaugeMetricFamily(
                "resumable_concurrency_running",
                "Sessions running in a slot of a concurrency key, by key.",
                labels=["key"],
            ),
            "waiting": GaugeMetricFamily(
                "resumable_concurrency_waiting",
                "Sessions waiting for a free slot of a concurrency key, by key.",
                labels=["key"],
            ),
            "limit": GaugeMetricFamily(
                "resumable_concurrency_limit",
                "How many sessions of a concurrency key may run at once, by key.",
                labels=["key"],
            ),
            "oldest": GaugeMetricFamily(
                "resumable_concurrency_oldest_wait_seconds",
                "How long the longest wait for a slot of a concurrency key has lasted, by key.",
                labels=["key"],
            ),
        }
        for usage in slots.usage(self.db, limit=SLOT_KEYS_SHOWN):
            families["running"].add_metric([usage.key], float(usage.running))
            families["waiting"].add_metric([usage.key], float(usage.waiting))
            if usage.limit is not None:
                families["limit"].add_metric([usage.key], float(usage.limit))
            families["oldest"].add_metric([usage.key], usage.oldest_wait_seconds or 0.0)
        yield from families.values()

    def _rate_limits(self) -> Iterator[GaugeMetricFamily]:
        """Rate limits (``resumable/limits.py``): the sessions waiting for a
        turn holding no worker, how far off the next turn is, and what the
        provider refused; the ``SLOT_KEYS_SHOWN`` busiest limits."""
        # Redis keeps the turns on either broker (RabbitMQ carries messages only).
        client = getattr(self.broker, "rate_store", None)
        if client is None or self.queue is None:
            return
        families = {
            "waiting": GaugeMetricFamily(
                "resumable_rate_limit_sessions_waiting",
                "Sessions retrying at their turn of a rate limit (holding no worker), by limit.",
                labels=["limit"],
            ),
            "next": GaugeMetricFamily(
                "resumable_rate_limit_next_turn_seconds",
                "How long until a new call under a rate limit could start, by limit.",
                labels=["limit"],
            ),
            "refused": GaugeMetricFamily(
                "resumable_rate_limit_refused",
                "Calls the provider refused (RateLimited) since the limit was last idle a "
                "period, by limit.",
                labels=["limit"],
            ),
        }
        from resumable.broker.redis import NAMESPACE

        for item in rate_limits(self.db, client, NAMESPACE, self.queue, limit=SLOT_KEYS_SHOWN):
            families["waiting"].add_metric([item.name], float(item.sessions_waiting))
            families["next"].add_metric([item.name], item.next_turn_in_seconds)
            families["refused"].add_metric([item.name], float(item.refused))
        yield from families.values()

    def _queue_depth(self) -> GaugeMetricFamily | None:
        """Messages waiting in the broker (not yet fetched by a worker), and
        delayed ones (retries and hand-backs not due yet; on RabbitMQ, those
        a worker holds until due are not counted); left out if the broker is
        down."""
        depths_of = getattr(self.broker, "queue_depths", None)
        if depths_of is None or self.queue is None:
            return None
        depth = GaugeMetricFamily(
            "resumable_queue_depth",
            "Queue messages waiting in the broker for a worker, by queue: its priority lanes"
            " (`.high`, `.low`; normal: the queue itself) and `.DQ`, the delayed ones.",
            labels=["queue"],
        )
        try:
            for name, count in depths_of([*lanes(self.queue), dq_name(self.queue)]).items():
                depth.add_metric([name], float(count))
        except Exception as exc:  # the broker down: the rest of the scrape still answers
            logger.warning("queue depth not read: %s", exc, extra={"action": "metrics_redis"})
            return None
        return depth


def _num(value: Any) -> float:
    return float(value)


class Metrics:
    """One registry per app (no global state), with the process's counters."""

    def __init__(
        self, db: Database, broker: dramatiq.Broker | None = None, queue: str | None = None
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(DatabaseCollector(db, broker, queue))
        self.deliveries = Counter(
            "resumable_deliveries",
            "Callbacks and signals received, by kind and outcome.",
            ["kind", "outcome"],
            registry=self.registry,
        )
