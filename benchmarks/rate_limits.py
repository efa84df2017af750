"""Does a shared rate limit keep 500 async sessions under a provider's limit
at its full rate, and what does a turn cost per call?

Run from the repository root::

    .venv/bin/python benchmarks/rate_limits.py [--sessions 500 --rate 50
        --wait-in-place 10 --cost-sessions 2000 --rounds 3 --workers 2 --threads 8]

A real deployment (``--workers`` ``resumable worker`` processes of
``--threads`` threads, running ``benchmarks/agents/rated.py``) calls a fake
LLM served by this process on 127.0.0.1 (``benchmarks/harness/fake_llm.py``:
a token bucket answering HTTP 429 with a Retry-After when it is empty). Each
session has one ``async def`` step awaiting one ``ctx.tool("chat", ...)``
call (``urllib`` on ``asyncio.to_thread``). In one run:

1. The target: ``--sessions`` sessions of ``bench_rated``, whose call takes a
   turn of ``RateLimit("llm", requests=N, per=1)``, against a provider
   allowing N requests a second (``--rate``, default 50; a bucket of N).
   A call whose turn is more than ``--wait-in-place`` seconds off (default
   10, RateLimit's) lets its worker go: at the defaults the 500th turn is
   just under 10 s away, so few or none do; a smaller value shows that path.
   Printed: the calls answered, the 429s the provider sent (target 0), the
   throughput (answered calls / (last answer - first answer); target at least
   0.9 x N), the most answers in any second, the longest gap between two
   answers in a row (the line idle), the wall time (first start to last
   completion), the sessions that let their worker go for a far turn (their
   ``rate_limited`` audit events) and the failed attempts counted
   (target 0: ``retry_scheduled`` events, plus the last attempt of each
   failed session; a session's ``attempts`` goes back to 0 when a step
   commits, so it is not read from there).
   Then the baseline: the same sessions of ``bench_unrated``, the same call
   without ``rate_limit=``, against a fresh provider of the same rate: a 429
   is then a ``TransientError``, retried with attempts (the default policy:
   3 attempts, then the session fails and is dead-lettered).
2. The cost of a turn: ``--cost-sessions`` sessions of one call each, on a
   provider without a limit, of ``bench_unrated`` (no limit) and of
   ``bench_rated_loose`` (a limit of a million calls a second, which never
   binds: one Lua script in Redis per call), interleaved over ``--rounds``
   rounds after a warm-up. Printed: calls/s and the CPU per call (a session
   of one call: its claim, step, call and commit) of the workers, Valkey and
   PostgreSQL, medians, with the limited agent's ratio to the unlimited one.

Each run is bounded by ``--timeout``. ``DATABASE_URL``/``REDIS_URL`` are used
when set; otherwise embedded servers run under ``--home`` (default
``.resumable/bench-rate-limits``). Tables are truncated and Redis flushed:
never point this at a database you care about.
"""

from __future__ import annotations

import itertools
import math
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.agents.rated import IN_PLACE_ENV, LOOSE, RATED, REQUESTS_ENV, UNRATED
from benchmarks.harness import BENCH_TAG, BenchDeployment, Services
from benchmarks.harness.cpu import CpuMeter
from benchmarks.harness.fake_llm import FakeLLM, most_in_any_window
from benchmarks.harness.report import add_deployment, bench_parser, context_lines, parse, verdict

AGENT_MODULE = "benchmarks.agents.rated"
TRUNCATED = ("sessions", "checkpoints", "audit_events", "tool_execution_cache")
# A provider without a limit, for the cost of a turn.
UNLIMITED_RATE = 1e9
# Throughput within 10% of the limit's rate.
TARGET_RATIO = 0.9
COST_AGENTS = {"no limit": UNRATED, "limit, never binding": LOOSE}

STATUSES = (
    f"SELECT status, count(*) FROM sessions {BENCH_TAG} WHERE id = ANY(%s::uuid[]) GROUP BY status"
)
EVENTS = f"""
SELECT count(DISTINCT e.session_id) FILTER (WHERE e.event_type = 'rate_limited'),
       count(*) FILTER (WHERE e.event_type = 'rate_limited'),
       count(*) FILTER (WHERE e.event_type = 'retry_scheduled')
FROM audit_events e JOIN sessions s ON s.id = e.session_id {BENCH_TAG}
WHERE s.agent = %(agent)s
"""


