"""What does resumable add to a PydanticAI or OpenAI Agents SDK agent, per recorded call?

Run from the repository root::

    .venv/bin/python benchmarks/frameworks.py [--sessions 200 --tools 4 --workers 2]

The agents are in ``benchmarks/agents/frameworks.py``: each framework's agent
with an in-process fake model (no HTTP, no sleep) and a tool that adds one.
Three session shapes, each ``--sessions`` sessions per framework:

- ``single``: one model request that answers at once;
- ``batched``: one request asking for ``--tools`` tool calls at once, then the answer;
- ``turns``: one tool call per model request, then the answer.

1. Bare: the same framework agents, run by the framework alone in this
   process (``agent.run`` / ``Runner.run``, tool calls sequential as the
   integration runs them), session after session; CPU from ``os.times``.
   Then the same runs turn by turn, as a durable session makes them (one
   framework run per model turn, from the conversation so far, by the
   adapter's own turn runner) with nothing recorded: what that design costs
   the framework, apart from what resumable's records and commits cost.
2. Durable: ``--workers`` ``resumable worker`` processes (async steps) run the
   ``durable(...)`` agents; sessions are started with ``Client.start`` and
   waited for until completed. CPU of every process involved: the workers (with
   their children), PostgreSQL (the postmaster and its backends), Valkey and this
   process (which starts the sessions and polls their statuses); commits from
   ``pg_stat_database.xact_commit``, less this process's own transactions
   (read-only ones count there too), and writes: the transactions that took a
   transaction id (``txid_current()`` before and after), less the sessions'
   inserts.
   First, ``--warm-up`` sessions of each framework, not measured: a new worker's
   first sessions import, connect and prepare statements.

Added CPU per session is the durable run's CPU less the bare run's, and a
recorded call is a model request or a tool call (``tool_execution_cache`` rows,
checked against the shape). The three shapes split the added CPU (and the
writes) of a session as ``session + turns x turn + tools x tool``: ``turn`` is
a model turn (its step commit, with which its model request's answer rides),
``tool`` a tool call (its claim and its record).

The target (issue 39): at most one commit and 1 ms of CPU per recorded call.

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers run
under ``--home`` (default ``.resumable/bench-frameworks``). The tables are
truncated and Redis is flushed: never point this at a database you care about.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    # and drop this script's folder, whose `agents/` would shadow the OpenAI Agents SDK's.
    HERE = Path(__file__).resolve().parent
    sys.path[:] = [str(HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != HERE]

from agents import RunConfig, Runner, ToolExecutionConfig

from benchmarks import harness
from benchmarks.agents.frameworks import (
    OPENAI_AGENT,
    PYDANTIC_AGENT,
    SHAPES,
    counts,
    openai_agent,
    prompt,
    pydantic_agent,
)
from benchmarks.harness import BenchDeployment, Services
from benchmarks.harness.cpu import CpuMeter, GroupCpu
from benchmarks.harness.pg_counters import calibrate_empty_query, let_statistics_flush
from benchmarks.harness.pg_counters import read_counters as read_pg_counters
from benchmarks.harness.report import bench_parser, context_lines, parse, verdict
from resumable.integrations._session import Finished
from resumable.integrations.openai_agents import _Runner as OpenAITurns
from resumable.integrations.pydantic_ai import _Runner as PydanticTurns

AGENT_MODULE = "benchmarks.agents.frameworks"
TRUNCATED = ("sessions", "checkpoints", "audit_events", "tool_execution_cache")
TARGET_COMMITS = 1.0  # per recorded call
TARGET_CPU_MS = 1.0  # per recorded call
FRAMEWORKS = {"pydantic-ai": PYDANTIC_AGENT, "openai-agents": OPENAI_AGENT}


@dataclass
class Run:
    framework: str
    shape: str
    sessions: int
    bare_cpu: float  # seconds, the whole bare run
    by_turn_cpu: float  # seconds, the bare run one framework run per model turn
    durable_cpu: dict[str, float]  # seconds by process group, the whole durable run
    elapsed: float
    commits: int
    writes: int  # transactions that wrote (took a transaction id)
    recorded: int
    turns: int  # model requests per session
    tools: int  # tool calls per session

    @property
    def durable_total(self) -> float:
        return sum(self.durable_cpu.values())

    @property
    def added_per_session(self) -> float:
        return (self.durable_total - self.bare_cpu) / self.sessions

    @property
    def added_per_recorded(self) -> float:
        return (self.durable_total - self.bare_cpu) / self.recorded

    @property
    def by_turn_per_recorded(self) -> float:
        """CPU the framework spends more run turn by turn, per recorded call."""
        return (self.by_turn_cpu - self.bare_cpu) / self.recorded

    @property
    def commits_per_recorded(self) -> float:
        return self.commits / self.recorded

    @property
    def writes_per_recorded(self) -> float:
        return self.writes / self.recorded


# -- bare --------------------------------------------------------------------------------


async def _bare_pydantic(text: str) -> Any:
    with pydantic_agent.parallel_tool_call_execution_mode("sequential"):
        return (await pydantic_agent.run(text)).output


async def _bare_openai(text: str) -> Any:
    config = RunConfig(
        tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1),
        tracing_disabled=True,
    )
    return (await Runner.run(openai_agent, text, run_config=config, max_turns=100)).final_output


@dataclass
class _TurnContext:
    """What the adapters' turns read of a step's context: its input and state."""

    input: Any
    state: dict[str, Any] = field(default_factory=dict)


async def _unrecorded(name: str, request: Any, body: Callable[[], Any], **options: Any) -> Any:
    return await body()


def _turn_runner(framework: str) -> Any:
    """The adapter's own turn runner (private: a benchmark may look inside)."""
    if framework == "pydantic-ai":
        return PydanticTurns(pydantic_agent, None, {})
    return OpenAITurns(openai_agent, None, None, 100)


