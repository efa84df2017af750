"""The multi-host harness: the fault matrix's workload on six hosts, through
network partitions, the invariants checked from outside.

Run from the repository root, as root (CI runs ``--short``)::

    .venv/bin/python -m tests.multihost [--short] [--only worker_cut,short_cut]
                                        [--broker rabbitmq]

Each host is a network namespace this run makes and removes (``network.py``,
``hosts.py``): a database host (PostgreSQL on 10.251.0.1), a broker host
(valkey on 10.251.0.2), two worker hosts (a worker of one process, a worker
of two), a web host and a scheduler host. This process is the outside world:
the ledger the agents write their effects to, the system that POSTs
callbacks, the client starting sessions and the observer.

The phases (``partitions.py``), each a batch of the fault matrix's sessions
through one partition (a link taken down, then brought back up):

- ``baseline``: no partition;
- ``worker_cut``: worker host 1 cut from PostgreSQL and the broker while it
  holds leases, longer than a lease: worker host 2 takes over; back on the
  network, the cut-off worker's writes are refused by the fence, it logs the
  loss once and goes on consuming;
- ``worker_broker_cut``: worker host 1 cut from the broker only;
- ``web_broker_cut``: the web host cut from the broker: callbacks are still
  stored and answered, and their sessions resume after;
- ``scheduler_cut``: the scheduler host cut off;
- ``short_cut``: worker host 1 cut for a quarter of a lease: no takeover,
  no call repeated.

With ``--broker rabbitmq`` the broker host also runs a RabbitMQ node
(``resumable/dev/disposable_rabbitmq.py``, inside its namespace on its
address) and every process sends and takes the messages through it; the
cuts to the broker host cut both servers.

After each: no session lost, no effect under two idempotency keys, gapless
checkpoints, every process consuming (as the fault matrix checks), and what
the partition must show. Exit status 1 if anything fails. Whatever happens
(a failure, Ctrl-C, SIGTERM), the processes are stopped and the namespaces
and links removed; a run that was SIGKILLed leaves them, and the next run
removes them first.
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
    broker_named,
    log_dir_for,
    reset_data,
    stopped_like_ctrl_c,
)
from resumable._internal.database_urls import libpq_url
from resumable.models import migrate
from tests.faults.__main__ import (
    SECRET,
    add_workload_arguments,
    deployment_env,
    report,
    run_phases,
)
from tests.faults.callbacks import CallbackSender
from tests.faults.fleet import Fleet, Place
from tests.faults.ledger import Ledger
from tests.faults.matrix import PhaseResult
from tests.multihost.hosts import (
    BROKER,
    DB,
    HOSTS,
    LINKS,
    SCHEDULER,
    WEB,
    WORKER_1,
    WORKER_2,
    HostDeployment,
    serve_outside,
)
from tests.multihost.network import Network
from tests.multihost.partitions import PARTITIONS, Partitions
from tests.multihost.servers import BrokerHost, RabbitMQHost, database_host
from tests.tables import RUNTIME_TABLES


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.multihost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--short", action="store_true", help="CI's form: smaller batches")
    parser.add_argument("--only", default="", help=f"comma-separated, of: {', '.join(PARTITIONS)}")
    add_workload_arguments(parser, lease=3.0)
    parser.add_argument("--home", type=Path, default=ROOT / ".resumable" / "multihost")
    parser.add_argument(
        "--broker",
        choices=["redis", "rabbitmq"],
        default="redis",
        help="what the broker host runs to carry the messages: valkey, or RabbitMQ beside it",
    )
    args = parser.parse_args(argv)
    args.sessions = args.sessions or (10 if args.short else 30)
    wanted = [name for name in args.only.split(",") if name] or PARTITIONS
    if args.short and not args.only:
        wanted.remove("baseline")  # every partition runs the same workload
    unknown = [name for name in wanted if name not in PARTITIONS]
    if unknown:
        parser.error(f"unknown partition(s) {', '.join(unknown)}; known: {', '.join(PARTITIONS)}")
    args.partitions = wanted
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("tests.multihost makes network namespaces: run it as root")
        return 1
    started = time.monotonic()
    args.home.mkdir(parents=True, exist_ok=True)
    try:
        results = build_and_run(args)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: everything is stopped and removed
        print(
            f"\nINTERRUPTED after {time.monotonic() - started:.0f} s; hosts and processes removed"
        )
        return 130
    ok = report(results)
    print(
        f"\n{'OK' if ok else 'FAILED'}: {len(results)} partitions"
        f" in {time.monotonic() - started:.0f} s"
    )
    return 0 if ok else 1


def build_and_run(args: argparse.Namespace) -> list[PhaseResult]:
    """The hosts, their servers and the phases; all removed on the way out."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(stopped_like_ctrl_c())
        network = stack.enter_context(Network(HOSTS, LINKS))
        database_url = stack.enter_context(database_host(DB, args.home / "postgres"))
        broker = stack.enter_context(BrokerHost(BROKER, args.home / "valkey"))
        where = f"PostgreSQL on {DB.name} ({DB.address}), valkey on {BROKER.name} ({broker.url})"
        if args.broker == "rabbitmq":
            rabbitmq = stack.enter_context(RabbitMQHost(BROKER, args.home / "rabbitmq"))
            # Every process and the client inherit it (``deployment_env`` too).
            stack.enter_context(broker_named(rabbitmq.url))
            where += f", RabbitMQ beside it ({rabbitmq.url}) carrying the messages"
        migrate.upgrade(database_url)
        pg_url = libpq_url(database_url)
        reset_data(pg_url, broker.url, RUNTIME_TABLES)
        print(f"  {len(HOSTS)} hosts, {len(LINKS)} links; {where}")
        services = Services(database_url, broker.url, pg_url, where, False, args.home)
        return run(args, services, broker, network)


def run(
    args: argparse.Namespace, services: Services, broker: BrokerHost, network: Network
) -> list[PhaseResult]:
    log_dir = log_dir_for(args.home)
    print(f"  logs in {log_dir}/<host>")
    env = deployment_env(args, services.database_url, broker.url)
    ledger = Ledger()
    serve_outside(ledger)
    with (
        ledger,
        contextlib.ExitStack() as stack,
        bench_client(services.settings(), pool_size=4) as client,
    ):
        places = {
            host.name: Place(
                stack.enter_context(HostDeployment(host, env, log_dir, cwd=ROOT, grace_seconds=60)),
                host.address,
            )
            for host in (WORKER_1, WORKER_2, WEB, SCHEDULER)
        }
        fleet = Fleet(
            places[WORKER_1.name].deployment,
            args.threads,
            web_at=places[WEB.name],
            scheduler_at=places[SCHEDULER.name],
        )
        for place in places.values():
            place.deployment.env["RESUMABLE_PUBLIC_URL"] = fleet.web_url
        fleet.start_web()
        fleet.start_scheduler()
        fleet.add_worker(1, places[WORKER_1.name])
        fleet.add_worker(2, places[WORKER_2.name])
        sender = CallbackSender(services.pg_url, fleet.web_url, SECRET)
        sender.start()
        matrix = Partitions(args, services, broker, fleet, client, ledger, network, sender)
        try:
            results = run_phases(matrix, args.partitions)
        finally:
            sender.stop()
        print(f"  stale lock writes refused by the ledger: {ledger.stale_refused}")
        print(f"  callbacks sent {len(sender.sent)}, failed sends retried {sender.failures}")
    return results


if __name__ == "__main__":
    sys.exit(main())
