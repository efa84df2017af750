"""How long does a /metrics scrape take with many finished sessions?

Run from the repository root::

    .venv/bin/python benchmarks/scrape.py [--sizes 1000,100000 --history-per-session 10]

For each size N, the tables are emptied and bulk-loaded with ``generate_series``:
N sessions (98% finished: completed, failed, cancelled; the rest pending,
running, suspended, retrying, blocked, over five agents), N x
``--history-per-session`` history rows (checkpoints and audit events, half
each), and a dead letter per failed session. Then the web process's collector
(``resumable/webhooks/metrics.py``, everything a ``GET /metrics`` reads from
PostgreSQL and Redis) runs ``--repeat`` times, and so does the count every scrape
ran before migration 0009 (a ``GROUP BY`` over all sessions) as the baseline.
Printed: median milliseconds of each at each size, and each size's ratio to the
smallest (1.0: the cost does not grow with finished sessions).

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers run
under ``--home`` (default ``.resumable/scrape``). The tables are truncated:
never point this at a database you care about.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import generate_latest

from benchmarks import harness
from benchmarks.harness.report import bench_parser, parse
from resumable.broker.choice import build_broker
from resumable.models import metrics_queries
from resumable.models.database import Database
from resumable.webhooks.metrics import Metrics

_TABLES = (
    "sessions",
    "checkpoints",
    "audit_events",
    "dead_letters",
    "alerts",
    "finished_session_counts",
    "resting_session_counts",
    "session_conditions",
)

# Status by position: 98 in 100 finished, the rest spread over the live statuses.
_LOAD_SESSIONS = """
INSERT INTO sessions (id, agent, status, cursor, state, input, step_seq, created_at,
                      updated_at, finished_at, wake_at)
SELECT gen_random_uuid(), 'agent_' || (i %% 5),
       s.status, 'step', '{"n": 1}'::jsonb, '{}'::jsonb, 10,
       now() - make_interval(secs => i), now() - make_interval(secs => i),
       CASE WHEN s.status IN ('completed', 'failed', 'cancelled') THEN now() END,
       CASE WHEN s.status = 'suspended' THEN now() + interval '1 hour' END
FROM generate_series(1, %(n)s) AS i,
LATERAL (SELECT CASE
    WHEN i %% 100 < 90 THEN 'completed' WHEN i %% 100 < 96 THEN 'failed'
    WHEN i %% 100 < 98 THEN 'cancelled' WHEN i %% 100 = 98 THEN 'suspended'
    WHEN i %% 500 = 99 THEN 'running' WHEN i %% 500 = 199 THEN 'retrying'
    WHEN i %% 500 = 299 THEN 'blocked' ELSE 'pending' END AS status) AS s
"""

_LOAD_CHECKPOINTS = """
INSERT INTO checkpoints (session_id, seq, step, state, kind)
SELECT s.id, g.seq, 'step', '{"n": 1}'::jsonb, 'snapshot'
FROM sessions s, generate_series(1, %(per)s) AS g(seq)
"""

_LOAD_EVENTS = """
INSERT INTO audit_events (session_id, seq, step, event_type, payload)
SELECT s.id, g.seq, 'step', 'step_completed', '{}'::jsonb
FROM sessions s, generate_series(1, %(per)s) AS g(seq)
"""

_LOAD_DEAD_LETTERS = """
INSERT INTO dead_letters (session_id, agent, step, error_code, error_type, error_message,
                          attempts, compensation, status)
SELECT id, agent, 'step', 'step_failed', 'ValueError', 'boom', 3, 'none', 'open'
FROM sessions WHERE status = 'failed'
"""


def load(url: str, redis_url: str, sessions: int, history_per_session: int) -> int:
    """Empty the tables and bulk-load `sessions`; the history rows loaded."""
    harness.reset_data(url, redis_url, _TABLES)
    per = max(1, history_per_session // 2)
    with harness.connect(url) as conn:
        conn.execute(_LOAD_SESSIONS, {"n": sessions})
        conn.execute(_LOAD_CHECKPOINTS, {"per": per})
        conn.execute(_LOAD_EVENTS, {"per": per})
        conn.execute(_LOAD_DEAD_LETTERS)
        # One transaction counted every finished session into the same dozen rows,
        # leaving thousands of dead row versions; in service each finish is its own
        # transaction and those are pruned as they go (HOT), so compact it as they would be.
        conn.execute("VACUUM FULL finished_session_counts, resting_session_counts")
        conn.execute("VACUUM ANALYZE " + ", ".join(_TABLES))
    return sessions * per * 2


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm: plans cached, pages in memory
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, home="scrape", timeout=600)
    parser.add_argument("--sizes", default="1000,100000", help="session counts, comma-separated")
    parser.add_argument("--history-per-session", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=20, help="scrapes timed per size")
    args = parse(parser, argv, ("history_per_session", "repeat"))
    sizes = [int(size) for size in args.sizes.split(",")]
    results: list[tuple[int, int, float, float]] = []
    with harness.bench_services(args.home) as services:
        print(f"servers: {services.where}")
        db = Database(
            services.database_url,
            pool_size=2,
            prepared_statements=services.settings().db_prepared_statements,
        )
        broker = build_broker(services.settings(), services.redis_url)
        metrics = Metrics(db, broker, "resumable")
        try:
            for size in sizes:
                history = load(services.pg_url, services.redis_url, size, args.history_per_session)

                def full_group_by() -> object:
                    with db.connection() as conn:
                        query = metrics_queries.SESSIONS_BY_AGENT_AND_STATUS
                        return conn.execute(query).fetchall()

                scrape = median_ms(lambda: generate_latest(metrics.registry), args.repeat)
                baseline = median_ms(full_group_by, args.repeat)
                results.append((size, history, scrape, baseline))
                print(
                    f"{size:>9,} sessions, {history:>10,} history rows: "
                    f"scrape {scrape:7.2f} ms, full GROUP BY (before 0009) {baseline:7.2f} ms"
                )
        finally:
            broker.close()
            db.close()
    first = results[0]
    print("\nratio to the smallest size (1.0 = independent of finished sessions):")
    for size, _history, scrape, baseline in results:
        print(
            f"{size:>9,} sessions: scrape x{scrape / first[2]:.2f}, "
            f"full GROUP BY x{baseline / first[3]:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
