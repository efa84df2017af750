"""`resumable demo`: the product telling its own story, end to end, in under a minute.

A refund agent (``agent.py``) runs on real ``resumable worker`` processes,
with a real ``resumable web`` receiving its approval and a real ``resumable
scheduler`` polling and reconciling, against the configured PostgreSQL and
Redis (or the embedded ones). The agent looks up an order, suspends until a
human approves through a signed webhook (delivered twice, as real senders
do), issues the refund, and polls until it settles. The demo SIGKILLs the
worker in the middle of the refund step; a new worker recovers the session
from its checkpoint. Then it prints the timeline and proves, from the
database and from what the fake payment API received, that the card was
refunded exactly once.

Modules: ``story.py`` (the acts), ``proof.py`` (the claims), ``timeline.py``,
``shop.py`` (the fake order and payment APIs), ``webhook_sender.py``,
``preflight.py``, ``gate.py`` (where the worker is killed), ``deadline.py``.
The processes are spawned and stopped, and stop signals caught, the way
``resumable dev`` does it (``resumable/dev/processes.py``, ``signals.py``).
"""

from __future__ import annotations

import logging
import secrets
import tempfile
import time
from pathlib import Path

from rich.console import Console

from resumable._internal.embedded import ServiceURLs, service_urls
from resumable._internal.reachability import rabbitmq_location
from resumable.broker.choice import build_broker
from resumable.client import Client
from resumable.demo import preflight, proof, timeline
from resumable.demo.deadline import Deadline, DemoError
from resumable.demo.shop import FakeShop
from resumable.demo.story import Story
from resumable.demo.webhook_sender import WebhookSender, new_secret
from resumable.dev.processes import Deployment, ProcessExitedError, free_port
from resumable.dev.signals import StoppedBySignalError, StopRequests
from resumable.models import migrate
from resumable.models.database import Database
from resumable.settings import Settings

__all__ = ["run_demo"]

# Its own queue, so demo workers never take messages meant for other workers
# sharing the same Redis (and other workers never take the demo's).
DEMO_QUEUE = "resumable-demo"
# Short leases and a fast scheduler so a crash is recovered in seconds.
_PROCESS_ENV = {
    "RESUMABLE_QUEUE_NAME": DEMO_QUEUE,
    "RESUMABLE_LEASE_SECONDS": "2",
    "RESUMABLE_HEARTBEAT_TIMEOUT_MS": "3000",
    "RESUMABLE_SCHEDULER_INTERVAL_SECONDS": "0.25",
    "RESUMABLE_RECONCILE_GRACE_SECONDS": "5",
}
_BUDGET_SECONDS = 55.0


def run_demo(settings: Settings, console: Console) -> int:
    """Run the demo; return the exit status (0 only when every claim holds)."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request
    started = time.monotonic()
    console.rule("[bold]resumable demo: a refund agent that survives a crash")
    with StopRequests(interruptible=False) as stop:
        clock = Deadline(_BUDGET_SECONDS, interrupted=stop.check)
        try:
            with service_urls(settings.database_url, settings.redis_url, settings.home_dir) as urls:
                stop.check()
                console.print(_servers_line(settings), highlight=False)
                return _run(settings, urls, console, clock, started)
        except StoppedBySignalError as exc:
            console.print(f"[red]demo {exc}[/]; its processes are stopped", highlight=False)
            return 128 + exc.signum


def _servers_line(settings: Settings) -> str:
    """Which servers the demo runs on (never a password)."""
    where = "configured" if settings.database_url else "embedded"
    if settings.broker_url is None:
        return f"PostgreSQL and Redis: {where} servers"
    broker = rabbitmq_location(settings.broker_url)
    return f"PostgreSQL: {where} server; broker: RabbitMQ at {broker} (RESUMABLE_BROKER_URL)"


def _run(
    settings: Settings, urls: ServiceURLs, console: Console, clock: Deadline, started: float
) -> int:
    migrate.upgrade(urls.database_url)
    web_port, api_token, secret = free_port(), secrets.token_urlsafe(24), new_secret()
    public_url = f"http://127.0.0.1:{web_port}"
    demo_settings = settings.model_copy(update={"queue_name": DEMO_QUEUE, "public_url": public_url})
    db = Database(
        urls.database_url, pool_size=2, prepared_statements=settings.db_prepared_statements
    )
    broker = build_broker(demo_settings, urls.redis_url)
    client = Client(demo_settings, db, broker)
    env = {
        **_PROCESS_ENV,
        "DATABASE_URL": urls.database_url,
        "REDIS_URL": urls.redis_url,
        "RESUMABLE_HOME": str(settings.home_dir),
        "RESUMABLE_PUBLIC_URL": public_url,
        "RESUMABLE_API_TOKENS": api_token,
        "RESUMABLE_WEBHOOK_SECRET": secret,
    }
    story: Story | None = None
    claims: list[proof.Claim] = []
    try:
        with (
            tempfile.TemporaryDirectory(prefix="resumable-demo-") as tmp,
            FakeShop() as shop,
            Deployment(env, Path(tmp)) as deployment,
        ):
            stale = preflight.claim_database(db, client)
            if stale:
                console.print(f"cancelled {stale} unfinished session(s) of an earlier demo")
            story = Story(
                console=console,
                client=client,
                db=db,
                shop=shop,
                deployment=deployment,
                clock=clock,
                gate_dir=Path(tmp),
                web_port=web_port,
                api_token=api_token,
                sender=WebhookSender(secret),
            )
            try:
                story.tell()
            except (DemoError, ProcessExitedError) as exc:
                console.print(f"[red]demo failed:[/] {exc}", highlight=False)
                console.print(deployment.logs(), markup=False, highlight=False)
        if story is not None and story.seen.session_id is not None:
            events = client.events(story.seen.session_id)
            rows = timeline.describe_all(events, story.seen.workers)
            rows += story.seen.notes + [timeline.from_shop(e) for e in shop.ledger.events]
            console.print(timeline.render(rows, "timeline"))
            claims = proof.check(
                story.seen, client, db, shop.ledger, events, time.monotonic() - started
            )
            proof.show(console, claims)
    except DemoError as exc:
        console.print(f"[red]demo failed:[/] {exc}", highlight=False)
    finally:
        broker.close()
        db.close()
    ok = bool(claims) and all(c.holds for c in claims)
    console.print(
        f"[bold {'green' if ok else 'red'}]{'every claim holds' if ok else 'DEMO FAILED'}[/] "
        f"in {time.monotonic() - started:.1f} s",
        highlight=False,
    )
    return 0 if ok else 1
