"""How many bytes does a session keep in PostgreSQL once it is at rest?

Run from the repository root::

    .venv/bin/python benchmarks/storage.py [--sessions 1000 --workers 2 --threads 8]

For each agent shape below, the tables are emptied, ``--sessions`` sessions of
``benchmarks/agents/storage.py`` run on real workers until every one is at
rest (completed, or suspended on a callback no one answers), and the tables
are vacuumed and checkpointed. Printed, per session, for each session-keyed
table (``sessions``, ``checkpoints``, ``audit_events``, ``tool_execution_cache``,
``callbacks``, ``deliveries``) and in all:

- ``on disk``: ``pg_total_relation_size`` (heap, TOAST and indexes, whole
  pages) after the run and a ``VACUUM`` less before it, divided by the
  sessions. It holds the space the run's updates left free (each step
  rewrites the session row and its TOASTed state), which later sessions
  reuse;
- ``compacted``: the same after ``VACUUM FULL`` rewrote the tables: what the
  sessions themselves take, the figure a capacity plan multiplies (a busy
  table sits between the two);
- ``rows``: the rows each session left, and the bytes of those rows as
  stored (``pg_column_size`` of each row: compressed or TOASTed values at the
  size they take), without page overhead, free space or indexes.

Shapes (steps, characters of state added a step, tool calls a step, end):

- ``short``: 5 steps, 200, none, completes;
- ``tool-agent``: 20 steps, 500, one, completes;
- ``waiting``: 3 steps, 500, one, then suspended on a callback;
- ``big-state``: 20 steps, 5,000, one, completes;
- ``tool-agent-incremental`` and ``big-state-incremental``: the same
  with ``checkpoints=Incremental()`` (a JSON Patch a step, the whole state
  every 20th) where the others keep the default (the whole state each step).

What it measures is the history as written. Nothing trims it here: by default
a session keeps every checkpoint and audit row until retention deletes the
session (``RESUMABLE_RETENTION_DAYS``); ``RESUMABLE_COMPACT_KEEP`` trims long
histories to their last checkpoints (docs/operations.md).

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers
run under ``--home`` (default ``.resumable/bench-storage``). The tables are
truncated and Redis is flushed: never point this at a database you care about.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.agents.storage import AGENT_NAME, INCREMENTAL_AGENT_NAME
from benchmarks.harness import BenchDeployment, bench_services, log_dir_for
from benchmarks.harness.report import add_deployment, bench_parser, context_lines, parse

AGENTS = "benchmarks.agents.storage"
TABLES = (
    "sessions",
    "checkpoints",
    "audit_events",
    "tool_execution_cache",
    "callbacks",
    "deliveries",
)


@dataclass(frozen=True)
class Shape:
    name: str
    steps: int
    grow: int
    calls: int
    end: str
    agent: str = AGENT_NAME

    def input(self) -> dict[str, Any]:
        return {"steps": self.steps, "grow": self.grow, "calls": self.calls, "end": self.end}


SHAPES = (
    Shape("short", 5, 200, 0, "complete"),
    Shape("tool-agent", 20, 500, 1, "complete"),
    Shape("waiting", 3, 500, 1, "callback"),
    Shape("tool-agent-incremental", 20, 500, 1, "complete", INCREMENTAL_AGENT_NAME),
    Shape("big-state", 20, 5_000, 1, "complete"),
    Shape("big-state-incremental", 20, 5_000, 1, "complete", INCREMENTAL_AGENT_NAME),
)


@dataclass(frozen=True)
class TableSize:
    disk: int  # pg_total_relation_size
    rows: int
    row_bytes: int  # sum of pg_column_size(row)


def measure(url: str, *, full: bool = False) -> dict[str, TableSize]:
    """Each table's size once vacuumed (with `full`, rewritten compactly)."""
    sizes: dict[str, TableSize] = {}
    with harness.connect(url) as conn:
        if full:
            conn.execute(f"VACUUM FULL {', '.join(TABLES)}")
        harness.settle(conn, TABLES)
        for table in TABLES:
            row = conn.execute(
                f"SELECT pg_total_relation_size('{table}'), count(*),"
                f" coalesce(sum(pg_column_size(t.*)), 0) FROM {table} t"
            ).fetchone()
            assert row is not None
            sizes[table] = TableSize(int(row[0]), int(row[1]), int(row[2]))
    return sizes


