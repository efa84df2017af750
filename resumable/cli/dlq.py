"""``resumable dlq``: the operator's dead-letter commands.

A dead letter is named by its number or by its session's id (or a unique
prefix of it). Every action is an audit event with who (``--by``) and why.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click
from rich.progress import Progress
from rich.table import Table

from resumable.cli.ids import resolve_dead_letter
from resumable.cli.json_args import parse_patch, parse_text
from resumable.cli.sessions import actor
from resumable.cli.support import ErrorGroup, connected, console
from resumable.dead_letters import (
    COMPENSATIONS,
    MAX_RATE,
    MIN_RATE,
    DeadLetterFilter,
    DeadLetters,
    DrainReport,
)
from resumable.errors import ResumableError
from resumable.settings import Settings


def _filters(
    agent: str | None,
    error_type: str | None,
    step: str | None,
    since: datetime | None,
    until: datetime | None,
    compensation: str | None,
    status: str | None = "open",
) -> DeadLetterFilter:
    return DeadLetterFilter(
        status=status,
        agent=agent,
        error_type=error_type,
        step=step,
        since=since,
        until=until,
        compensation=compensation,
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
            click.option(
                "--compensation",
                type=click.Choice(COMPENSATIONS),
                default=None,
                help="Only this saga outcome: none ran, completed, or failed.",
            ),
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
    compensation: str | None,
    status: str,
    limit: int,
    before_id: int | None,
    as_json: bool,
) -> None:
    """List dead letters, newest first."""
    where = _filters(
        agent, error_type, step, since, until, compensation, None if status == "all" else status
    )
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
    table = Table(
        "id", "session", "failed at", "agent", "step", "error", "attempts", "saga", "status"
    )
    for r in rows:
        table.add_row(
            str(r.id), str(r.session_id)[:8], r.failed_at.strftime("%Y-%m-%d %H:%M:%S"),
            r.agent, r.step or "",
            f"{r.error_type}: {r.error_message[:60]}", str(r.attempts), r.compensation,
            r.status,
        )  # fmt: skip
    console.print(table)
    if next_before:
        console.print(f"more: --before {next_before}")


@dlq.command("show")
@click.argument("dead_letter_id")
@click.pass_obj
def dlq_show(settings: Settings, dead_letter_id: str) -> None:
    """One dead letter: error, traceback, last state, last events (JSON).
    DEAD_LETTER_ID is its number, or its session's id or a unique prefix."""
    with connected(settings) as c:
        number = resolve_dead_letter(c.db, dead_letter_id)
        shown = DeadLetters(settings, c.db, c.client.broker).show(number)
    click.echo(json.dumps(shown, indent=2))


@dlq.command("retry")
@click.argument("dead_letter_id")
@click.option("--patch", default=None, help="RFC 6902 JSON Patch applied to the state.")
@click.option("--reason", default=None, help="Why (kept in the audit log).")
@click.option("--by", default=None, help="Who (default: cli:<user>).")
@click.pass_obj
def dlq_retry(
    settings: Settings, dead_letter_id: str, patch: str | None, reason: str | None,
    by: str | None,
) -> None:  # fmt: skip
    """Resume a dead-lettered session from its latest checkpoint."""
    state_patch = parse_patch(patch)
    parse_text(reason, "--reason")
    with connected(settings, broker=True) as c:
        number = resolve_dead_letter(c.db, dead_letter_id)
        session_id = DeadLetters(settings, c.db, c.client.broker).retry(
            number, actor=actor(by), reason=reason, state_patch=state_patch
        )
    console.print(f"retrying session {session_id}", highlight=False)


@dlq.command("discard")
@click.argument("dead_letter_id")
@click.option("--reason", required=True, help="Why (kept in the audit log).")
@click.option("--by", default=None, help="Who (default: cli:<user>).")
@click.pass_obj
def dlq_discard(settings: Settings, dead_letter_id: str, reason: str, by: str | None) -> None:
    """Close a dead letter without retrying it."""
    parse_text(reason, "--reason")
    with connected(settings) as c:
        number = resolve_dead_letter(c.db, dead_letter_id)
        DeadLetters(settings, c.db, c.client.broker).discard(number, actor=actor(by), reason=reason)
    console.print(f"discarded dead letter {number}", highlight=False)


@dlq.command("drain")
@filter_options
@click.option("--action", type=click.Choice(["retry", "discard"]), required=True)
@click.option("--dry-run", is_flag=True, help="List what would happen; change nothing.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@click.option(
    "--rate", type=click.FloatRange(MIN_RATE, MAX_RATE), default=None, help="Max per second."
)
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
    compensation: str | None,
    action: str,
    dry_run: bool,
    limit: int,
    rate: float | None,
    reason: str | None,
    by: str | None,
    as_json: bool,
) -> None:
    """Retry or discard every open dead letter matching the filters. A dry
    run applies the same rules and says which would be refused, and why."""
    parse_text(reason, "--reason")
    where = _filters(agent, error_type, step, since, until, compensation)
    with (
        connected(settings, broker=action == "retry" and not dry_run) as c,
        Progress(console=console, disable=as_json or dry_run) as bar,
    ):
        task = bar.add_task(f"{action}", total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = DeadLetters(settings, c.db, c.client.broker).drain(
            action,  # type: ignore[arg-type]
            where,
            actor=actor(by),
            reason=reason,
            dry_run=dry_run,
            limit=limit,
            rate=rate,
            progress=advance,
        )
    if as_json:
        click.echo(json.dumps(report.as_json()))
    else:
        _print_report(report)
    if report.failed:
        raise ResumableError(f"{len(report.failed)} dead letter(s) could not be drained")


def _print_report(report: DrainReport) -> None:
    action = report.action
    if report.dry_run:
        would = report.would_act
        console.print(
            f"dry run: would {action} {len(would)} dead letter(s): "
            f"{', '.join(map(str, would)) or 'none'}",
            highlight=False,
        )
        if report.refused:
            console.print(
                f"would refuse {len(report.refused)}: {', '.join(map(str, report.refused))}",
                highlight=False,
            )
        for dead_letter_id, message in report.refused.items():
            console.print(f"  {dead_letter_id}: {message}", highlight=False, soft_wrap=True)
        return
    console.print(
        f"{action}: {len(report.done)} done, {len(report.failed)} failed", highlight=False
    )
    for dead_letter_id, message in report.failed.items():
        console.print(f"  {dead_letter_id}: {message}", highlight=False, soft_wrap=True)
