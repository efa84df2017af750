"""``resumable services``: the embedded PostgreSQL and Valkey servers."""

from __future__ import annotations

import click

from resumable._internal.embedded import EmbeddedServices, reap_orphans
from resumable.cli.failures import ErrorGroup, console
from resumable.errors import EmbeddedServiceError
from resumable.settings import Settings


@click.group(cls=ErrorGroup)
def services() -> None:
    """The embedded PostgreSQL and Valkey servers (used when the URLs are unset)."""


@services.command("status")
@click.pass_obj
def services_status(settings: Settings) -> None:
    pids = EmbeddedServices(settings.home_dir).running_pids()
    console.print(f"{settings.home_dir}: {'running ' + str(pids) if pids else 'stopped'}")


@services.command("stop")
@click.pass_obj
def services_stop(settings: Settings) -> None:
    """Stop this home's servers, and any left behind by killed processes."""
    try:
        EmbeddedServices(settings.home_dir).stop()
    except OSError as exc:  # a home that is a file, or not readable
        raise EmbeddedServiceError(
            f"RESUMABLE_HOME {settings.home_dir} cannot be used ({exc.strerror or exc})"
        ) from None
    reaped = reap_orphans()
    console.print(f"stopped {settings.home_dir}" + (f"; reaped {reaped}" if reaped else ""))
