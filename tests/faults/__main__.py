"""The fault matrix: one workload through every fault, the invariants checked from outside.

Run from the repository root (CI runs ``--short``)::

    .venv/bin/python -m tests.faults [--short] [--only kill_storm,redis_restart]
                                     [--broker rabbitmq]

A real deployment (a web process, a scheduler, a single-process worker and a
worker of two forked processes) runs on a PostgreSQL and a Redis of the
matrix's own: the embedded PostgreSQL under ``--home`` (or ``DATABASE_URL``)
and a valkey it can kill and start again (``resumable/dev/disposable_redis.py``).
For each fault, in turn, it starts a batch of sessions of the four agents of
``tests/faults/agents.py`` (sync steps with a durable timer and a signed
callback, the same steps async, a saga that fails and undoes its bookings,
fenced writes under a shared lock), waits until they are under way, injects
the fault, and waits for every session of the batch to finish:

- ``kill_storm``: SIGKILL a random worker process every ``--kill-every`` s
  (a child of the forked worker, which its parent replaces, or a whole
  worker, which the matrix replaces);
- ``zombie``: SIGSTOP a worker for 2.5 leases, then SIGCONT it (its late
  writes must be refused);
- ``redis_restart``: ``kill -9`` Redis, start it again 3 s later, empty;
- ``redis_flush``: FLUSHALL;
- ``postgres``: terminate every connection of the database, then restart
  PostgreSQL in immediate mode (a crash and its recovery; embedded only);
- ``web_kill``: SIGKILL the web process while callbacks arrive, start it again;
- ``rolling_sigterm``: SIGTERM each worker in turn and start its successor.

With ``--broker rabbitmq`` a RabbitMQ node of the matrix's own
(``resumable/dev/disposable_rabbitmq.py``) carries the messages, and Redis's
two faults become RabbitMQ's: ``rabbitmq_restart`` (``kill -9`` of the node,
started again 3 s later with what it had written to disk) and
``rabbitmq_lost_queues`` (every queue of the vhost deleted, messages and the
reconciler's marker with them).

Checked from outside after each fault: no session lost (each ends as its
agent must: completed, or failed with its saga undone), no logical call's
effect under two idempotency keys (the external ledger counts them), every
session's checkpoints gapless, and every process still doing its job: each
worker process answers its own ``/readyz`` and runs steps of a probe batch
(its step counter moves), the web answers ``/readyz`` and stores callbacks,
the scheduler wakes the probes' timers. Exit status 1 if anything fails.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

from benchmarks.harness import (
    ROOT,
    Services,
    bench_client,
    bench_services,
    log_dir_for,
    reset_data,
)
from benchmarks.harness.report import context_lines
from resumable.dev.disposable_rabbitmq import DisposableRabbitMQ
from resumable.dev.disposable_redis import DisposableRedis
from resumable.dev.processes import Deployment
from tests.faults.callbacks import CallbackSender
from tests.faults.fleet import Fleet
from tests.faults.ledger import Ledger
from tests.faults.matrix import FAULTS, RABBITMQ_FAULTS, Matrix, PhaseResult
from tests.tables import RUNTIME_TABLES

SECRET = "whsec_" + "ZmF1bHQtbWF0cml4LXNlY3JldC0wMTIzNDU2Nzg5YWI="
TOKEN = "fault-matrix-token-0123456789"


def report(results: list[PhaseResult]) -> bool:
    print(
        f"\n{'fault':<20} {'sessions':>8} {'in flight':>9} {'lost':>5} {'2 keys':>6}"
        f" {'gaps':>5} {'fault s':>8} {'done s':>7}  consuming after"
    )
    for r in results:
        consuming = "every process" if not r.not_consuming else "NO"
        print(
            f"{r.fault:<20} {r.sessions:>8} {r.in_flight_at_fault:>9} {len(r.lost):>5}"
            f" {r.two_keys:>6} {len(r.gaps):>5} {r.fault_seconds:>8.1f}"
            f" {r.recovered_seconds:>7.1f}  {consuming}"
        )
    ok = True
    for r in results:
        for line in r.lost[:5] + r.gaps[:5] + r.not_consuming[:5] + r.problems[:5]:
            print(f"  {r.fault}: {line}")
        ok = ok and r.ok
    return ok


def add_workload_arguments(parser: argparse.ArgumentParser, *, lease: float) -> None:
    """The options of the workload (``Matrix`` reads them), shared with ``tests.multihost``."""
    parser.add_argument("--sessions", type=int, default=None, help="sessions per fault")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--work-ms", type=float, default=150.0)
    parser.add_argument("--lease", type=float, default=lease)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per fault to finish")
    parser.add_argument("--seed", type=int, default=11)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.faults", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--short", action="store_true", help="CI's form: smaller batches")
    parser.add_argument(
        "--only", default="", help=f"comma-separated, of: {', '.join(FAULTS + RABBITMQ_FAULTS)}"
    )
    parser.add_argument(
        "--broker",
        choices=["redis", "rabbitmq"],
        default="redis",
        help="what carries the messages: a Redis of the matrix's own, or a RabbitMQ node"
        " of its own (rabbitmq-server must be installed); Redis's faults become RabbitMQ's",
    )
    add_workload_arguments(parser, lease=2.0)
    parser.add_argument("--kills", type=int, default=None)
    parser.add_argument("--kill-every", type=float, default=1.0)
    parser.add_argument("--home", type=Path, default=ROOT / ".resumable" / "faults")
    args = parser.parse_args(argv)
    args.sessions = args.sessions or (24 if args.short else 60)
    args.kills = args.kills or (4 if args.short else 12)
    known = RABBITMQ_FAULTS if args.broker == "rabbitmq" else FAULTS
    wanted = [name for name in args.only.split(",") if name] or known
    unknown = [name for name in wanted if name not in known]
    if unknown:
        parser.error(
            f"unknown fault(s) {', '.join(unknown)} with {args.broker}; known: {', '.join(known)}"
        )
    args.faults = wanted
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        own_redis = stack.enter_context(DisposableRedis(args.home / "valkey"))
        os.environ["REDIS_URL"] = own_redis.url  # the matrix's own, to kill and start again
        rabbitmq = None
        if args.broker == "rabbitmq":
            rabbitmq = stack.enter_context(DisposableRabbitMQ(args.home / "rabbitmq"))
            os.environ["RESUMABLE_BROKER_URL"] = rabbitmq.url
        services = stack.enter_context(bench_services(args.home))
        reset_data(services.pg_url, own_redis.url, RUNTIME_TABLES)
        for line in context_lines(services.where.replace("embedded Valkey", own_redis.url)):
            print(line)
        if rabbitmq is not None:
            print(f"  broker: RabbitMQ node {rabbitmq.node} at {rabbitmq.url}")
        results = run(args, services, own_redis, rabbitmq)
    ok = report(results)
    if not ok:
        # CI shows the end of the output: the processes' own last words go
        # just above the verdict (a RecursionError in the scheduler's log
        # was the whole story of one failed run, and nobody saw it).
        print_last_errors(log_dir_for(args.home))
    print(
        f"\n{'OK' if ok else 'FAILED'}: {len(results)} faults in {time.monotonic() - started:.0f} s"
    )
    return 0 if ok else 1


def print_last_errors(log_dir: Path, per_log: int = 4, width: int = 240) -> None:
    """The last ERROR, CRITICAL and Traceback-ending lines of each process's log."""
    print("\nthe last errors in each process's log:")
    for log in sorted(log_dir.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        picked = [
            line
            for index, line in enumerate(lines)
            if " ERROR " in line
            or " CRITICAL " in line
            # A traceback's last line names the exception.
            or (
                index > 0
                and lines[index - 1].startswith(" ")
                and line
                and not line.startswith((" ", "Traceback", "During handling"))
            )
        ]
        for line in picked[-per_log:]:
            print(f"  {log.name}: {line[:width]}")


def run(
    args: argparse.Namespace,
    services: Services,
    own_redis: DisposableRedis,
    rabbitmq: DisposableRabbitMQ | None = None,
) -> list[PhaseResult]:
    log_dir = log_dir_for(args.home)
    print(f"  logs in {log_dir}")
    env = deployment_env(args, services.database_url, own_redis.url)
    results: list[PhaseResult] = []
    with (
        Ledger() as ledger,
        Deployment(env, log_dir, cwd=ROOT, grace_seconds=60) as deployment,
        bench_client(services.settings(), pool_size=4) as client,
    ):
        fleet = Fleet(deployment, args.threads)
        deployment.env["RESUMABLE_PUBLIC_URL"] = fleet.web_url
        fleet.start_web()
        fleet.start_scheduler()
        fleet.add_worker(1)
        fleet.add_worker(2)
        sender = CallbackSender(services.pg_url, fleet.web_url, SECRET)
        sender.start()
        matrix = Matrix(args, services, own_redis, fleet, client, ledger, rabbitmq)
        try:
            results = run_phases(matrix, args.faults)
        finally:
            sender.stop()
        print(f"  stale lock writes refused by the ledger: {ledger.stale_refused}")
        print(f"  callbacks sent {len(sender.sent)}, failed sends retried {sender.failures}")
    return results


def deployment_env(args: argparse.Namespace, database_url: str, redis_url: str) -> dict[str, str]:
    """The environment of every process of the deployment: leases, heartbeats
    and the scheduler's pass short, so that a fault's effects (a takeover, a
    redelivery, a reconciled session) show within seconds, not minutes."""
    broker = os.environ.get("RESUMABLE_BROKER_URL")
    return {
        **({"RESUMABLE_BROKER_URL": broker} if broker else {}),
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "PYTHONPATH": str(ROOT),
        "RESUMABLE_LEASE_SECONDS": f"{args.lease:g}",
        "RESUMABLE_HEARTBEAT_TIMEOUT_MS": "3000",
        "RESUMABLE_MAINTENANCE_CHANCE": "200000",
        "RESUMABLE_WORKER_THREADS": str(args.threads),
        "RESUMABLE_WORKER_PREFETCH": str(args.threads),
        "RESUMABLE_SCHEDULER_INTERVAL_SECONDS": "0.25",
        "RESUMABLE_RECONCILE_GRACE_SECONDS": "2",
        "RESUMABLE_API_TOKENS": TOKEN,
        "RESUMABLE_WEBHOOK_SECRET": SECRET,
    }


def run_phases(matrix: Matrix, names: list[str]) -> list[PhaseResult]:
    """Each named fault (a method of `matrix`) in turn, a line after each."""
    results: list[PhaseResult] = []
    for name in names:
        print(f"  {name} ...", flush=True)
        result = matrix.run_phase(name, getattr(matrix, name))
        results.append(result)
        print(
            f"    {result.sessions} sessions, {len(result.lost)} lost,"
            f" {result.two_keys} under two keys, all done {result.recovered_seconds:.1f} s"
            f" after the fault; {'; '.join(result.notes[-3:])}",
            flush=True,
        )
    return results


if __name__ == "__main__":
    sys.exit(main())
