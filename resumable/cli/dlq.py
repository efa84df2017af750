"""``resumable dlq``: the operator's dead-letter commands.

A dead letter is named by its number or by its session's id (or a unique
prefix of it). Every action is an audit event with who (``--by``) and why.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click
from rich.progress import Progress

from resumable.cli.failures import ErrorGroup, console
from resumable.cli.ids import resolve_dead_letter
from resumable.cli.json_args import DATE_TIME, STORED_TEXT, RateRange, parse_patch, parse_text
from resumable.cli.sessions import SHORT_ID, actor
from resumable.cli.support import connected
from resumable.cli.tables import fitted
from resumable.client import dead_letter_cursor
from resumable.errors import ResumableError
from resumable.schemas import DeadLetter, Page
from resumable.services.dead_letters import (
    COMPENSATIONS,
    MAX_RATE,
    MIN_RATE,
    DeadLetterFilter,
    DeadLetters,
    DrainReport,
)
from resumable.services.narration import ago
from resumable.settings import Settings
from resumable.webhooks.response_models import DeadLetterDetail

# How many of the session's latest events `dlq show` prints, as the API does.
RECENT_EVENTS = 20


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
            click.option("--agent", type=STORED_TEXT, default=None, help="Only this agent."),
            click.option(
                "--error-type", type=STORED_TEXT, default=None, help="Only this exception type."
            ),
            click.option(
                "--step", type=STORED_TEXT, default=None, help="Only failures at this step."
            ),
            click.option("--since", type=DATE_TIME, default=None, help="Failed at or after."),
            click.option("--until", type=DATE_TIME, default=None, help="Failed before."),
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
@click.option(
    "--cursor",
    "--before",
    "cursor",
    default=None,
    help="Page: the next_cursor of the previous page (dead letters numbered below it).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="A page of dead letters, as GET /v1/dead-letters."
)
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
    cursor: str | None,
    as_json: bool,
) -> None:
    """List dead letters, newest first."""
    where = _filters(
        agent, error_type, step, since, until, compensation, None if status == "all" else status
    )
    with connected(settings) as c:
        rows, next_before = DeadLetters(settings, c.db, lambda: c.client.broker).find(
            where, limit=limit, before_id=dead_letter_cursor(cursor)
        )
    page = Page[DeadLetter](
        items=[DeadLetter.from_row(r, include_traceback=False) for r in rows],
        next_cursor=None if next_before is None else str(next_before),
    )
    if as_json:
        click.echo(page.model_dump_json())
        return
    now = datetime.now(UTC)
    sagas = any(r.compensation not in (None, "none") for r in page.items)
    statuses = status != "open"
    headers = ["#", "session", "failed", "agent", "step", "error", "tries"]
    headers += ["saga"] if sagas else []
    headers += ["status"] if statuses else []
    cells = []
    for r in page.items:
        row = [
            str(r.dead_letter_id),
            str(r.session_id)[:SHORT_ID],
            ago(r.failed_at, now),
            r.agent,
            r.step or "",
            f"{r.error_type}: {' '.join(r.error_message.split())}",
            str(r.attempts),
        ]
        row += [r.compensation or ""] if sagas else []
        row += [r.status] if statuses else []
        cells.append(row)
    # One line per dead letter: the error is cut (`dlq show` has it whole,
    # with its traceback), the session is its id's prefix.
    table = fitted(headers, cells, flexible="error", right=("#", "tries"))
    console.print(table)
    if page.next_cursor:
        # Never wrapped (a pipe is 80 columns to rich): scripts cut the token out.
        console.print(f"more: --cursor {page.next_cursor}", highlight=False, soft_wrap=True)


@dlq.command("show")
@click.argument("dead_letter_id")
@click.pass_obj
def dlq_show(settings: Settings, dead_letter_id: str) -> None:
    """One dead letter with its traceback, its session (with the last state)
    and the session's last events, as JSON, as GET /v1/dead-letters/{id}
    answers. DEAD_LETTER_ID is its number, or its session's id or a unique prefix."""
    with connected(settings) as c:
        letter = c.client.dead_letter(resolve_dead_letter(c.db, dead_letter_id))
        shown = DeadLetterDetail(
            dead_letter=letter,
            session=c.client.get(letter.session_id),
            events=c.client.events(letter.session_id, latest=RECENT_EVENTS),
        )
    click.echo(shown.model_dump_json(indent=2))


@dlq.command("retry")
@click.argument("dead_letter_id")
@click.option("--patch", default=None, help="RFC 6902 JSON Patch applied to the state.")
@click.option("--reason", default=None, help="Why (kept in the audit log).")
@click.option("--by", type=STORED_TEXT, default=None, help="Who (default: cli:<user>).")
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
        session_id = DeadLetters(settings, c.db, lambda: c.client.broker).retry(
            number, actor=actor(by), reason=reason, state_patch=state_patch
        )
    console.print(f"retrying session {session_id}", highlight=False)


@dlq.command("discard")
@click.argument("dead_letter_id")
@click.option("--reason", required=True, help="Why (kept in the audit log).")
@click.option("--by", type=STORED_TEXT, default=None, help="Who (default: cli:<user>).")
@click.pass_obj
def dlq_discard(settings: Settings, dead_letter_id: str, reason: str, by: str | None) -> None:
    """Close a dead letter without retrying it."""
    parse_text(reason, "--reason")
    with connected(settings) as c:
        number = resolve_dead_letter(c.db, dead_letter_id)
        DeadLetters(settings, c.db, lambda: c.client.broker).discard(
            number, actor=actor(by), reason=reason
        )
    console.print(f"discarded dead letter {number}", highlight=False)


@dlq.command("drain")
@filter_options
@click.option("--action", type=click.Choice(["retry", "discard"]), required=True)
@click.option("--dry-run", is_flag=True, help="List what would happen; change nothing.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@click.option(
    "--rate", type=RateRange(MIN_RATE, MAX_RATE), default=None, help="Max per second (N or N/s)."
)
@click.option("--reason", default=None, help="Why (required to discard).")
@click.option("--by", type=STORED_TEXT, default=None, help="Who (default: cli:<user>).")
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
    # Every argument is checked before the progress bar is drawn: a bad one
    # is its error line alone, not an empty bar and then the line.
    parse_text(reason, "--reason")
    if action == "discard" and not (reason and reason.strip()):
        raise click.UsageError("--reason is required: discarding needs a reason (it is audited)")
    who = actor(by)
    where = _filters(agent, error_type, step, since, until, compensation)
    with (
        connected(settings, broker=action == "retry" and not dry_run) as c,
        Progress(console=console, disable=as_json or dry_run) as bar,
    ):
        task = bar.add_task(f"{action}", total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = DeadLetters(settings, c.db, lambda: c.client.broker).drain(
            action,  # type: ignore[arg-type]
            where,
            actor=who,
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
