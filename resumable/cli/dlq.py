"""``resumable dlq``: the operator's dead-letter commands."""

from __future__ import annotations

import getpass
import json
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from resumable.cli.support import ErrorGroup, connected
from resumable.dead_letters import DeadLetterFilter, DeadLetters
from resumable.errors import ResumableError
from resumable.settings import Settings

console = Console()


def _actor(by: str | None) -> str:
    return by or f"cli:{getpass.getuser()}"


def _filters(
    agent: str | None,
    error_type: str | None,
    step: str | None,
    since: datetime | None,
    until: datetime | None,
    status: str | None = "open",
) -> DeadLetterFilter:
    return DeadLetterFilter(
        status=status, agent=agent, error_type=error_type, step=step, since=since, until=until
    )


def filter_options(func: Any) -> Any:
    for option in reversed(
        [
            click.option("--agent", default=None, help="Only this agent."),
            click.option("--error-type", default=None, help="Only this exception type."),
            click.option("--step", default=None, help="Only failures at this step."),
            click.option(
                "--since", type=click.DateTime(), default=None, help="Failed at or after."
            ),
            click.option("--until", type=click.DateTime(), default=None, help="Failed before."),
        ]
    ):
        func = option(func)
    return func


@click.group(cls=ErrorGroup)
def dlq() -> None:
    """Inspect and drain the dead-letter queue."""


@dlq.command("list")
@filter_options
@click.option(
    "--status",
    type=click.Choice(["open", "retried", "discarded", "all"]),
    default="open",
    show_default=True,
)
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--before", "before_id", type=int, default=None, help="Page: ids below this.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def dlq_list(
    settings: Settings,
    agent: str | None,
    error_type: str | None,
    step: str | None,
    since: datetime | None,
    until: datetime | None,
    status: str,
    limit: int,
    before_id: int | None,
    as_json: bool,
) -> None:
    """List dead letters, newest first."""
    where = _filters(agent, error_type, step, since, until, None if status == "all" else status)
    with connected(settings) as c:
        rows, next_before = DeadLetters(settings, c.db, c.client.broker).find(
            where, limit=limit, before_id=before_id
        )
    if as_json:
        click.echo(
            json.dumps(
                {
                    "dead_letters": [
                        r.model_dump(mode="json", exclude={"traceback"}) for r in rows
                    ],
                    "next_before": next_before,
                }
            )
        )
        return
    table = Table("id", "failed at", "agent", "step", "error", "attempts", "saga", "status")
    for r in rows:
        table.add_row(
            str(r.id), r.failed_at.strftime("%Y-%m-%d %H:%M:%S"), r.agent, r.step or "",
            f"{r.error_type}: {r.error_message[:60]}", str(r.attempts), r.compensation,
            r.status,
        )  # fmt: skip
    console.print(table)
    if next_before:
        console.print(f"more: --before {next_before}")


@dlq.command("show")
@click.argument("dead_letter_id", type=int)
@click.pass_obj
def dlq_show(settings: Settings, dead_letter_id: int) -> None:
    """One dead letter: error, traceback, last state, last events (JSON)."""
    with connected(settings) as c:
        shown = DeadLetters(settings, c.db, c.client.broker).show(dead_letter_id)
    click.echo(json.dumps(shown, indent=2))


@dlq.command("retry")
@click.argument("dead_letter_id", type=int)
@click.option("--patch", default=None, help="RFC 6902 JSON Patch applied to the state.")
@click.option("--reason", default=None, help="Why (kept in the audit log).")
@click.option("--by", default=None, help="Who (default: cli:<user>).")
@click.pass_obj
def dlq_retry(
    settings: Settings, dead_letter_id: int, patch: str | None, reason: str | None,
    by: str | None,
) -> None:  # fmt: skip
    """Resume a dead-lettered session from its latest checkpoint."""
    state_patch = None
    if patch is not None:
        try:
            state_patch = json.loads(patch)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"--patch is not valid JSON: {exc}") from None
        if not isinstance(state_patch, list):
            raise click.BadParameter("--patch must be a JSON array of operations")
    with connected(settings) as c:
        session_id = DeadLetters(settings, c.db, c.client.broker).retry(
            dead_letter_id, actor=_actor(by), reason=reason, state_patch=state_patch
        )
    console.print(f"retrying session {session_id}")


@dlq.command("discard")
@click.argument("dead_letter_id", type=int)
@click.option("--reason", required=True, help="Why (kept in the audit log).")
@click.option("--by", default=None, help="Who (default: cli:<user>).")
@click.pass_obj
def dlq_discard(settings: Settings, dead_letter_id: int, reason: str, by: str | None) -> None:
    """Close a dead letter without retrying it."""
    with connected(settings) as c:
        DeadLetters(settings, c.db, c.client.broker).discard(
            dead_letter_id, actor=_actor(by), reason=reason
        )
    console.print(f"discarded dead letter {dead_letter_id}")


@dlq.command("drain")
@filter_options
@click.option("--action", type=click.Choice(["retry", "discard"]), required=True)
@click.option("--dry-run", is_flag=True, help="List what would happen; change nothing.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@click.option("--rate", type=click.FloatRange(min=0.01), default=None, help="Max per second.")
@click.option("--reason", default=None, help="Why (required to discard).")
@click.option("--by", default=None, help="Who (default: cli:<user>).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def dlq_drain(
    settings: Settings,
    agent: str | None,
    error_type: str | None,
    step: str | None,
    since: datetime | None,
    until: datetime | None,
    action: str,
    dry_run: bool,
    limit: int,
    rate: float | None,
    reason: str | None,
    by: str | None,
    as_json: bool,
) -> None:
    """Retry or discard every open dead letter matching the filters."""
    where = _filters(agent, error_type, step, since, until)
    with connected(settings) as c, Progress(console=console, disable=as_json) as bar:
        task = bar.add_task(f"{action}", total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = DeadLetters(settings, c.db, c.client.broker).drain(
            action,  # type: ignore[arg-type]
            where,
            actor=_actor(by),
            reason=reason,
            dry_run=dry_run,
            limit=limit,
            rate=rate,
            progress=advance,
        )
    if as_json:
        click.echo(json.dumps(report.as_json()))
    elif dry_run:
        console.print(
            f"dry run: would {action} {len(report.matched)} dead letter(s): "
            f"{', '.join(map(str, report.matched)) or 'none'}"
        )
    else:
        console.print(f"{action}: {len(report.done)} done, {len(report.failed)} failed")
        for dead_letter_id, message in report.failed.items():
            console.print(f"  {dead_letter_id}: {message}")
    if report.failed:
        raise ResumableError(f"{len(report.failed)} dead letter(s) could not be drained")