def run_shape(args: Any, services: harness.Services, shape: Shape) -> None:
    harness.reset_data(services.pg_url, services.redis_url, ("sessions",))
    before = measure(services.pg_url)
    rest = "suspended" if shape.end == "callback" else "completed"
    env = harness.worker_env(args.threads)
    began = time.monotonic()
    with BenchDeployment(services, log_dir_for(args.home), env) as deployment:
        for index in range(args.workers):
            deployment.processes.worker(AGENTS, name=f"worker{index + 1}")
        with (
            harness.connect(services.pg_url) as poller,
            harness.bench_client(services.settings(), 4) as client,
        ):
            ids = harness.start_sessions(client, shape.agent, [shape.input()] * args.sessions, 4)
            harness.wait_sessions(
                poller,
                lambda counts: counts[rest] >= len(ids),
                what=f"{len(ids)} sessions to be {rest}",
                timeout=args.timeout,
                agent=shape.agent,
                alive=deployment.check_alive,
                interval=0.2,
            )
    elapsed = time.monotonic() - began
    after = measure(services.pg_url)
    compacted = measure(services.pg_url, full=True)
    n = args.sessions
    print(
        f"\n{shape.name}: {shape.steps} steps, {shape.grow:,} characters of state a step, "
        f"{shape.calls} tool call(s) a step, {rest} at rest ({n:,} sessions, {elapsed:.1f} s)"
    )
    print(
        f"  {'bytes per session':<22} {'on disk':>10} {'compacted':>10}"
        f" {'rows':>7} {'row bytes':>10}"
    )
    totals = [0.0, 0.0, 0.0, 0.0]
    for table in TABLES:
        figures = (
            (after[table].disk - before[table].disk) / n,
            (compacted[table].disk - before[table].disk) / n,
            (after[table].rows - before[table].rows) / n,
            (after[table].row_bytes - before[table].row_bytes) / n,
        )
        totals = [total + figure for total, figure in zip(totals, figures, strict=True)]
        print(
            f"  {table:<22} {figures[0]:>10,.0f} {figures[1]:>10,.0f} {figures[2]:>7.2f}"
            f" {figures[3]:>10,.0f}"
        )
    print(
        f"  {'in all':<22} {totals[0]:>10,.0f} {totals[1]:>10,.0f} {totals[2]:>7.2f}"
        f" {totals[3]:>10,.0f}"
    )
    state = shape.steps * shape.grow
    print(
        f"  the final state holds {state:,} characters; compacted, the session takes "
        f"{totals[1] / 1024:,.1f} KiB ({totals[1] / max(state, 1):.1f}x that; "
        f"{1_000_000 * totals[1] / 2**30:,.1f} GiB a million sessions), "
        f"{totals[0] / 1024:,.1f} KiB as left by the run"
    )


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, "bench-storage", timeout=600.0)
    add_deployment(parser, threads=8)
    parser.add_argument("--sessions", type=int, default=1000, help="sessions per shape")
    parser.add_argument(
        "--shapes",
        default=",".join(shape.name for shape in SHAPES),
        help="some of: " + ", ".join(shape.name for shape in SHAPES),
    )
    args = parse(parser, argv, positive=["sessions", "workers", "threads"])
    chosen = [name.strip() for name in args.shapes.split(",") if name.strip()]
    unknown = sorted(set(chosen) - {shape.name for shape in SHAPES})
    if unknown or not chosen:
        parser.error(f"unknown shape(s): {', '.join(unknown) or '(none)'}")
    with bench_services(args.home) as services:
        for context in context_lines(services.where):
            print(context)
        for shape in SHAPES:
            if shape.name in chosen:
                run_shape(args, services, shape)
    return 0


if __name__ == "__main__":
    sys.exit(main())
