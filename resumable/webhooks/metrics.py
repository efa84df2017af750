"""Prometheus metrics, read from PostgreSQL at scrape time.

PostgreSQL is the truth, so the gauges are counted there on each scrape
(sessions by status and agent, open dead letters, pending alerts, hung
sessions, sessions no live worker serves, the oldest pending session's age)
and are the same whichever web process answers. The
counters are this process's own (callbacks and signals by outcome).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from resumable.client import hung_sessions, unserved_agents
from resumable.models import metrics_queries
from resumable.models.database import Database

# Counted up to this many; past it the gauge says "at least".
_HUNG_COUNT_LIMIT = 10_000


class DatabaseCollector(Collector):
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        sessions = GaugeMetricFamily(
            "resumable_sessions", "Sessions by agent and status.", labels=["agent", "status"]
        )
        with self.db.connection() as conn:
            for row in conn.execute(metrics_queries.SESSIONS_BY_AGENT_AND_STATUS).fetchall():
                sessions.add_metric([str(row["agent"]), str(row["status"])], float(row["n"]))  # type: ignore[arg-type]
            others = conn.execute(metrics_queries.BACKLOG).fetchone()
        yield sessions
        assert others is not None
        yield GaugeMetricFamily(
            "resumable_dead_letters_open",
            "Open dead letters.",
            value=float(others["dead_letters"]),  # type: ignore[arg-type]
        )
        yield GaugeMetricFamily(
            "resumable_alerts_pending",
            "Alerts not delivered yet.",
            value=float(others["alerts"]),  # type: ignore[arg-type]
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
            "resumable_oldest_pending_seconds",
            "Age of the longest-waiting pending session (a stuck queue shows here).",
            value=float(others["oldest_pending"]),  # type: ignore[arg-type]
        )


class Metrics:
    """One registry per app (no global state), with the process's counters."""

    def __init__(self, db: Database) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(DatabaseCollector(db))
        self.deliveries = Counter(
            "resumable_deliveries",
            "Callbacks and signals received, by kind and outcome.",
            ["kind", "outcome"],
            registry=self.registry,
        )
