"""Does every periodic query cost the same at a million finished sessions as at
a thousand, and with many sessions in long waits?

Run from the repository root::

    .venv/bin/python benchmarks/million.py [--size 1000000 --small 1000 --repeat 15]

The database gets the same live working set twice (suspended sessions with
timers and polls, some due; pending, running, retrying and compensating
sessions; stranded deliveries, pending alerts, a live and a dead worker), first
beside enough finished sessions (completed, failed, cancelled, with sent alerts
and resolved dead letters) to make ``--small`` sessions in all, then bulk-loaded
(``generate_series``) up to ``--size``. After a ``VACUUM ANALYZE`` each time,
every query the scheduler runs periodically is timed (median of ``--repeat``
runs; statements that change rows run in a transaction that is rolled back, so
each run sees the same data), the shared buffers its execution touched are
counted (``EXPLAIN (ANALYZE, BUFFERS)``: the work done, which unlike the time
does not depend on what else the machine runs), its plan's scans of
``sessions`` are named, and the ratio of the two sizes is printed. The
``/metrics`` scrape is timed too, by calling the web process's own collector as
it stands. Then ``--waiting`` sessions in long waits (timers days away,
callbacks unanswered: what agents waiting on people pile up) join the million,
and every query is timed again against the million alone.

``DATABASE_URL`` is used when set; otherwise an embedded server runs under
``--home`` (default ``.resumable/bench-million``). The tables are truncated:
never point this at a database you care about.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.harness import Services
from benchmarks.harness.report import bench_parser, command_line, machine, parse
from resumable.models import (
    alert_queries,
    checkpoint_queries,
    coordination_queries,
    failure_queries,
    session_queries,
    step_queries,
    wait_queries,
)
from resumable.models.database import Database
from resumable.webhooks.metrics import DatabaseCollector

TABLES = (
    "sessions",
    "checkpoints",
    "audit_events",
    "callbacks",
    "deliveries",
    "agents",
    "workers",
    "dead_letters",
    "alerts",
    "archived_sessions",
)
AGENT = "bench_million"
LIVE_WORKER = "bench-live"
DEAD_WORKER = "bench-dead"

# The live working set: the same at both sizes.
LIVE_SET = f"""
INSERT INTO agents (name, steps, checks) VALUES ('{AGENT}', '["a"]', '[]');
INSERT INTO workers (id, agents, expires_at)
VALUES ('{LIVE_WORKER}', '["{AGENT}"]', now() + interval '1 day'),
       ('{DEAD_WORKER}', '["{AGENT}"]', now() - interval '1 hour');
-- Every time below is hours from now, so nothing falls due (or stops being
-- due) while the million rows load.
-- suspended on timers: 50 due now, 250 later; 50 polls due, 50 later
INSERT INTO sessions (id, agent, status, cursor, state, wait, wake_at, updated_at)
SELECT gen_random_uuid(), '{AGENT}', 'suspended', 'a', '{{}}',
       jsonb_build_object('then', 'a', 'timer_at', now() + (i - 50.5) * interval '1 hour'),
       now() + (i - 50.5) * interval '1 hour', now() - interval '1 hour'
FROM generate_series(1, 300) AS i;
INSERT INTO sessions (id, agent, status, cursor, state, wait, wake_at, updated_at)
SELECT gen_random_uuid(), '{AGENT}', 'suspended', 'a', '{{}}',
       jsonb_build_object('then', 'a', 'poll', jsonb_build_object('check', 'c', 'args', '{{}}',
                          'every', 60)),
       now() + (i - 50.5) * interval '1 hour', now() - interval '1 hour'
FROM generate_series(1, 100) AS i;
-- parents suspended until their children finish
INSERT INTO sessions (id, agent, status, cursor, state, wait, updated_at)
SELECT gen_random_uuid(), '{AGENT}', 'suspended', 'a', '{{}}',
       jsonb_build_object('then', 'a', 'children',
                          jsonb_build_object('ids', jsonb_build_array(), 'need', 1)),
       now() - interval '1 hour'
FROM generate_series(1, 10) AS i;
-- suspended on callbacks, 20 of them with a delivery no one woke them for
INSERT INTO sessions (id, agent, status, cursor, state, wait, updated_at)
SELECT gen_random_uuid(), '{AGENT}', 'suspended', 'a', '{{}}',
       jsonb_build_object('then', 'a', 'callbacks', jsonb_build_array('tok-' || i)),
       now() - interval '1 hour'
