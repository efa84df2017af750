"""What does counting finished sessions cost a batch delete, by batch size?

Run from the repository root::

    .venv/bin/python benchmarks/batch_deletes.py [--sizes 4000,16000,64000]

Retention deletes finished sessions in batches (``RESUMABLE_RETENTION_BATCH``,
up to 100,000 per statement), and a trigger counts them down in
``finished_session_counts``. For each size N, N finished sessions of one agent
are loaded, with the counting triggers disabled (loading is not what is
measured), and deleted in one statement. The baseline is the same delete with
the triggers disabled, measured in the same run. Printed: both times and
their ratio. A ratio that stays flat as N grows means counting costs the same
per row whatever the batch; before migration 0016 the per-row trigger made it
grow with N (16,000 rows: 1.6 s against 0.1 s).

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers run
under ``--home`` (default ``.resumable/batch-deletes``). The sessions table is
truncated: never point this at a database you care about.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.report import bench_parser, parse

LOAD = """
INSERT INTO sessions (id, agent, status, state, input, finished_at)
SELECT gen_random_uuid(), 'bench_batch', 'completed', '{}', '{}', now()
FROM generate_series(1, %s)
"""
DELETE = "DELETE FROM sessions WHERE agent = 'bench_batch'"


def timed_delete(conn: Any, size: int, *, counted: bool) -> float:
    """Seconds to delete `size` finished sessions in one statement."""
    conn.execute("TRUNCATE sessions CASCADE")
    conn.execute("TRUNCATE finished_session_counts")
    conn.execute("ALTER TABLE sessions DISABLE TRIGGER USER")
    conn.execute(LOAD, [size])
    if counted:
        conn.execute("ALTER TABLE sessions ENABLE TRIGGER USER")
    conn.execute("VACUUM ANALYZE sessions")
    started = time.perf_counter()
    conn.execute(DELETE)
    elapsed = time.perf_counter() - started
    conn.execute("ALTER TABLE sessions ENABLE TRIGGER USER")
    if counted:
        left = conn.execute("SELECT coalesce(sum(n), 0) FROM finished_session_counts").fetchone()
        if int(left[0]) != -size:  # loaded uncounted, so the delete counts -size
            raise RuntimeError(f"{size} deleted, counted {left[0]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, home="batch-deletes", timeout=600)
    parser.add_argument("--sizes", default="4000,16000,64000", help="batch sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="deletes timed per size and kind")
    args = parse(parser, argv, ("repeat",))
    sizes = [int(size) for size in args.sizes.split(",")]
    with harness.bench_services(args.home) as services, harness.connect(services.pg_url) as conn:
        print(f"servers: {services.where}")
        print(f"{'batch':>8}{'counted s':>12}{'uncounted s':>13}{'ratio':>8}{'us/row':>9}")
        for size in sizes:
            counted = statistics.median(
                timed_delete(conn, size, counted=True) for _ in range(args.repeat)
            )
            bare = statistics.median(
                timed_delete(conn, size, counted=False) for _ in range(args.repeat)
            )
            print(
                f"{size:>8,}{counted:>12.3f}{bare:>13.3f}{counted / bare:>8.2f}"
                f"{counted / size * 1e6:>9.1f}"
            )
        conn.execute("TRUNCATE sessions CASCADE")
        conn.execute("TRUNCATE finished_session_counts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