def parse_args(argv: list[str] | None) -> Any:
    parser = bench_parser(__doc__, "bench-rate-limits", timeout=180.0)
    add_deployment(parser, threads=8)
    parser.add_argument(
        "--sessions", type=int, default=500, help="async sessions of the target and the baseline"
    )
    parser.add_argument(
        "--rate",
        type=int,
        default=50,
        help="N: requests/s the provider allows and the limit grants",
    )
    parser.add_argument(
        "--wait-in-place",
        type=float,
        default=10.0,
        help="seconds a call waits for its turn in place before its session lets the worker go",
    )
    parser.add_argument(
        "--cost-sessions", type=int, default=2000, help="sessions per run of the cost rounds"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the cost")
    args = parse(
        parser, argv, ("sessions", "rate", "cost_sessions", "rounds", "workers", "threads")
    )
    if not 0 <= args.wait_in_place <= 86_400:
        parser.error("--wait-in-place must be between 0 and 86400 seconds")
    return args


def wait_finished(
    conn: Any, ids: Sequence[Any], *, what: str, timeout: float, deployment: BenchDeployment
) -> Counter[str]:
    """Poll until every session of `ids` is completed, failed or cancelled
    (``harness.wait_sessions`` raises at the first failure: the baseline's
    sessions out of attempts fail, and that is what it shows)."""
    deadline = time.monotonic() + timeout
    params = [[str(session_id) for session_id in ids]]
    while True:
        counts = Counter({str(s): int(n) for s, n in conn.execute(STATUSES, params).fetchall()})
        if counts["completed"] + counts["failed"] + counts["cancelled"] >= len(ids):
            return counts
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}: {dict(counts)}")
        deployment.check_alive()
        time.sleep(0.01)


@dataclass(frozen=True)
class Target:
    """One run of part 1: sessions against a provider of N requests/s."""

    sessions: int
    completed: int
    failed: int
    answered: int
    answered_sessions: int  # distinct sessions among the answered calls
    refused: int
    span: float  # seconds from the first answer to the last
    most_in_second: int
    longest_gap: float  # seconds between two answers in a row, at most
    wall: float
    waited_sessions: int  # sessions that let their worker go for a turn
    waited_events: int  # their rate_limited audit events
    retries: int  # retry_scheduled audit events

    @property
    def attempts(self) -> int:
        """Failed attempts counted: each retry scheduled, and the last attempt
        of each failed session (a session's own ``attempts`` goes back to 0
        when a step commits: read on a completed session, it says nothing)."""
        return self.retries + self.failed

    @property
    def throughput(self) -> float:
        return self.answered / self.span if self.span > 0 else float("nan")


def target_run(
    args: Any, services: Services, deployment: BenchDeployment, agent: str, rate: float
) -> Target:
    harness.reset_data(services.pg_url, services.redis_url, TRUNCATED)
    with (
        FakeLLM(rate) as llm,
        harness.bench_client(services.settings(), args.threads + 2) as client,
    ):
        started = time.monotonic()
        ids = harness.start_sessions(
            client, agent, [{"llm": llm.url}] * args.sessions, args.threads
        )
        with harness.connect(services.pg_url) as conn:
            counts = wait_finished(
                conn, ids, what=agent, timeout=args.timeout, deployment=deployment
            )
            wall = time.monotonic() - started
            events = conn.execute(EVENTS, {"agent": agent}).fetchone()
        answered, refused = llm.answered(), llm.refused()
    assert events is not None
    times = [a.at for a in answered]
    return Target(
        sessions=len(ids),
        completed=counts["completed"],
        failed=counts["failed"],
        answered=len(answered),
        answered_sessions=len({a.session for a in answered}),
        refused=len(refused),
        span=max(times) - min(times) if len(times) > 1 else 0.0,
        most_in_second=most_in_any_window(times, 1.0),
        longest_gap=max((b - a for a, b in itertools.pairwise(sorted(times))), default=0.0),
        wall=wall,
        waited_sessions=int(events[0]),
        waited_events=int(events[1]),
        retries=int(events[2]),
    )


@dataclass(frozen=True)
class Cost:
    """One run of part 2: calls/s and CPU ms per call."""

    rate: float
    worker: float
    valkey: float
    postgres: float


def cost_run(
    args: Any,
    services: Services,
    deployment: BenchDeployment,
    meter: CpuMeter,
    agent: str,
    sessions: int,
) -> Cost:
    harness.reset_data(services.pg_url, services.redis_url, TRUNCATED)
    pids = [worker.pid for worker in deployment.workers]
    with (
        FakeLLM(UNLIMITED_RATE) as llm,
        harness.bench_client(services.settings(), args.threads + 2) as client,
    ):
        inputs = [{"llm": llm.url}] * sessions
        before = meter.sample(pids)
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
        elapsed = time.monotonic() - started
        used = meter.sample(pids).since(before)
        answered, refused = len(llm.answered()), len(llm.refused())
    if answered != sessions or refused:
        raise RuntimeError(f"{agent}: {answered} answered, {refused} refused of {sessions} calls")
    return Cost(
        sessions / elapsed,
        used.clients / sessions * 1e3,
        used.valkey / sessions * 1e3,
        used.postgres / sessions * 1e3,
    )