async def _turn_by_turn(runner: Any, text: str) -> Any:
    """The run as a durable session makes it, one framework run per model
    turn, with nothing recorded or committed."""
    ctx = _TurnContext({"prompt": text})
    while True:
        outcome = await runner.advance(ctx, _unrecorded, None)
        if isinstance(outcome, Finished):
            return outcome.output


def run_bare(framework: str, text: str, sessions: int, *, by_turn: bool = False) -> float:
    """CPU seconds of `sessions` bare runs of `text` in this process: whole
    runs, or (`by_turn`) one framework run per model turn as a durable
    session runs them."""
    if by_turn:
        runner = _turn_runner(framework)

        async def one(text: str) -> Any:
            return await _turn_by_turn(runner, text)
    else:
        one = _bare_pydantic if framework == "pydantic-ai" else _bare_openai

    async def all_of_them() -> None:
        for _ in range(sessions):
            await one(text)

    asyncio.run(one(text))  # warm: first-call imports and caches
    before = os.times()
    asyncio.run(all_of_them())
    after = os.times()
    return (after.user + after.system) - (before.user + before.system)


# -- durable -----------------------------------------------------------------------------


def run_durable(
    args: argparse.Namespace,
    services: Services,
    deployment: BenchDeployment,
    meter: CpuMeter,
    empty_query_commits: int,
    framework: str,
    text: str,
) -> tuple[dict[str, float], float, int, int, int]:
    """CPU seconds by group, wall seconds, commits, writes and recorded calls
    of one durable run."""
    pg_url = services.pg_url
    harness.reset_data(pg_url, services.redis_url, TRUNCATED)
    with harness.connect(pg_url) as conn:
        harness.settle(conn, TRUNCATED)
    settings = services.settings()
    let_statistics_flush()
    before = read_pg_counters(pg_url, ())
    xid_before = transaction_id(pg_url)
    own = 2  # the readings' own transactions
    with (
        harness.bench_client(settings, 4) as client,
        harness.connect(pg_url) as poller,
    ):
        cpu_before = GroupCpu.sample(meter, {"workers": deployment.pids})
        started = time.monotonic()
        inputs = [{"prompt": text}] * args.sessions
        harness.start_sessions(client, FRAMEWORKS[framework], inputs, 4)
        own += args.sessions * (1 + empty_query_commits)  # the pool's check + the insert
        own += harness.wait_sessions(
            poller,
            lambda c: c["completed"] >= args.sessions,
            what=f"{args.sessions} {framework} sessions to complete",
            timeout=args.timeout,
            alive=deployment.check_alive,
            interval=0.05,
        )
        elapsed = time.monotonic() - started
        cpu_after = GroupCpu.sample(meter, {"workers": deployment.pids})
        row = poller.execute(
            f"SELECT count(*) FROM tool_execution_cache {harness.BENCH_TAG}"
            " WHERE status = 'completed'"
        ).fetchone()
        recorded = int(row[0]) if row else 0
        own += 1
    xid_after = transaction_id(pg_url)
    let_statistics_flush()
    after = read_pg_counters(pg_url, ())
    # Only a transaction that writes takes a transaction id: the sessions'
    # inserts and the second reading are this process's own.
    writes = xid_after - xid_before - args.sessions - 1
    cpu = {
        name: seconds - cpu_before.seconds[name]
        for name, seconds in cpu_after.seconds.items()
        if not math.isnan(seconds)  # a remote server is not measured
    }
    return cpu, elapsed, after.xact_commit - before.xact_commit - own, writes, recorded


