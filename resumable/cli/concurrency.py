"""``resumable concurrency``: the concurrency keys with sessions running in
their slots or waiting for one (``resumable/limits.py``)."""

from __future__ import annotations

import json

import click

from resumable.cli.failures import console
from resumable.cli.support import connected
from resumable.cli.tables import fitted
from resumable.services.narration import duration
from resumable.settings import Settings


@click.command()
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="The keys as JSON objects.")
@click.pass_obj
def concurrency(settings: Settings, limit: int, as_json: bool) -> None:
    """Concurrency keys: how many sessions of each run in its slots and how
    many wait for a free one, the longest lines first."""
    with connected(settings) as c:
        keys = c.client.concurrency_keys(limit=limit)
    if as_json:
        click.echo(json.dumps({"items": [key.model_dump(mode="json") for key in keys]}))
        return
    if not keys:
        console.print("No session runs in a concurrency slot or waits for one.")
        return
    cells = [
        [
            key.key,
            "" if key.limit is None else str(key.limit),
            str(key.running),
            str(key.waiting),
            "" if key.oldest_wait_seconds is None else duration(key.oldest_wait_seconds),
        ]
        for key in keys
    ]
    headers = ["key", "limit", "running", "waiting", "longest wait"]
    console.print(fitted(headers, cells, flexible="key", wrap=True))
