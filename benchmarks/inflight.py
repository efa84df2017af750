"""How many I/O-bound steps does ONE worker process keep in flight?

Run from the repository root::

    .venv/bin/python benchmarks/inflight.py [--sessions 1000 --limits 500 --delay 1]

Every session of ``benchmarks/agents/inflight.py`` runs 3 steps, each making
one ``ctx.tool`` call to a fake LLM that answers after ``--delay`` seconds
(``benchmarks/agents/slow_llm.py``, an asyncio server in its own process). The
sessions are created first; then ONE ``resumable worker`` runs them:

1. async steps, with ``RESUMABLE_MAX_INFLIGHT`` set to each of ``--limits``;
   ideal wall time ``3 x delay x sessions / limit``;
2. the same agent with sync steps on ``--baseline-threads`` threads (8 and 64
   by default), on ``--baseline-sessions`` sessions (a baseline at 8 threads
   with 1,000 sessions would take 6 minutes); ideal ``3 x delay x sessions /
   threads``.

The sessions are created before the worker starts, so each is delivered
twice: ``Client.start``'s message and the worker's start-up enqueue of
sessions that no worker served (the second claim is a duplicate, refused:
not what a deployed worker sees). ``--one-message`` drops ``Client.start``'s
messages first, leaving the start-up enqueue's (it relies on the worker
finding the agent unserved; a run where it did not, waited for nothing).
Wall time is from the first claim to the last completion, both as
PostgreSQL stamped them. Peak RSS is the
worker's ``VmHWM``; its CPU time is counted from when it said it was ready
(start-up imports excluded): one process cannot use more than one core for
Python, so CPU per step x steps is a floor under the wall time on this
machine whatever the limit. The CPU of the PostgreSQL server (all its
processes, when it runs on this machine) is printed too: it shares the same
cores. Ratios compare steps per second against the sync baseline at the
smallest thread count, measured in the
same run. ``--sessions 200 --limits 100`` is a quick, smaller version.

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers run
under ``--home``. The tables are truncated and Redis is flushed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import redis

from benchmarks import harness
from benchmarks.agents.inflight import ASYNC_AGENT, STEPS, SYNC_AGENT
from benchmarks.harness import report
from benchmarks.harness.report import verdict

TABLES = ["sessions", "checkpoints", "audit_events", "tool_execution_cache", "workers", "agents"]


@dataclass(frozen=True)
class Phase:
    label: str
    agent: str
    sessions: int
    concurrency: int  # the in-flight limit, or the thread count
    env: dict[str, str]


@dataclass(frozen=True)
class Result:
    phase: Phase
    wall: float
    ideal: float
    rss_mb: float
    peak_llm_in_flight: int
    cpu_seconds: float  # the worker's user + system CPU time from ready to done
    server_cpu_seconds: float  # PostgreSQL's backends over the same time (nan if remote)

    @property
    def steps_per_second(self) -> float:
        return self.phase.sessions * STEPS / self.wall


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = report.bench_parser(__doc__, "bench-inflight", timeout=600)
    parser.add_argument("--sessions", type=int, default=1000, help="sessions of the async runs")
    parser.add_argument(
        "--limits", default="500", help="RESUMABLE_MAX_INFLIGHT values, comma-separated"
    )
    parser.add_argument("--delay", type=float, default=1.0, help="seconds the fake LLM takes")
    parser.add_argument("--threads", type=int, default=8, help="worker threads of the async runs")
    parser.add_argument(
        "--db-threads", type=int, default=8, help="database threads of the event loop"
    )
    parser.add_argument("--baseline-threads", default="8,64", help="sync baselines' thread counts")
    parser.add_argument(
        "--baseline-sessions",
        type=int,
        default=0,
        help="sessions of each sync baseline (0: 4 x its threads, at most --sessions)",
    )
    parser.add_argument(
        "--one-message",
        action="store_true",
        help="drop the messages Client.start sent (the worker's start-up enqueue delivers)",
    )
    return report.parse(parser, argv, positive=["sessions", "threads", "db_threads"])


def phases(args: argparse.Namespace) -> list[Phase]:
    listed: list[Phase] = []
    for threads in [int(t) for t in args.baseline_threads.split(",") if t]:
        sessions = args.baseline_sessions or min(args.sessions, 4 * threads)
        env = harness.worker_env(threads)
        listed.append(Phase(f"sync, {threads} threads", SYNC_AGENT, sessions, threads, env))
    for limit in [int(n) for n in args.limits.split(",") if n]:
        env = harness.worker_env(
            args.threads,
            RESUMABLE_MAX_INFLIGHT=str(limit),
            # What the loop's database threads get (see queue/database_threads.py).
            RESUMABLE_DB_POOL_SIZE=str(args.threads + 2 + args.db_threads),
        )
        listed.append(Phase(f"async, limit {limit}", ASYNC_AGENT, args.sessions, limit, env))
    return listed


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_llm(llm_url: str) -> None:
    httpx.get(f"{llm_url}/count", timeout=10)  # reads and resets its peak


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(pg_url: str) -> float:
    """CPU time of the local PostgreSQL server and all its processes so far,
    the exited ones included (nan when it is not on this machine)."""
    try:
        with harness.connect(pg_url) as conn:
            row = conn.execute("SELECT current_setting('data_directory')").fetchone()
        assert row is not None
        postmaster = int((Path(str(row[0])) / "postmaster.pid").read_text().split()[0])
        fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = sum(int(f) for f in fields[11:15])  # its own and its reaped children's
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                rest = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(rest[1]) == postmaster:
                ticks += int(rest[11]) + int(rest[12])
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AssertionError):
        return float("nan")


def drop_messages(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
    finally:
        client.close()


def run_phase(
    services: harness.Services, args: argparse.Namespace, llm_url: str, phase: Phase
) -> Result:
    harness.reset_data(services.pg_url, services.redis_url, TABLES)
    settings = services.settings()
    with harness.bench_client(settings, pool_size=8) as client:
        # Sessions wait in the queue before the worker starts: it sees them all at once.
        inputs = [{"llm": f"{llm_url}/v1/chat/completions"}] * phase.sessions
        harness.start_sessions(client, phase.agent, inputs, threads=8)
    if args.one_message:
        drop_messages(services.redis_url)
    reset_llm(llm_url)
    log_dir = harness.log_dir_for(args.home)
    with harness.BenchDeployment(services, log_dir, phase.env) as deployment:
        deployment.start_workers(1, "benchmarks.agents.inflight")
        worker = deployment.workers[0]
        cpu_at_start = cpu_seconds(worker.pid)  # imports and start-up, not the steps
        server_at_start = server_cpu_seconds(services.pg_url)
        with harness.connect(services.pg_url) as conn:
            harness.wait_sessions(
                conn,
                lambda counts: counts["completed"] == phase.sessions,
                what=f"{phase.sessions} sessions ({phase.label})",
                timeout=args.timeout,
                alive=deployment.check_alive,
                interval=0.2,
            )
            row = conn.execute(
                "SELECT extract(epoch FROM max(created_at) FILTER "
                "(WHERE event_type = 'session_completed') - min(created_at) FILTER "
                "(WHERE event_type = 'run_started')) FROM audit_events"
            ).fetchone()
        assert row is not None
        rss = peak_rss_mb(worker.pid)
        cpu = cpu_seconds(worker.pid) - cpu_at_start
        server_cpu = server_cpu_seconds(services.pg_url) - server_at_start
    peak = httpx.get(f"{llm_url}/count", timeout=10).json()["peak_in_flight"]
    ideal = STEPS * args.delay * phase.sessions / min(phase.concurrency, phase.sessions)
    return Result(phase, float(row[0]), ideal, rss, int(peak), cpu, server_cpu)


def start_llm(delay: float) -> tuple[subprocess.Popen[str], str]:
    llm = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).parent / "agents" / "slow_llm.py"),
            "--delay",
            str(delay),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert llm.stdout is not None
    line = llm.stdout.readline()
    if not line.startswith("listening on "):
        llm.kill()
        raise RuntimeError(f"the fake LLM did not start: {line!r}")
    return llm, f"http://127.0.0.1:{int(line.split()[-1])}"


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    print(f"inflight: {report.command_line()}")
    print(f"machine: {report.machine()}")
    results: list[Result] = []
    with harness.bench_services(args.home) as services:
        llm, llm_url = start_llm(args.delay)
        try:
            for phase in phases(args):
                started = time.monotonic()
                result = run_phase(services, args, llm_url, phase)
                results.append(result)
                print(
                    f"  {phase.label:<22} {phase.sessions:>5} sessions  wall {result.wall:7.2f} s"
                    f"  ideal {result.ideal:7.2f} s  ({result.wall / result.ideal:4.2f}x ideal)"
                    f"  {result.steps_per_second:7.1f} steps/s  peak RSS {result.rss_mb:6.1f} MB"
                    f"  LLM calls in flight at most {result.peak_llm_in_flight}"
                    f"  worker CPU after start {result.cpu_seconds:.1f} s"
                    f" ({1000 * result.cpu_seconds / (phase.sessions * STEPS):.1f} ms/step),"
                    f" PostgreSQL {1000 * result.server_cpu_seconds / (phase.sessions * STEPS):.1f}"
                    " ms/step"
                    f"  (phase took {time.monotonic() - started:.0f} s)",
                    flush=True,
                )
        finally:
            llm.kill()
            llm.wait()
    baseline = results[0]
    print(f"\nsteps/s against {baseline.phase.label} (same run):")
    for result in results:
        ratio = result.steps_per_second / baseline.steps_per_second
        line = f"  {result.phase.label:<22} {ratio:6.1f}x"
        if result.phase.agent == ASYNC_AGENT:
            fits = result.wall <= 1.3 * result.ideal and result.rss_mb < 400
            line += (
                f"   within 1.3x of ideal and RSS < 400 MB: {verdict(fits)}"
                f" (ideal {result.ideal:.2f} s, wall {result.wall:.2f} s,"
                f" RSS {result.rss_mb:.0f} MB)"
            )
        print(line)


if __name__ == "__main__":
    main()