def transaction_id(pg_url: str) -> int:
    """The server's next transaction id (taking one: this reading writes)."""
    with harness.connect(pg_url) as conn:
        row = conn.execute("SELECT txid_current()").fetchone()
    assert row is not None
    return int(row[0])


# -- report ------------------------------------------------------------------------------


def fit(
    runs: dict[str, Run], tools: int, per_session: Callable[[Run], float]
) -> tuple[float, float, float] | None:
    """A per-session figure split into per session, per model turn and per
    tool call, from the three shapes (``single``: 1 turn; ``batched``: 2
    turns, T tools; ``turns``: T + 1 turns, T tools)."""
    if tools < 2 or set(runs) != set(SHAPES):
        return None
    c0, c1, c2 = (per_session(runs[s]) for s in SHAPES)
    turn = (c2 - c1) / (tools - 1)
    tool = (c1 - c0 - turn) / tools
    return c0 - turn, turn, tool


def report(args: argparse.Namespace, runs: list[Run], where: str) -> None:
    print()
    print("frameworks.py: what resumable adds to a framework agent, per recorded call")
    for line in context_lines(where):
        print(line)
    print(
        f"runs: {args.sessions} sessions per framework and shape, {args.tools} tool calls;"
        f" {args.workers} worker processes (async steps)"
    )
    print()
    header = (
        f"{'framework':<14}{'shape':<9}{'turns':>6}{'tools':>6}{'rec/s':>7}"
        f"{'bare ms/s':>10}{'turns ms/s':>11}{'dur ms/s':>10}{'added ms/rec':>13}"
        f"{'by turn':>8}{'commits/rec':>12}"
        f"{'writes/rec':>11}{'sess/s':>8}"
    )
    print(header)
    for run in runs:
        print(
            f"{run.framework:<14}{run.shape:<9}{run.turns:>6}{run.tools:>6}"
            f"{run.recorded / run.sessions:>7.0f}"
            f"{run.bare_cpu / run.sessions * 1e3:>10.2f}"
            f"{run.by_turn_cpu / run.sessions * 1e3:>11.2f}"
            f"{run.durable_total / run.sessions * 1e3:>10.2f}"
            f"{run.added_per_recorded * 1e3:>13.2f}"
            f"{run.by_turn_per_recorded * 1e3:>8.2f}"
            f"{run.commits_per_recorded:>12.2f}"
            f"{run.writes_per_recorded:>11.2f}"
            f"{run.sessions / run.elapsed:>8.0f}"
        )
    print(
        "  (rec/s: recorded calls per session; bare/turns/dur ms/s: CPU ms per session, bare"
        " framework / bare one run per model turn / durable, all processes;\n   by turn:"
        " of the added ms/rec, what running the framework turn by turn costs;\n"
        "   commits: pg_stat_database's, read-only ones included; writes: transactions"
        " that took a transaction id)"
    )
    print()
    print("durable CPU by process, ms per recorded call:")
    for run in runs:
        parts = ", ".join(
            f"{name} {seconds / run.recorded * 1e3:.2f}"
            for name, seconds in run.durable_cpu.items()
        )
        print(f"  {run.framework:<14}{run.shape:<9}{parts}")
    print()
    for framework in FRAMEWORKS:
        mine = [run for run in runs if run.framework == framework]
        if not mine:
            continue
        recorded = sum(run.recorded for run in mine)
        added = sum(run.durable_total - run.bare_cpu for run in mine) / recorded * 1e3
        commits = sum(run.commits for run in mine) / recorded
        writes = sum(run.writes for run in mine) / recorded
        by_turn = sum(run.by_turn_cpu - run.bare_cpu for run in mine) / recorded * 1e3
        print(
            f"{framework}: {recorded} recorded calls; per recorded call"
            f" {commits:.2f} commits, {writes:.2f} writes (target <= {TARGET_COMMITS:g}:"
            f" {verdict(writes <= TARGET_COMMITS)}),"
            f" {added:.2f} ms of CPU added (target <= {TARGET_CPU_MS:g} ms:"
            f" {verdict(added <= TARGET_CPU_MS)});\n  of which running the framework one run"
            f" per model turn {by_turn:.2f} ms, resumable's records, commits and steps"
            f" {added - by_turn:.2f} ms"
        )
        by_shape = {run.shape: run for run in mine}
        split = fit(by_shape, args.tools, lambda run: run.added_per_session)
        if split is not None:
            session, turn, tool = (value * 1e3 for value in split)
            print(
                f"  CPU split: {session:.2f} ms per session, {turn:.2f} ms per model turn,"
                f" {tool:.2f} ms per tool call"
            )
        split = fit(by_shape, args.tools, lambda run: run.writes / run.sessions)
        if split is not None:
            session, turn, tool = split
            print(
                f"  writes split: {session:.2f} per session, {turn:.2f} per model turn,"
                f" {tool:.2f} per tool call"
            )


