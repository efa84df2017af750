"""`resumable demo`: the product telling its own story, end to end.

A refund agent runs on a real worker process against the configured (or
embedded) PostgreSQL and Redis. The demo SIGKILLs the worker in the middle of
the refund step, after the payment API was called; a second worker recovers
the session from its last checkpoint, the refund call is answered from the
tool cache, and the demo proves the card was refunded exactly once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from resumable.client import Client
from resumable.embedded import service_urls
from resumable.models import migrate
from resumable.models.database import Database
from resumable.models.tables import AuditEventRow
from resumable.queue.broker import build_broker
from resumable.reconcile import reconcile
from resumable.settings import Settings

from .payments import FakeShop

_WORKER_ENV = {
    "RESUMABLE_LEASE_SECONDS": "2",
    "RESUMABLE_HEARTBEAT_TIMEOUT_MS": "3000",
    "RESUMABLE_WORKER_THREADS": "2",
}


def _spawn_worker(database_url: str, redis_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **_WORKER_ENV, "DATABASE_URL": database_url, "REDIS_URL": redis_url}
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "resumable.cli", "worker", "--agents", "resumable.demo.agent"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    _wait(lambda: "worker started" in log.read_text(), 30, "the worker to start")
    return proc


def _wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _timeline(events: list[AuditEventRow]) -> Table:
    table = Table("time", "seq", "step", "event", "detail", title="timeline")
    t0 = events[0].created_at
    for event in events:
        detail = ""
        if event.event_type == "step_completed":
            calls = event.payload.get("tool_calls", 0)
            replayed = event.payload.get("tool_calls_replayed", 0)
            detail = f"tool calls: {calls} made, {replayed} from cache"
        elif event.event_type in {"run_started", "lease_recovered"}:
            detail = f"worker {event.payload.get('worker')}"
        table.add_row(
            f"+{(event.created_at - t0).total_seconds():.3f}s",
            "" if event.seq is None else str(event.seq),
            event.step or "",
            event.event_type,
            detail,
        )
    return table


def run_demo(settings: Settings, console: Console) -> int:
    """Run the demo; return the exit status (0 when every claim was verified)."""
    started = time.monotonic()
    console.rule("[bold]resumable demo: a refund that survives a crash")
    with service_urls(settings.database_url, settings.redis_url, settings.home_dir) as urls:
        where = "embedded servers" if not settings.database_url else "configured servers"
        console.print(f"PostgreSQL and Redis: {where}")
        migrate.upgrade(urls.database_url)
        db = Database(urls.database_url, pool_size=2)
        broker = build_broker(settings, urls.redis_url)
        client = Client(settings, db, broker)
        workers: list[subprocess.Popen[bytes]] = []
        stop = threading.Event()
        with tempfile.TemporaryDirectory(prefix="resumable-demo-") as tmp, FakeShop() as shop:
            gate = Path(tmp)
            log = gate / "workers.log"
            try:
                workers.append(_spawn_worker(urls.database_url, urls.redis_url, log))
                console.print(f"worker 1 started (pid {workers[0].pid})")
                (gate / "hold").touch()
                session_id = client.start(
                    "demo-refund",
                    {"order_id": "ord_1001", "api": shop.url, "gate_dir": str(gate)},
                    idempotency_key=f"demo-{time.time_ns()}",
                )
                console.print(f"session {session_id} enqueued")
                _wait((gate / "refund-issued").exists, 30, "the refund step")
                console.print(
                    "[yellow]refund API called; killing worker 1 with SIGKILL mid-step[/yellow]"
                )
                workers[0].kill()
                workers[0].wait()
                (gate / "hold").unlink()

                # The scheduler's reconciler notices the expired lease and re-enqueues.
                def reconcile_loop() -> None:
                    while not stop.wait(0.25):
                        reconcile(settings, db, broker, grace_seconds=5)

                threading.Thread(target=reconcile_loop, daemon=True).start()
                workers.append(_spawn_worker(urls.database_url, urls.redis_url, log))
                console.print(f"worker 2 started (pid {workers[1].pid}); waiting for recovery")
                _wait(
                    lambda: client.get(session_id).status in {"completed", "failed"},
                    45,
                    "the session to finish",
                )
            finally:
                stop.set()
                for proc in workers:
                    if proc.poll() is None:
                        proc.terminate()
                        proc.wait(timeout=30)

            session = client.get(session_id)
            events = client.events(session_id)
            console.print(_timeline(events))
            refunds_issued = len(shop.refunds)
            refund_requests = sum(shop.requests.values())
            recovered = any(e.event_type == "lease_recovered" for e in events)
            checks = {
                "session completed": session.status == "completed",
                "worker crash recovered from the checkpoint": recovered,
                f"card refunded exactly once (refunds issued: {refunds_issued})": refunds_issued
                == 1,
                f"refund API called once (requests: {refund_requests})": refund_requests == 1,
            }
        db.close()
        broker.close()
    for claim, ok in checks.items():
        console.print(f"{'[green]✔' if ok else '[red]✘'} {claim}[/]")
    console.print(f"done in {time.monotonic() - started:.1f} s")
    return 0 if all(checks.values()) else 1