FROM generate_series(1, 100) AS i;
INSERT INTO deliveries (session_id, kind, token, topic, payload, status)
SELECT id, 'callback', wait -> 'callbacks' ->> 0, 't', '{{}}', 'pending'
FROM sessions WHERE wait ? 'callbacks' LIMIT 20;
-- pending (half of them stranded past the reconciler's grace), running,
-- retrying (half due), compensating (half due), blocked
INSERT INTO sessions (id, agent, status, cursor, state, updated_at, lease_owner,
                      lease_expires_at, lease_epoch, step_started_at, wake_at)
SELECT gen_random_uuid(), '{AGENT}', st, 'a', '{{}}',
       now() - (i % 2) * interval '3 hours',
       CASE WHEN st = 'running' THEN
           CASE WHEN i % 10 = 0 THEN '{DEAD_WORKER}' ELSE '{LIVE_WORKER}' END END,
       CASE WHEN st = 'running' THEN now() + interval '1 day' END, 1,
       CASE WHEN st = 'running' THEN now() END,
       CASE WHEN st IN ('retrying', 'compensating')
            THEN now() + (i % 2 * 2 - 1) * interval '1 hour' END
FROM generate_series(1, 40) AS i,
     unnest(ARRAY['pending', 'running', 'retrying', 'compensating', 'blocked']) AS st;
INSERT INTO alerts (kind, payload, status, next_attempt_at)
SELECT 'dead_letter', '{{}}', 'pending', now() - interval '1 second'
FROM generate_series(1, 20);
"""

# Finished sessions, `count` more: completed (90 %), failed, cancelled, finished
# up to 60 days ago (retention at 30 days retires about half), with short
# histories (compaction at 10 checkpoints has nothing to do for them); one in
# ten waited on a callback (closed, its delivery consumed), a fifth of the
# failed ones sent an alert, two fifths have a discarded dead letter.
FINISHED = f"""
WITH n AS (SELECT i FROM generate_series(1, %(count)s) AS i),
s AS (
    INSERT INTO sessions (id, agent, status, cursor, state, step_seq, step_seq_mark,
                          created_at, updated_at, finished_at, result)
    SELECT gen_random_uuid(), '{AGENT}',
           CASE WHEN i %% 20 = 0 THEN 'failed' WHEN i %% 20 = 1 THEN 'cancelled'
                ELSE 'completed' END,
           'a', '{{"counter": 3}}', 1 + i %% 15, 1 + i %% 15,
           now() - (i * 7919 %% 86400) * interval '1 minute' - interval '1 hour',
           now() - (i * 7919 %% 86400) * interval '1 minute',
           now() - (i * 7919 %% 86400) * interval '1 minute', '{{"ok": true}}'
    FROM n
    RETURNING id, status
), c AS (
    INSERT INTO callbacks (token, session_id, step_seq, call_index, topic, status, closed_at)
    SELECT 'done-' || id, id, 1, 0, 't', 'closed', now() FROM s WHERE random() < 0.1
    RETURNING token, session_id
), d AS (
    INSERT INTO deliveries (session_id, kind, token, topic, payload, status, consumed_at,
                            consumed_seq)
    SELECT session_id, 'callback', token, 't', '{{}}', 'consumed', now(), 1 FROM c
), a AS (
    INSERT INTO alerts (kind, session_id, payload, status, sent_at)
    SELECT 'dead_letter', id, '{{}}', 'sent', now() FROM s
    WHERE status = 'failed' AND random() < 0.2
)
INSERT INTO dead_letters (session_id, agent, error_code, error_type, error_message, attempts,
                          compensation, status, resolved_at, resolution)
SELECT id, '{AGENT}', 'x', 'X', 'x', 3, 'none', 'discarded', now(), 'discarded'
FROM s WHERE status = 'failed' AND random() < 0.4
"""


# Sessions in long waits, `count` more: suspended on timers days away (none
# falls due) and on callbacks no one has answered, as agents waiting on
# people are. The live working set above stays as it is. Loaded a batch per
# transaction (WAITING_BATCH): each suspended row counts itself in
# `resting_session_counts` through a row trigger, and one transaction's
# upserts of one counts row walk every version of it that transaction wrote,
# so 200,000 in one statement would cost its square (minutes); sessions
# suspend one per transaction, or by the scheduler's batches of 500.
WAITING_BATCH = 1_000
WAITING = """
INSERT INTO sessions (id, agent, status, cursor, state, wait, wake_at, updated_at)
SELECT gen_random_uuid(), %(agent)s, 'suspended', 'a', '{}',
       CASE WHEN i %% 2 = 0
            THEN jsonb_build_object('then', 'a',
                                    'timer_at', now() + (2 + i %% 30) * interval '1 day')
            ELSE jsonb_build_object('then', 'a', 'callbacks', jsonb_build_array('wait-' || i)) END,
       CASE WHEN i %% 2 = 0 THEN now() + (2 + i %% 30) * interval '1 day' END,
       now() - (i %% 1000) * interval '1 minute' - interval '1 hour'
FROM generate_series(%(first)s::int, %(last)s::int) AS i
"""


@dataclass(frozen=True)
class Periodic:
    name: str
    sql: str
    params: dict[str, Any]
    changes_rows: bool  # run in a transaction that is rolled back


PERIODIC = [
    Periodic("wake_due (timers, deadlines, polls)", wait_queries.WAKE_DUE, {"limit": 500}, True),
    Periodic("wake_due_retries", failure_queries.WAKE_DUE_RETRIES, {"limit": 500}, True),
    Periodic(
        "wake_due_compensations", failure_queries.WAKE_DUE_COMPENSATIONS, {"limit": 500}, True
    ),
    Periodic("wake_stranded", wait_queries.STRANDED_DELIVERIES, {"limit": 500}, False),
    Periodic("reconcile", session_queries.RECONCILE, {"grace": 3600.0, "limit": 500}, True),
    Periodic("reconcile: dead workers", step_queries.ORPHANED_SESSIONS, {}, True),
    Periodic(
        "compaction candidates",
        checkpoint_queries.COMPACTION_CANDIDATES,
        {"threshold": 20, "limit": 50},
        False,
    ),
    Periodic(
        "retention (30 days)",
        checkpoint_queries.RETIRE_SESSIONS,
        {"age_seconds": 30 * 86400, "limit": 100, "archive": False},
        True,
    ),
    Periodic("alerts due", alert_queries.TAKE_DUE_ALERTS, {"limit": 100}, True),
    Periodic("hung sessions", step_queries.HUNG_SESSIONS, {"after": 86400.0, "limit": 100}, False),
    Periodic(
        "lingering sessions (alerts)",
        alert_queries.SYNC_LINGERING,
        {
            "overdue": 300.0,
            "unserved": 300.0,
            "hung": 3600.0,
            "blocked": 86400.0,
            "alerts_enabled": True,
        },
        True,
    ),
    Periodic("grant_locks", coordination_queries.LOCKS_WITH_WAITERS, {"limit": 1000}, False),
    Periodic("wake_parents", coordination_queries.WAITING_PARENTS, {"limit": 500}, False),
]


def median_ms(run: Callable[[], object], repeat: int) -> float:
    run()  # warm the cache and the plan
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


@dataclass(frozen=True)
class Cost:
    ms: float  # median wall time (noisy on a shared machine)
    blocks: int  # buffers the executor touched (hit + read): what the time follows
    plan: str


def time_query(conn: Any, query: Periodic, repeat: int) -> Cost:
    """The median time, buffers touched and scans of one periodic query."""

    def run() -> None:
        if query.changes_rows:
            with conn.transaction(force_rollback=True):
                conn.execute(query.sql, query.params).fetchall()
        else:
            conn.execute(query.sql, query.params).fetchall()

    # The timed runs of the previous queries left dead row versions (rolled
    # back); clear them so each query is counted on the data as loaded.
    conn.execute("VACUUM sessions, deliveries, alerts, workers, dead_letters")
    with conn.transaction(force_rollback=True):
        plan = conn.execute("EXPLAIN " + query.sql, query.params).fetchall()
    with conn.transaction(force_rollback=True):
        analyzed = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query.sql, query.params
        ).fetchone()[0][0]
    return Cost(median_ms(run, repeat), touched(analyzed), scans(plan))


def touched(analyzed: dict[str, Any]) -> int:
    """Shared buffers hit or read by the statement (the top node counts its
    children's), plus those of any triggers (a cascading delete's)."""
    top = analyzed["Plan"]
    blocks = int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    return blocks


def scans(plan: list[tuple[Any, ...]]) -> str:
    """The scans of `sessions` (and any sequential scan) the plan does."""
    found = []
    for (line,) in plan:
        text = str(line).strip().lstrip("-> ").strip()
        if " on " in text and ("Scan" in text) and ("sessions" in text or "Seq Scan" in text):
            found.append(text.split("  (")[0])
    return "; ".join(dict.fromkeys(found)) or "-"


def measure(services: Services, repeat: int) -> dict[str, Cost]:
    with harness.connect(services.pg_url) as conn:
        conn.execute("VACUUM ANALYZE")
        results = {query.name: time_query(conn, query, repeat) for query in PERIODIC}
    db = Database(
        services.database_url,
        pool_size=1,
        prepared_statements=services.settings().db_prepared_statements,
    )
    try:
        collector = DatabaseCollector(db)
        results["/metrics scrape (as it stands)"] = Cost(
            median_ms(lambda: list(collector.collect()), repeat), 0, "-"
        )
    finally:
        db.close()
    return results


# Sessions per loading statement. The finished-count trigger upserts its
# agent's counts row once per inserted session (a session is created by a
# statement of one row, so the insert trigger stays per row), and within one
# transaction each upsert walks every version of that row written before it:
# a statement's cost grows with its size squared (200,000 a statement took
# 867 s to load a million; docs/performance.md has the batch-deletes study).
LOAD_SLICE = 4_000


def load_finished(services: Services, count: int) -> float:
    began = time.monotonic()
    with harness.connect(services.pg_url) as conn:
        remaining = count
        while remaining > 0:
            chunk = min(remaining, LOAD_SLICE)
            conn.execute(FINISHED, {"count": chunk})
            remaining -= chunk
    return time.monotonic() - began


def run(args: argparse.Namespace, services: Services) -> None:
    harness.reset_data(services.pg_url, services.redis_url, TABLES)
    with harness.connect(services.pg_url) as conn:
        conn.execute(LIVE_SET)
        live = int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])  # type: ignore[index]
    print(f"# {command_line()}")
    print(f"# {machine()}; {services.where}")
    print(f"# live working set: {live} sessions (suspended, pending, running, ...)")
    load_finished(services, max(0, args.small - live))
    small = measure(services, args.repeat)
    seconds = load_finished(services, args.size - max(args.small, live))
    with harness.connect(services.pg_url) as conn:
        total = int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])  # type: ignore[index]
    print(f"# bulk-loaded {total - max(args.small, live):,} finished sessions in {seconds:.0f} s")
    large = measure(services, args.repeat)
    worst = report(f"{args.small:,}", small, f"{total:,}", large)
    print(f"worst ratio of buffers touched by the scheduler's periodic queries: {worst:.2f}")
    if args.waiting:
        began = time.monotonic()
        with harness.connect(services.pg_url) as conn:
            for first in range(1, args.waiting + 1, WAITING_BATCH):
                last = min(first + WAITING_BATCH - 1, args.waiting)
                conn.execute(WAITING, {"agent": AGENT, "first": first, "last": last})
        print(
            f"\n# then {args.waiting:,} sessions in long waits (timers days away, callbacks"
            f" unanswered) in {time.monotonic() - began:.0f} s"
        )
        waiting = measure(services, args.repeat)
        worst = report("as above", large, f"+{args.waiting:,} waiting", waiting)
        print(f"worst ratio of buffers touched with sessions in long waits: {worst:.2f}")


def report(
    few_label: str, few_costs: dict[str, Cost], many_label: str, many_costs: dict[str, Cost]
) -> float:
    """Each periodic query's cost at two sizes; the worst ratio of buffers."""
    width = max(len(name) for name in few_costs) + 2
    print(
        f"{'periodic query':<{width}}{few_label:>10}{many_label:>18}{'ratio':>7}"
        f"{'blocks':>8}{'blocks':>8}{'ratio':>7}  plan at the large size"
    )
    worst = 0.0
    for name, few in few_costs.items():
        many = many_costs[name]
        ratio = many.ms / few.ms if few.ms > 0 else float("inf")
        block_ratio = many.blocks / few.blocks if few.blocks else float("nan")
        if not name.startswith("/metrics"):
            worst = max(worst, block_ratio)
        print(
            f"{name:<{width}}{few.ms:>8.2f}ms{many.ms:>16.2f}ms{ratio:>7.2f}"
            f"{few.blocks:>8}{many.blocks:>8}{block_ratio:>7.2f}  {many.plan}"
        )
    return worst


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = bench_parser(__doc__, "bench-million", timeout=600.0)
    parser.add_argument("--size", type=int, default=1_000_000, help="sessions at the large size")
    parser.add_argument("--small", type=int, default=1_000, help="sessions at the small size")
    parser.add_argument("--repeat", type=int, default=15, help="timed runs per query")
    parser.add_argument(
        "--waiting",
        type=int,
        default=200_000,
        help="sessions in long waits added after the large size (0: none)",
    )
    args = parse(parser, argv, ["size", "small", "repeat"])
    if args.waiting < 0:
        parser.error("--waiting must be at least 0")
    if args.size <= args.small:
        parser.error("--size must be larger than --small")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with harness.bench_services(args.home) as services:
        run(args, services)
    return 0


if __name__ == "__main__":
    sys.exit(main())