def print_targets(rated: Target, unrated: Target, n: int) -> None:
    def row(label: str, a: str, b: str) -> None:
        print(f"  {label:<34}{a:>26}{b:>26}")

    def throughput(run: Target) -> str:
        return f"{run.throughput:,.1f}/s ({run.throughput / n:.2f} x N)"

    row("", f"limit {n}/s", "no limit (baseline)")
    row(
        "sessions completed / failed",
        f"{rated.completed} / {rated.failed}",
        f"{unrated.completed} / {unrated.failed}",
    )
    row(
        "answered (distinct sessions)",
        f"{rated.answered} ({rated.answered_sessions})",
        f"{unrated.answered} ({unrated.answered_sessions})",
    )
    row("429s seen by the provider", f"{rated.refused:,}", f"{unrated.refused:,}")
    row("throughput", throughput(rated), throughput(unrated))
    row("first to last answer", f"{rated.span:.2f} s", f"{unrated.span:.2f} s")
    row("most answers in any 1 s", str(rated.most_in_second), str(unrated.most_in_second))
    row(
        "longest gap between answers",
        f"{rated.longest_gap * 1e3:,.0f} ms",
        f"{unrated.longest_gap * 1e3:,.0f} ms",
    )
    row("wall time", f"{rated.wall:.2f} s", f"{unrated.wall:.2f} s")
    row(
        "sessions suspended for a turn",
        f"{rated.waited_sessions} ({rated.waited_events} events)",
        f"{unrated.waited_sessions} ({unrated.waited_events} events)",
    )
    row(
        "failed attempts (retries + final)",
        f"{rated.attempts} ({rated.retries} + {rated.failed})",
        f"{unrated.attempts} ({unrated.retries} + {unrated.failed})",
    )
    once = rated.completed == rated.answered == rated.answered_sessions == rated.sessions
    print(
        f"  targets, limit {n}/s: 429s 0 {verdict(rated.refused == 0)};"
        f" throughput >= {TARGET_RATIO} x N {verdict(rated.throughput >= TARGET_RATIO * n)};"
        f" attempts 0 {verdict(rated.attempts == 0)};"
        f" all {rated.sessions} completed, each answered once {verdict(once)}"
    )


def print_costs(results: dict[str, list[Cost]]) -> None:
    def median(label: str, field: str) -> float:
        values = [float(getattr(r, field)) for r in results[label]]
        if any(math.isnan(v) for v in values):
            return float("nan")
        return statistics.median(values)

    fields = ("rate", "worker", "valkey", "postgres")
    base = {f: median("no limit", f) for f in fields}
    print(
        f"  {'agent':<22}{'calls/s':>9}{'x':>6}{'worker ms/call':>16}{'x':>6}"
        f"{'valkey ms/call':>16}{'x':>6}{'postgres ms/call':>18}{'x':>6}"
    )
    for label in results:
        m = {f: median(label, f) for f in fields}
        print(
            f"  {label:<22}{m['rate']:>9,.0f}{m['rate'] / base['rate']:>6.2f}"
            f"{m['worker']:>16.3f}{m['worker'] / base['worker']:>6.2f}"
            f"{m['valkey']:>16.3f}{m['valkey'] / base['valkey']:>6.2f}"
            f"{m['postgres']:>18.3f}{m['postgres'] / base['postgres']:>6.2f}"
        )
    extra = (median("limit, never binding", "worker") - base["worker"]) * 1e3
    print(f"  a turn adds {extra:+.0f} us of worker CPU per call (medians)")
    for label, runs in results.items():
        rounds = "; ".join(f"{r.rate:,.0f}/s {r.worker:.3f} ms" for r in runs)
        print(f"  {label} by round (calls/s, worker ms/call): {rounds}")


def run(args: Any, services: Services, log_dir: Path) -> None:
    print("rate limits benchmark")
    for line in context_lines(services.where):
        print(line)
    n = args.rate
    print(
        f"deployment: {args.workers} workers x {args.threads} threads; provider and limit"
        f" N = {n} requests/s, waiting in place up to {args.wait_in_place:g} s;"
        f" {args.sessions} sessions (target), {args.cost_sessions}"
        f" sessions x {args.rounds} rounds (cost)"
    )
    env = harness.worker_env(
        args.threads, **{REQUESTS_ENV: str(n), IN_PLACE_ENV: str(args.wait_in_place)}
    )
    with BenchDeployment(services, log_dir, env) as deployment:
        deployment.start_workers(args.workers, AGENT_MODULE)
        meter = CpuMeter.find(services.pg_url, services.redis_url)
        warm = min(args.cost_sessions, 200)
        for agent in COST_AGENTS.values():  # warm-up, not counted
            cost_run(args, services, deployment, meter, agent, warm)

        print(f"\n1. {args.sessions} async sessions, one call each, provider allowing {n}/s")
        rated = target_run(args, services, deployment, RATED, n)
        unrated = target_run(args, services, deployment, UNRATED, n)
        print_targets(rated, unrated, n)

        print(
            f"\n2. cost of a turn: {args.cost_sessions} sessions x 1 call, provider without"
            f" limit, {args.rounds} rounds interleaved (medians; x: to no limit)"
        )
        results: dict[str, list[Cost]] = {label: [] for label in COST_AGENTS}
        for _ in range(args.rounds):
            for label, agent in COST_AGENTS.items():
                results[label].append(
                    cost_run(args, services, deployment, meter, agent, args.cost_sessions)
                )
        print_costs(results)
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"\nload average at the end: {load}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with harness.bench_services(args.home) as services:
        run(args, services, harness.log_dir_for(args.home))
    return 0


if __name__ == "__main__":
    sys.exit(main())
