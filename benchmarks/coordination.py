"""Coordination between sessions: contended shared updates, lock hand-offs, fan-out/fan-in.

Run from the repository root::

    .venv/bin/python benchmarks/coordination.py [--sessions 100 --updates 10
        --keys 100 --holders 100 --children 1000 --workers 2 --threads 8]

A real deployment: ``--workers`` ``resumable worker`` processes (``--threads``
threads each) running ``benchmarks/agents/coordination.py``, plus an in-process
scheduler loop is not needed (every grant and parent wake-up happens on the
commit path; the scheduler is only a backstop).

1. Shared updates. ``--sessions`` sessions each commit ``--updates`` steps,
   every step ``ctx.update_shared`` of one counter (one key: all contend), then
   of ``--keys`` counters (session i updates key i mod keys); and the same
   sessions without the update (``plain``: what the steps cost alone). Updates/s
   is updates committed / wall time. Baselines at the same concurrency
   (workers x threads connections, same total count) in the same run:
   ``raw UPDATE``, an autocommitted ``UPDATE bench_counters SET v = v + 1``,
   and ``raw CAS``, an optimistic read-then-``UPDATE ... WHERE version = $read``
   loop that retries on conflict (what optimistic versions would do, minus
   re-running the step), with its conflicts per update.
2. Lock hand-off. ``--holders`` sessions each take one lock, note when the
   holding step started, release it. Hand-off latency = next holder's step
   start - the previous holder's release commit (its ``step_completed`` audit
   event time, the commit transaction's start, on the same clock).
3. Fan-out/fan-in. One parent spawns ``--children`` children and waits for all;
   wall time from ``Client.start`` to the parent completed, against starting the
   same number of independent sessions from ``--threads`` client threads and
   waiting for all of them.

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers run
under ``--home`` (default ``.resumable/bench-coordination``). Tables are truncated
and Redis flushed: never point this at a database you care about.
"""

from __future__ import annotations

import itertools
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.harness import BenchDeployment, Services
from benchmarks.harness.report import add_deployment, bench_parser, machine, parse, percentile

AGENT_MODULE = "benchmarks.agents.coordination"
TRUNCATED = (
    "sessions",
    "checkpoints",
    "audit_events",
    "tool_execution_cache",
    "shared_documents",
    "shared_versions",
    "coordination_locks",
)


def parse_args(argv: list[str] | None) -> Any:
    parser = bench_parser(__doc__, "bench-coordination", timeout=300.0)
    add_deployment(parser, threads=8)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--updates", type=int, default=10, help="shared updates per session")
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--holders", type=int, default=100, help="sessions taking the lock")
    parser.add_argument("--children", type=int, default=1000)
    return parse(
        parser, argv, ("sessions", "updates", "keys", "holders", "children", "workers", "threads")
    )


def timed_sessions(
    services: Services, deployment: BenchDeployment, agent: str, inputs: list[Any], args: Any
) -> tuple[float, list[Any]]:
    """Start the sessions, wait until all completed; seconds and their ids."""
    with harness.bench_client(services.settings(), args.threads + 2) as client:
        started = time.monotonic()
        ids = harness.start_sessions(client, agent, inputs, args.threads)
        with harness.connect(services.pg_url) as conn:
            harness.wait_sessions(
                conn,
                lambda counts: counts["completed"] == len(ids),
                what=agent,
                timeout=args.timeout,
                ids=ids,
                alive=deployment.check_alive,
            )
        return time.monotonic() - started, ids


def raw_rate(url: str, connections: int, total: int, keys: int, cas: bool) -> tuple[float, int]:
    """Updates/s of `connections` threads doing `total` counter updates; and conflicts."""
    with harness.connect(url) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_counters")
        conn.execute("CREATE TABLE bench_counters (k int PRIMARY KEY, v bigint, version bigint)")
        conn.execute(
            "INSERT INTO bench_counters SELECT k, 0, 0 FROM generate_series(0, %s) k", [keys]
        )
    per = total // connections
    conflicts = [0] * connections

    def run(index: int) -> None:
        with harness.connect(url) as conn:
            for n in range(per):
                key = (index * per + n) % keys
                if not cas:
                    conn.execute("UPDATE bench_counters SET v = v + 1 WHERE k = %s", [key])
                    continue
                while True:
                    row = conn.execute(
                        "SELECT v, version FROM bench_counters WHERE k = %s", [key]
                    ).fetchone()
                    assert row is not None
                    done = conn.execute(
                        "UPDATE bench_counters SET v = %s, version = version + 1 "
                        "WHERE k = %s AND version = %s",
                        [row[0] + 1, key, row[1]],
                    ).rowcount
                    if done:
                        break
                    conflicts[index] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(connections)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    with harness.connect(url) as conn:
        row = conn.execute("SELECT sum(v) FROM bench_counters").fetchone()
        assert row is not None and row[0] == per * connections, row
        conn.execute("DROP TABLE bench_counters")
    return per * connections / elapsed, sum(conflicts)