# -- main --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = bench_parser(__doc__, home="bench-frameworks", timeout=600)
    parser.add_argument("--sessions", type=int, default=200, help="sessions per framework/shape")
    parser.add_argument("--tools", type=int, default=4, help="tool calls per session (T)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--warm-up",
        type=int,
        default=20,
        help="sessions of each framework run first, untimed (new workers' first sessions)",
    )
    parser.add_argument(
        "--frameworks",
        default=",".join(FRAMEWORKS),
        help="comma-separated: " + ", ".join(FRAMEWORKS),
    )
    args = parse(parser, argv, ("sessions", "tools", "workers"))
    if args.warm_up < 0:
        parser.error("--warm-up must be 0 or more")
    args.frameworks = [name.strip() for name in args.frameworks.split(",") if name.strip()]
    unknown = set(args.frameworks) - set(FRAMEWORKS)
    if unknown:
        parser.error(f"unknown framework(s): {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with harness.bench_services(args.home) as services:
        empty_query_commits = calibrate_empty_query(services.pg_url)
        meter = CpuMeter.find(services.pg_url, services.redis_url)
        log_dir = harness.log_dir_for(args.home)
        env = harness.worker_env(8, RESUMABLE_MAX_INFLIGHT="200")
        runs: list[Run] = []
        with BenchDeployment(services, log_dir, env) as deployment:
            deployment.start_workers(args.workers, AGENT_MODULE)
            if args.warm_up:
                # New workers' first sessions import, connect and prepare: not measured.
                warm = argparse.Namespace(**{**vars(args), "sessions": args.warm_up})
                for framework in args.frameworks:
                    print(f"{framework}: {args.warm_up} warm-up sessions", flush=True)
                    run_durable(
                        warm, services, deployment, meter, empty_query_commits, framework,
                        prompt("turns", args.tools),
                    )  # fmt: skip
            for framework in args.frameworks:
                for shape in SHAPES:
                    text = prompt(shape, args.tools)
                    turns, tools = counts(shape, args.tools)
                    print(f"{framework} {shape}: bare", flush=True)
                    bare = run_bare(framework, text, args.sessions)
                    print(f"{framework} {shape}: bare, turn by turn", flush=True)
                    by_turn = run_bare(framework, text, args.sessions, by_turn=True)
                    print(f"{framework} {shape}: durable (logs in {log_dir})", flush=True)
                    cpu, elapsed, commits, writes, recorded = run_durable(
                        args, services, deployment, meter, empty_query_commits, framework, text
                    )
                    expected = args.sessions * (turns + tools)
                    if recorded != expected:
                        raise RuntimeError(f"expected {expected} recorded calls, got {recorded}")
                    runs.append(
                        Run(framework, shape, args.sessions, bare, by_turn, cpu, elapsed,
                            commits, writes, recorded, turns, tools)
                    )  # fmt: skip
        harness.reset_data(services.pg_url, services.redis_url, TRUNCATED)
        report(args, runs, services.where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
