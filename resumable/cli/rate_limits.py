"""``resumable rate-limits``: the rate limits in use, when each one's next
turn comes, and the sessions waiting for one (``resumable/limits.py``)."""

from __future__ import annotations

import json

import click

from resumable.cli.failures import console
from resumable.cli.support import connected
from resumable.cli.tables import fitted
from resumable.services.narration import duration
from resumable.settings import Settings


def _seconds(value: float) -> str:
    return "now" if value <= 0 else duration(value)


@click.command("rate-limits")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="The limits as JSON objects.")
@click.pass_obj
def rate_limits(settings: Settings, limit: int, as_json: bool) -> None:
    """Rate limits shared by the workers: what each allows, when its next
    turn comes, the calls the provider refused, and the sessions that let
    their worker go to wait for a turn, the longest lines first."""
    with connected(settings) as c:
        limits = c.client.rate_limits(limit=limit)
    if as_json:
        click.echo(json.dumps({"items": [item.model_dump(mode="json") for item in limits]}))
        return
    if not limits:
        console.print("No rate limit has been used in its last period, and no session waits.")
        return
    cells = [
        [
            item.name,
            item.description,
            _seconds(item.next_turn_in_seconds),
            f"{item.turns} ({item.waited_in_place} waited)",
            str(item.refused),
            str(item.sessions_waiting),
            "" if item.oldest_wait_seconds is None else duration(item.oldest_wait_seconds),
        ]
        for item in limits
    ]
    headers = ["limit", "allows", "next turn", "turns", "refused", "sessions waiting", "longest"]
    console.print(fitted(headers, cells, flexible="limit", wrap=True))
