"""What do schedules cost: a scheduler pass when none is due, and starting
many due at once?

Run from the repository root::

    .venv/bin/python benchmarks/schedules.py [--sizes 0,1000,100000 --due 2000]

For each size N, the schedules table is emptied and N schedules are loaded
that are not due (next due in an hour). A scheduler pass
(``Schedules.start_due``, what ``start_schedules`` runs every
``RESUMABLE_SCHEDULER_INTERVAL_SECONDS``) is timed ``--repeat`` times: the
cost schedules add to a deployment that has them but none due now. A step
pays nothing either way (no schedule code runs on a worker's step path).

Then ``--due`` schedules are made due at once and one pass starts their
sessions (a session, a ``scheduled`` event and the row moved on per
schedule, one transaction per 50, one Redis round trip per batch); the
baseline is the same number of sessions started one by one with
``Client.start`` (a transaction and a Redis round trip each), measured in
the same run. Printed: milliseconds per pass, sessions per second of each
and their ratio.

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers run
under ``--home`` (default ``.resumable/schedules``). The tables are truncated:
never point this at a database you care about.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.harness.report import bench_parser, context_lines, parse
from resumable.broker.choice import build_broker
from resumable.client import Client
from resumable.models import agent_queries
from resumable.models.database import Database
from resumable.services.schedules import Schedules

_TABLES = (
    "schedules",
    "sessions",
    "audit_events",
    "agents",
    "finished_session_counts",
    "resting_session_counts",
)

_LOAD = """
INSERT INTO schedules (name, agent, every_seconds, timezone, input, catch_up, overlap, source,
                       anchor_at, next_due_at)
SELECT 'bench-' || i, 'bench', 3600, 'UTC', '{}'::jsonb, 'skip', 'allow', 'api',
       now(), now() + interval '1 hour'
FROM generate_series(1, %(n)s) AS i
"""

_MAKE_DUE = """
UPDATE schedules
SET next_due_at = now() - interval '1 second', anchor_at = now() - interval '1 hour'
WHERE name IN (SELECT name FROM schedules ORDER BY name LIMIT %(n)s)
"""


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, home="schedules", timeout=600)
    parser.add_argument(
        "--sizes", default="0,1000,100000", help="schedules not due, comma-separated"
    )
    parser.add_argument("--due", type=int, default=2000, help="schedules due at once")
    parser.add_argument("--repeat", type=int, default=50, help="idle passes timed per size")
    args = parse(parser, argv, ("due", "repeat"))
    sizes = [int(size) for size in args.sizes.split(",")]
    with harness.bench_services(args.home) as services:
        for line in context_lines(services.where):
            print(line)
        settings = services.settings()
        db = Database(
            services.database_url, pool_size=2, prepared_statements=settings.db_prepared_statements
        )
        broker = build_broker(settings, services.redis_url)
        schedules = Schedules(settings, db, broker)
        client = Client(settings, db, broker)
        try:
            idle: list[tuple[int, float]] = []
            for size in sizes:
                harness.reset_data(services.pg_url, services.redis_url, _TABLES)
                with harness.connect(services.pg_url) as conn:
                    conn.execute(_LOAD, {"n": size})
                    conn.execute("VACUUM ANALYZE schedules")
                schedules.start_due()  # warm
                times = []
                for _ in range(args.repeat):
                    began = time.perf_counter()
                    done = schedules.start_due()
                    times.append((time.perf_counter() - began) * 1000)
                    assert not done.started
                idle.append((size, statistics.median(times)))
                print(f"{size:>9,} schedules, none due: a pass {idle[-1][1]:.3f} ms (median)")

            harness.reset_data(services.pg_url, services.redis_url, _TABLES)
            with harness.connect(services.pg_url) as conn:
                agent_queries.register_agent(conn, "bench", steps=["one"], checks=[])
                conn.execute(_LOAD, {"n": args.due})
                conn.execute(_MAKE_DUE, {"n": args.due})
            began = time.perf_counter()
            done = schedules.start_due()
            scheduled = time.perf_counter() - began
            assert len(done.started) == args.due, len(done.started)
            began = time.perf_counter()
            for _ in range(args.due):
                client.start("bench", {})
            one_by_one = time.perf_counter() - began
        finally:
            broker.close()
            db.close()
    print(
        f"\n{args.due:,} due at once: one pass started them in {scheduled:.2f} s "
        f"({args.due / scheduled:,.0f} sessions/s); Client.start one by one "
        f"{one_by_one:.2f} s ({args.due / one_by_one:,.0f}/s); ratio x{one_by_one / scheduled:.2f}"
    )
    first = idle[0][1]
    print("idle pass, ratio to the smallest size (1.0 = independent of schedules not due):")
    for size, ms in idle:
        print(f"{size:>9,} schedules: x{ms / first:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
