"""LangGraph's resume, in process, on the same PostgreSQL: the peer issue 38
holds resumable's one-at-a-time resume against.

A two-node graph: ``ask`` waits for a human (``interrupt``), ``after`` is
the step the answer resumes. Each thread is run up to its interrupt first;
then, one thread at a time with a pause between, ``invoke(Command(resume=...))``
is timed from the call to the moment ``after`` starts. The checkpointer is
LangGraph's own ``PostgresSaver`` (a psycopg connection to the benchmark's
server), with ``durability="sync"``: each step's checkpoint is written before
the next step starts, as resumable commits every step; the default
(``"async"``, written beside the next step) is measured too.

Nothing crosses a process here: no HTTP request, no broker, no worker. The
resume is a function call on a warm connection, which is why it is the
floor the issue compares against rather than a like-for-like deployment.

Needs ``pip install -e '.[peers]'``; run through ``benchmarks/resume.py
--langgraph`` (the same run as resumable's figures) or alone::

    .venv/bin/python -m benchmarks.peers.langgraph_resume --samples 500
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Literal, TypedDict

Durability = Literal["sync", "async"]

#: Where LangGraph's tables go (resumable's schema has a `checkpoints` too).
SCHEMA = "langgraph_peer"


class _State(TypedDict, total=False):
    n: int
    approved: bool


@dataclass(frozen=True)
class PeerResume:
    """One durability mode's resume latencies (seconds) and CPU per resume
    (this process, and the PostgreSQL backend it talked to)."""

    durability: Durability
    latencies: list[float]
    client_cpu: float
    server_cpu: float


def available() -> bool:
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
    except ImportError:
        return False
    return True


def measure(pg_url: str, samples: int, gap: float, durability: Durability) -> PeerResume:
    """Resume `samples` threads one at a time, `gap` seconds apart (the
    first 20 warm up and are dropped)."""
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt
    from psycopg import Connection
    from psycopg.rows import dict_row

    from resumable._internal import procfs

    started_after: list[float] = []

    def ask(state: _State) -> _State:
        return {"approved": bool(interrupt("approve?"))}

    def after(state: _State) -> _State:
        started_after.append(time.perf_counter())
        return {"n": state.get("n", 0) + 1}

    builder = StateGraph(_State)
    builder.add_node("ask", ask)
    builder.add_node("after", after)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "after")
    builder.add_edge("after", END)
    total = samples + 20
    with Connection.connect(
        pg_url, autocommit=True, prepare_threshold=0, row_factory=dict_row
    ) as conn:
        # A schema of its own, dropped with what it holds afterwards.
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(f"SET search_path TO {SCHEMA}")
        try:
            saver = PostgresSaver(conn)
            saver.setup()
            graph = builder.compile(checkpointer=saver)
            threads = [
                RunnableConfig(configurable={"thread_id": str(uuid.uuid4())}) for _ in range(total)
            ]
            for config in threads:  # each waits at its interrupt
                graph.invoke(_State(n=0), config, durability=durability)
            backend = conn.info.backend_pid
            latencies: list[float] = []
            cpu_before = (procfs.cpu_seconds(backend), time.thread_time())
            for index, config in enumerate(threads):
                time.sleep(gap)
                began = time.perf_counter()
                graph.invoke(Command(resume=True), config, durability=durability)
                if index >= 20:
                    latencies.append(started_after[-1] - began)
            cpu_after = (procfs.cpu_seconds(backend), time.thread_time())
        finally:
            conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    server = float("nan")
    if cpu_before[0] is not None and cpu_after[0] is not None:
        server = (cpu_after[0] - cpu_before[0]) / total
    return PeerResume(durability, latencies, (cpu_after[1] - cpu_before[1]) / total, server)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--gap-ms", type=float, default=10.0)
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL"))
    args = parser.parse_args(argv)
    if not available():
        print("LangGraph is not installed: pip install -e '.[peers]'", file=sys.stderr)
        return 2
    if not args.database_url:
        print("set DATABASE_URL (or --database-url) to a PostgreSQL to write to", file=sys.stderr)
        return 2
    from benchmarks.harness.report import percentile

    for durability in ("sync", "async"):
        result = measure(args.database_url, args.samples, args.gap_ms / 1000, durability)
        lat = result.latencies
        print(
            f"LangGraph resume, durability={durability}: p50 {percentile(lat, 0.5) * 1e3:.2f} ms,"
            f" p99 {percentile(lat, 0.99) * 1e3:.2f} ms; CPU per resume: client"
            f" {result.client_cpu * 1e3:.2f} ms, PostgreSQL {result.server_cpu * 1e3:.2f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
