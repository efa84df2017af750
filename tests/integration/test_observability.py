"""Logs, worker metrics and scrape counts, from real worker processes and a
real database: the lines name session, agent, step, epoch and action, and
``ctx.log`` writes under the agent's logger; each worker serves step, tool
and resume numbers; the web scrape counts finished sessions without reading
them."""

from __future__ import annotations

import contextlib
import json
import uuid
from pathlib import Path

import httpx
import psycopg
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import use_span
from prometheus_client.parser import text_string_to_metric_families

from resumable import tracing
from resumable._internal.database_urls import libpq_url
from resumable.client import Client
from resumable.models import metrics_queries
from resumable.models.database import Database
from resumable.settings import Settings
from tests.conftest import LocalDeployment, free_port, scraped_session_counts, wait_until
from tests.signing import signed_headers

_TRACED = "tests.traced_agents"


def _approve(client: Client, session_id: uuid.UUID) -> None:
    url = client.state(session_id)["callback_url"]
    body = json.dumps({"approved": True})
    assert httpx.post(url, content=body, headers=signed_headers(body)).status_code == 202


def test_worker_json_lines_name_session_agent_step_epoch_and_action(
    client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    deployment.web()
    worker = deployment.worker(_TRACED, RESUMABLE_LOG_FORMAT="json")
    session_id = client.start("traced", {"order": "B-2"})
    wait_until(lambda: client.get(session_id).status == "suspended", what="the wait")
    _approve(client, session_id)
    wait_until(lambda: client.get(session_id).status == "completed", what="the session")
    wait_until(lambda: "session completed" in worker.output(), what="the completion line")

    lines = [json.loads(line) for line in worker.output().splitlines() if line.strip()]
    assert all(line.get("action") for line in lines), [x for x in lines if not x.get("action")]
    about_it = [line for line in lines if line.get("session_id") == str(session_id)]
    assert about_it
    for line in about_it:
        assert line["agent"] == "traced" and isinstance(line["epoch"], int), line
    [planned] = [line for line in about_it if "planned order" in line["message"]]
    assert planned["logger"] == "resumable.agent.traced"
    assert (planned["step"], planned["action"]) == ("plan", "planned")
    [completed] = [line for line in about_it if line["action"] == "completed"]
    assert completed["step"] == "work" and completed["logger"] == "resumable.queue.runner"


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(url).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_worker_serves_step_tool_and_resume_metrics(
    client: Client, deployment: LocalDeployment
) -> None:
    port = free_port()
    deployment.web()
    deployment.worker(_TRACED, RESUMABLE_WORKER_METRICS_PORT=str(port))
    session_id = client.start("traced", {"order": "C-3", "failing_tool": True})
    wait_until(lambda: client.get(session_id).status == "suspended", what="the wait")
    _approve(client, session_id)
    wait_until(lambda: client.get(session_id).status == "completed", what="the session")

    samples = _samples(f"http://127.0.0.1:{port}/metrics")
    step = "resumable_step_duration_seconds_count"
    assert samples[(step, (("agent", "traced"), ("outcome", "ok"), ("step", "plan")))] == 1
    assert samples[(step, (("agent", "traced"), ("outcome", "ok"), ("step", "work")))] == 1
    tool = "resumable_tool_call_duration_seconds_count"
    assert samples[(tool, (("outcome", "ok"), ("tool", "look_up")))] == 1
    assert samples[(tool, (("outcome", "error"), ("tool", "refuse")))] == 1
    failures = ("resumable_tool_call_failures_total", (("error", "ValueError"), ("tool", "refuse")))
    assert samples[failures] == 1
    resumed = (
        "resumable_resume_latency_seconds_count",
        (("agent", "traced"), ("kind", "callback")),
    )
    assert samples[resumed] == 1
    latency = samples[("resumable_resume_latency_seconds_sum", resumed[1])]
    assert 0 < latency < 60


def test_the_scrape_counts_finished_sessions_from_the_trigger_kept_counts(
    client: Client, db: Database
) -> None:
    ids = [client.start("five") for _ in range(3)] + [client.start("approval")]
    for session_id in ids[:2]:
        client.cancel(session_id, actor="test")
    with db.connection() as conn:
        conn.execute("DELETE FROM sessions WHERE id = %(id)s", {"id": ids[0]})  # as retention
        full = conn.execute(metrics_queries.SESSIONS_BY_AGENT_AND_STATUS).fetchall()
    exported = scraped_session_counts(db)
    assert exported == {(r["agent"], r["status"]): float(r["n"]) for r in full}  # type: ignore[arg-type]
    assert exported == {
        ("five", "cancelled"): 1.0,
        ("five", "pending"): 1.0,
        ("approval", "pending"): 1.0,
    }


def test_a_batch_delete_counts_its_finished_sessions_down_once_per_agent(db: Database) -> None:
    """Retention deletes finished sessions by the thousand in one statement:
    the counts follow (the trigger is per statement since migration 0016),
    including the sessions of the batch that were not finished."""
    insert = """INSERT INTO sessions (id, agent, status, state, input, finished_at)
        SELECT gen_random_uuid(), %(agent)s, %(status)s, '{}', '{}',
               CASE WHEN %(status)s = 'pending' THEN NULL ELSE now() END
        FROM generate_series(1, %(n)s)"""
    with db.connection() as conn:
        for agent, status, n in [
            ("bulk", "completed", 3000),
            ("bulk", "failed", 40),
            ("bulk", "pending", 7),
            ("other", "cancelled", 5),
        ]:
            conn.execute(insert, {"agent": agent, "status": status, "n": n})
        conn.execute(
            "DELETE FROM sessions WHERE id IN (SELECT id FROM sessions WHERE agent = 'bulk'"
            " AND status IN ('completed', 'pending') ORDER BY id LIMIT 2500)"
        )
        deleted = conn.execute(
            "SELECT 3007 - count(*) AS n FROM sessions"
            " WHERE agent = 'bulk' AND status IN ('completed', 'pending')"
        ).fetchone()
        counted = conn.execute(metrics_queries.FINISHED_SESSIONS_BY_AGENT_AND_STATUS).fetchall()
        actual = conn.execute(
            "SELECT agent, status, count(*) AS n FROM sessions"
            " WHERE status IN ('completed', 'failed', 'cancelled') GROUP BY agent, status"
        ).fetchall()
    assert deleted is not None and deleted["n"] == 2500
    by_key = {(r["agent"], r["status"]): int(r["n"]) for r in counted if r["n"]}  # type: ignore[call-overload]
    assert by_key == {(r["agent"], r["status"]): int(r["n"]) for r in actual}  # type: ignore[call-overload]
    assert by_key[("bulk", "failed")] == 40 and by_key[("other", "cancelled")] == 5
    assert 3000 - 2500 <= by_key[("bulk", "completed")] <= 3000 - 2500 + 7


def test_sessions_finishing_together_do_not_wait_for_each_others_count(
    client: Client, db: Database, settings: Settings
) -> None:
    """Two transactions, each finishing a session of the same agent, both go
    through while neither has committed (one counts row per agent and status
    made the second wait for the first's commit), and the scrape sums them."""
    first_id, second_id = client.start("five"), client.start("five")
    finish = "UPDATE sessions SET status = 'cancelled', finished_at = now() WHERE id = %s"
    url = libpq_url(settings.database_url or "")
    with psycopg.connect(url) as first, contextlib.ExitStack() as others:
        first.execute(finish, [first_id])  # open, uncommitted, holding its count
        mine = first.info.backend_pid % metrics_queries.FINISHED_COUNT_SHARDS
        while True:  # a connection whose shard is another one (pids are consecutive)
            second = others.enter_context(psycopg.connect(url))
            if second.info.backend_pid % metrics_queries.FINISHED_COUNT_SHARDS != mine:
                break
        second.execute("SET lock_timeout = '2s'")
        second.execute(finish, [second_id])  # LockNotAvailable if it had to wait
        second.commit()
        first.commit()
    exported = scraped_session_counts(db)
    assert exported == {("five", "cancelled"): 2.0}


def test_start_keeps_the_callers_trace_context_even_with_tracing_off(
    client: Client, db: Database
) -> None:
    assert not tracing.enabled()
    untraced = client.start("five")
    span = TracerProvider().get_tracer("the caller").start_span("caller")
    with use_span(span, end_on_exit=True):
        traced = client.start("five")
    trace_id = format(span.get_span_context().trace_id, "032x")
    with db.connection() as conn:
        rows = {
            row["id"]: row["trace_context"]
            for row in conn.execute("SELECT id, trace_context FROM sessions").fetchall()
        }
    assert rows[untraced] is None
    assert rows[traced]["traceparent"].split("-")[1] == trace_id  # type: ignore[index]
