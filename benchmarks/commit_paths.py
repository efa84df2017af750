"""From an event loop, which way of writing to PostgreSQL costs less: handing
each write to a bounded pool of threads on a sync psycopg pool (what the
worker does for async runs), or a psycopg ``AsyncConnectionPool``?

Run from the repository root::

    .venv/bin/python benchmarks/commit_paths.py [--tasks 500 --writes 6000 --pool 16]

``--tasks`` coroutines on one loop share ``--writes`` step-shaped
transactions (a 2 KB JSONB upsert and a 500 B insert, one commit, as
FACTS.md measures them), each path with a pool of ``--pool`` connections.
Printed for each: writes per second, process CPU per write, and the worst
loop lag a 10 ms ticker saw (how long other sessions on the loop waited).
Ratios are against the thread hand-off, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from benchmarks import harness, report

SETUP = """
CREATE TABLE IF NOT EXISTS bench_commit_state (id int PRIMARY KEY, state jsonb NOT NULL);
CREATE TABLE IF NOT EXISTS bench_commit_log (id bigserial PRIMARY KEY, body text NOT NULL);
TRUNCATE bench_commit_state, bench_commit_log;
"""
UPSERT = (
    "INSERT INTO bench_commit_state (id, state) VALUES (%s, %s::jsonb) "
    "ON CONFLICT (id) DO UPDATE SET state = excluded.state"
)
INSERT = "INSERT INTO bench_commit_log (body) VALUES (%s)"
STATE = json.dumps({"memory": "x" * 2000})
BODY = "y" * 500


def sync_write(pool: ConnectionPool[Any], n: int) -> None:
    with pool.connection() as conn, conn.transaction():
        conn.execute(UPSERT, (n % 1000, STATE))
        conn.execute(INSERT, (BODY,))


async def async_write(pool: AsyncConnectionPool[Any], n: int) -> None:
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(UPSERT, (n % 1000, STATE))
        await conn.execute(INSERT, (BODY,))


async def drive(
    write: Callable[[int], Awaitable[None]], tasks: int, writes: int
) -> tuple[float, float, float]:
    """(seconds, CPU seconds, worst loop lag) for `writes` writes from `tasks` tasks."""
    counter = iter(range(writes))
    lag = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal lag
        while not done.is_set():
            before = time.monotonic()
            await asyncio.sleep(0.01)
            lag = max(lag, time.monotonic() - before - 0.01)

    async def worker() -> None:
        for n in counter:
            await write(n)

    tick = asyncio.create_task(ticker())
    cpu, started = time.process_time(), time.monotonic()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    done.set()
    await tick
    return elapsed, cpu, lag


async def thread_hand_off(url: str, args: argparse.Namespace) -> tuple[float, float, float]:
    pool: ConnectionPool[Any] = ConnectionPool(
        url, min_size=args.pool, max_size=args.pool, kwargs={"autocommit": True}, open=True
    )
    pool.wait()
    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(args.pool, thread_name_prefix="db")

    async def write(n: int) -> None:
        await loop.run_in_executor(executor, sync_write, pool, n)

    try:
        return await drive(write, args.tasks, args.writes)
    finally:
        executor.shutdown()
        pool.close()


async def async_pool(url: str, args: argparse.Namespace) -> tuple[float, float, float]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url, min_size=args.pool, max_size=args.pool, kwargs={"autocommit": True}, open=False
    )
    await pool.open(wait=True)

    async def write(n: int) -> None:
        await async_write(pool, n)

    try:
        return await drive(write, args.tasks, args.writes)
    finally:
        await pool.close()


def main(argv: list[str] | None = None) -> None:
    parser = report.bench_parser(__doc__, "bench-commit-paths", timeout=300)
    parser.add_argument("--tasks", type=int, default=500, help="coroutines writing at once")
    parser.add_argument("--writes", type=int, default=6000, help="transactions per path")
    parser.add_argument("--pool", type=int, default=16, help="connections (and threads)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per path")
    args = report.parse(parser, argv, positive=["tasks", "writes", "pool", "rounds"])
    print(f"commit_paths: {report.command_line()}")
    print(f"machine: {report.machine()}")
    with harness.bench_services(args.home) as services:
        with psycopg.connect(services.pg_url, autocommit=True) as conn:
            conn.execute(SETUP)
        paths = {"threads + sync pool": thread_hand_off, "AsyncConnectionPool": async_pool}
        best: dict[str, tuple[float, float, float]] = {}
        for _ in range(args.rounds):  # alternated: the machine's load drifts
            for name, path in paths.items():
                result = asyncio.run(path(services.pg_url, args))
                if name not in best or result[0] < best[name][0]:
                    best[name] = result
    base_rate = args.writes / best["threads + sync pool"][0]
    base_cpu = best["threads + sync pool"][1] / args.writes
    for name, (seconds, cpu, lag) in best.items():
        rate, per_write = args.writes / seconds, cpu / args.writes
        print(
            f"  {name:<22} {rate:7.0f} writes/s ({rate / base_rate:4.2f}x)"
            f"  CPU {1e6 * per_write:6.0f} us/write ({per_write / base_cpu:4.2f}x)"
            f"  worst loop lag {1000 * lag:6.1f} ms"
        )


if __name__ == "__main__":
    main()