def shared_total(url: str) -> int:
    with harness.connect(url) as conn:
        row = conn.execute(
            "SELECT coalesce(sum((value #>> '{}')::bigint), 0) FROM shared_documents"
        ).fetchone()
    return int(row[0]) if row else 0


def run(args: Any, services: Services, log_dir: Path) -> None:
    reset: Callable[[], None] = lambda: harness.reset_data(  # noqa: E731
        services.pg_url, services.redis_url, TRUNCATED
    )
    reset()
    connections = args.workers * args.threads
    total = args.sessions * args.updates
    print(f"coordination benchmark: {machine()}")
    print(f"servers: {services.where}; {args.workers} workers x {args.threads} threads")
    env = harness.worker_env(args.threads)
    with BenchDeployment(services, log_dir, env) as deployment:
        deployment.start_workers(args.workers, AGENT_MODULE)

        print(f"\n1. shared updates: {args.sessions} sessions x {args.updates} updates")
        rows: list[tuple[str, float, str]] = []
        plain_s, _ = timed_sessions(
            services,
            deployment,
            "bench_plain_counter",
            [{"updates": args.updates}] * args.sessions,
            args,
        )
        rows.append(("steps without shared update", total / plain_s, ""))
        for keys in (1, args.keys):
            reset()
            seconds, _ = timed_sessions(
                services,
                deployment,
                "bench_shared_counter",
                [{"updates": args.updates, "key": i % keys} for i in range(args.sessions)],
                args,
            )
            assert shared_total(services.pg_url) == total, "a shared update was lost"
            rows.append((f"ctx.update_shared, {keys} key(s)", total / seconds, ""))
            raw, _ = raw_rate(services.pg_url, connections, total, keys, cas=False)
            rows.append((f"raw UPDATE v = v + 1, {keys} key(s)", raw, ""))
            cas, conflicts = raw_rate(services.pg_url, connections, total, keys, cas=True)
            rows.append(
                (
                    f"raw optimistic CAS, {keys} key(s)",
                    cas,
                    f"{conflicts / total:.2f} conflicts/update",
                )
            )
        base = rows[0][1]
        for label, rate, note in rows:
            print(f"  {label:<38} {rate:9.0f} updates/s  x{rate / base:5.2f} of plain  {note}")

        print(f"\n2. lock hand-off: {args.holders} sessions take one lock in turn")
        reset()
        seconds, ids = timed_sessions(
            services, deployment, "bench_lock_holder", [{}] * args.holders, args
        )
        with harness.connect(services.pg_url) as conn:
            found = conn.execute(
                "SELECT (s.result ->> 'token')::bigint, (s.result ->> 'started')::float8, "
                "extract(epoch FROM e.created_at)::float8, "
                "extract(epoch FROM g.created_at)::float8 "
                "FROM sessions s JOIN audit_events e ON e.session_id = s.id "
                "AND e.event_type = 'step_completed' AND e.step = 'hold' "
                "JOIN audit_events g ON g.session_id = s.id "
                "AND g.event_type = 'resumed' AND g.payload ->> 'by' = 'lock' "
                "WHERE s.id = ANY(%s::uuid[]) ORDER BY 1",
                [[str(i) for i in ids]],
            ).fetchall()
        pairs = list(itertools.pairwise(found))
        handoffs = [(after[1] - before[2]) * 1000 for before, after in pairs]
        # Where it goes: the release commit -> the grant's transaction (the
        # next holder's `resumed` event), and that -> the next holder's step.
        to_grant = [(after[3] - before[2]) * 1000 for before, after in pairs]
        to_step = [(after[1] - after[3]) * 1000 for _, after in pairs]
        print(
            f"  {len(handoffs)} hand-offs in {seconds:.2f} s:"
            f" p50 {percentile(handoffs, 0.5):.1f} ms  p99 {percentile(handoffs, 0.99):.1f} ms"
            f"  mean {statistics.mean(handoffs):.1f} ms"
        )
        print(
            f"  release -> grant p50 {percentile(to_grant, 0.5):.1f} ms;"
            f" grant -> next holder's step p50 {percentile(to_step, 0.5):.1f} ms"
        )

        print(f"\n3. fan-out/fan-in of {args.children} children")
        reset()
        fan_s, _ = timed_sessions(
            services, deployment, "bench_parent", [{"children": args.children}], args
        )
        reset()
        flat_s, _ = timed_sessions(
            services, deployment, "bench_child", [{"i": i} for i in range(args.children)], args
        )
        print(f"  parent spawns {args.children} and waits for all: {fan_s:6.2f} s")
        print(f"  {args.children} independent sessions from the client: {flat_s:6.2f} s")
        print(f"  ratio fan-out/independent: x{fan_s / flat_s:.2f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with harness.bench_services(args.home) as services:
        run(args, services, harness.log_dir_for(args.home))
    return 0


if __name__ == "__main__":
    sys.exit(main())
