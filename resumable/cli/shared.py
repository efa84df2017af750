"""``resumable shared``: read a shared document and its history (what the
steps that wrote it committed, newest first)."""

from __future__ import annotations

import json

import click

from resumable.cli.failures import ErrorGroup
from resumable.cli.support import connected
from resumable.coordination.shared import MAX_PAGE, MAX_VERSION, CoordinationError
from resumable.settings import Settings


@click.group(cls=ErrorGroup)
def shared() -> None:
    """Shared documents that sessions update atomically."""


@shared.command("show")
@click.argument("name")
@click.pass_obj
def shared_show(settings: Settings, name: str) -> None:
    """The document NAME as committed now, as JSON (exit 1 if never written)."""
    with connected(settings) as c:
        document = c.client.shared(name)
    if document is None:
        raise CoordinationError(f"no shared document {name!r} has been written")
    click.echo(document.model_dump_json(indent=2))


@shared.command("history")
@click.argument("name")
@click.option("--limit", type=click.IntRange(1, MAX_PAGE), default=20, show_default=True)
@click.option(
    "--before",
    type=click.IntRange(1, MAX_VERSION),
    default=None,
    help="Versions below this one.",
)
@click.pass_obj
def shared_history(settings: Settings, name: str, limit: int, before: int | None) -> None:
    """Committed values of NAME, newest first, each with the session and step
    that wrote it, as JSON lines."""
    with connected(settings) as c:
        versions = c.client.shared_history(name, limit=limit, before=before)
    for version in versions:
        click.echo(json.dumps(version.model_dump(mode="json")))
