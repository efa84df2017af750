"""What every ``resumable`` command shares: connecting, and turning the
package's errors into a one-line message and a non-zero exit."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

import click
from rich.console import Console

from resumable.agent import AgentRegistry
from resumable.client import Client
from resumable.embedded import ServiceURLs, service_urls
from resumable.errors import ResumableError
from resumable.models.database import Database
from resumable.queue.broker import build_broker
from resumable.settings import Settings

console = Console()


@dataclass
class Connected:
    settings: Settings
    database_url: str
    redis_url: str
    db: Database
    client: Client


@contextlib.contextmanager
def connected(settings: Settings, registry: AgentRegistry | None = None) -> Iterator[Connected]:
    with service_urls(settings.database_url, settings.redis_url, settings.home_dir) as urls:
        db = Database(urls.database_url, pool_size=2)
        broker = build_broker(settings, urls.redis_url)
        try:
            yield Connected(
                settings,
                urls.database_url,
                urls.redis_url,
                db,
                Client(settings, db, broker, registry),
            )
        finally:
            broker.close()
            db.close()


def fail(message: str) -> NoReturn:
    console.print(f"[red]error:[/red] {message}", highlight=False)
    sys.exit(1)


class ErrorGroup(click.Group):
    """Turns the package's errors into a one-line message and exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ResumableError as exc:
            fail(f"{exc.message} [{exc.code}]")


@contextlib.contextmanager
def process_urls(settings: Settings) -> Iterator[ServiceURLs]:
    """URLs for a long-running process (worker, web, scheduler). On the
    embedded database it also brings the schema up to date, since there is no
    release phase to do it (safe when several processes start at once)."""
    with service_urls(settings.database_url, settings.redis_url, settings.home_dir) as urls:
        if not settings.database_url:
            from resumable.models import migrate

            migrate.upgrade(urls.database_url)
        yield urls
