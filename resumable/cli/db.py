"""``resumable db``: the schema."""

from __future__ import annotations

import click

from resumable._internal.embedded import service_urls
from resumable._internal.reachability import probe_database
from resumable.cli.failures import ErrorGroup, console
from resumable.errors import ConfigurationError
from resumable.models import migrate
from resumable.settings import Settings


@click.group(cls=ErrorGroup)
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
@click.pass_obj
def db_upgrade(settings: Settings, revision: str) -> None:
    """Apply migrations (safe to run from several processes at once)."""
    with service_urls(settings.database_url, settings.redis_url, settings.home_dir) as urls:
        probe_database(urls.database_url, "DATABASE_URL")
        current = migrate.current_revision(urls.database_url)
        newer = migrate.unknown_revision(current) if current is not None else None
        if newer:
            raise ConfigurationError(newer)
        migrate.upgrade(urls.database_url, revision)
        console.print(f"schema at {migrate.current_revision(urls.database_url)}")
