"""What the ``resumable`` commands that use the servers share: connecting and
importing agent code (how they fail is :mod:`resumable.cli.failures`).

A one-shot command checks that its servers answer before it changes anything
(a short probe instead of the pool's 30 s wait), so a wrong URL fails in
seconds and names the setting. What is left to the error handler is a driver
error in the middle of a command, shown as one line too; anything else is a
bug and says how to get its traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg

from resumable._internal.embedded import ServiceURLs, service_urls
from resumable._internal.reachability import (
    probe_database,
    refused,
)
from resumable.agent import AgentRegistry
from resumable.client import Client
from resumable.errors import (
    ConfigurationError,
)
from resumable.models.database import Database
from resumable.settings import Settings

if TYPE_CHECKING:
    import dramatiq


@dataclass
class Connected:
    settings: Settings
    database_url: str
    redis_url: str
    db: Database
    client: Client


@contextlib.contextmanager
def connected(
    settings: Settings, registry: AgentRegistry | None = None, *, broker: bool = False
) -> Iterator[Connected]:
    """The servers of a one-shot command, checked first. `broker=True` for a
    command that sends queue messages: Redis is checked too, so a command that
    could not enqueue changes nothing."""
    with service_urls(settings.database_url, settings.redis_url, settings.home_dir) as urls:
        check_servers(settings, urls, broker=broker)
        db = Database(
            urls.database_url,
            pool_size=2,
            prepared_statements=settings.db_prepared_statements,
        )
        built: list[dramatiq.Broker] = []

        def make_broker() -> dramatiq.Broker:
            """Only a command that sends pays for the broker's libraries."""
            from resumable.broker.choice import build_broker

            built.append(build_broker(settings, urls.redis_url))
            return built[-1]

        try:
            yield Connected(
                settings,
                urls.database_url,
                urls.redis_url,
                db,
                Client(settings, db, registry=registry, make_broker=make_broker),
            )
        finally:
            for queue in built:
                queue.close()
            db.close()


def check_servers(
    settings: Settings, urls: ServiceURLs, *, broker: bool, migrate_embedded: bool = True
) -> None:
    """Fail fast, naming the setting, if a server does not answer; bring the
    embedded database's schema up to date (as ``dev`` does) or say how to."""
    configured = settings.database_url is not None
    probe_database(urls.database_url, "DATABASE_URL" if configured else "the embedded server")
    if broker:
        from resumable.broker.choice import broker_probe

        broker_probe(settings, urls.redis_url)[2]()
    if not configured:
        if migrate_embedded:
            from resumable.models import migrate

            migrate.upgrade(urls.database_url)
        return
    from resumable._internal.database_urls import libpq_url
    from resumable.models.migrate import schema_problem

    with psycopg.connect(libpq_url(urls.database_url)) as conn:
        problem = schema_problem(conn)
    if problem:
        raise ConfigurationError(problem)


def load_agents(modules: Iterable[str]) -> AgentRegistry:
    """Import agent modules the way ``python -m`` (and so ``resumable dev``)
    would: from the working directory first, so ``resumable worker --agents
    mymodule`` works next to ``mymodule.py`` whichever way it was started."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    return AgentRegistry.from_modules(modules)


def optional_agents(modules: Iterable[str]) -> AgentRegistry | None:
    listed = list(modules)
    return load_agents(listed) if listed else None


@contextlib.contextmanager
def process_urls(settings: Settings, *, check: bool = False) -> Iterator[ServiceURLs]:
    """URLs for a long-running process (worker, web, scheduler). On the
    embedded database it also brings the schema up to date, since there is no
    release phase to do it (safe when several processes start at once).

    `check=True` (the worker, which can do nothing without both servers)
    fails at once, naming the setting, if either does not answer or the
    schema is missing. The web process starts anyway and answers 503 on
    ``/readyz``; the scheduler starts anyway and reports the outage. A
    database that answers without the schema, or refuses the connection
    for good (no such database or role, a wrong password: see
    ``reachability.refusal``), fails them all in one line: no retry fixes
    that, the setting or `resumable db upgrade` does."""
    with service_urls(settings.database_url, settings.redis_url, settings.home_dir) as urls:
        if not settings.database_url:
            from resumable.models import migrate

            migrate.upgrade(urls.database_url)
        if check:
            check_servers(settings, urls, broker=True, migrate_embedded=False)
        else:
            setting = "DATABASE_URL" if settings.database_url else "the embedded server"
            _require_schema_if_reachable(urls.database_url, setting)
        yield urls


def _require_schema_if_reachable(database_url: str, setting: str) -> None:
    from resumable._internal.database_urls import libpq_url
    from resumable.models.migrate import schema_problem

    try:
        with psycopg.connect(libpq_url(database_url), connect_timeout=2) as conn:
            problem = schema_problem(conn)
    except psycopg.Error as exc:
        refusal = refused(exc, database_url, setting)
        if refusal is not None:
            raise refusal from exc
        return  # unreachable: an outage the process reports and rides out
    if problem:
        raise ConfigurationError(problem)
