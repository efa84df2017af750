"""``resumable schedules``: list, show, create, pause, resume, delete and
trigger the schedules that start sessions (``resumable/schedules.py``).

A schedule is named by its name. Every change is logged with who (``--by``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from resumable.cli.failures import ErrorGroup, console
from resumable.cli.json_args import STORED_TEXT, parse_json
from resumable.cli.sessions import SHORT_ID, actor
from resumable.cli.support import connected
from resumable.cli.tables import fitted
from resumable.schedules import CATCH_UPS, OVERLAPS, Schedule
from resumable.schemas import ScheduleInfo
from resumable.services.narration import ago
from resumable.settings import Settings


@click.group(cls=ErrorGroup)
def schedules() -> None:
    """Schedules that start sessions on a cron expression or an interval."""


@schedules.command("list")
@click.option("--agent", type=STORED_TEXT, default=None, help="Only this agent's schedules.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="The schedules, as GET /v1/schedules.")
@click.pass_obj
def schedules_list(settings: Settings, agent: str | None, limit: int, as_json: bool) -> None:
    """List schedules by name, with when they run, their next due time and
    their last session."""
    with connected(settings) as c:
        items = c.client.schedules(agent=agent, limit=limit)
    if as_json:
        click.echo(json.dumps({"items": [item.model_dump(mode="json") for item in items]}))
        return
    now = datetime.now(UTC)
    cells = [
        [
            item.name,
            item.agent,
            "paused" if item.paused else ago(item.next_due_at, now),
            ago(item.last_started_at, now) if item.last_started_at else "",
            str(item.last_session_id)[:SHORT_ID] if item.last_session_id else "",
            item.when,
        ]
        for item in items
    ]
    headers = ["name", "agent", "next", "last run", "session", "when"]
    console.print(fitted(headers, cells, flexible="when", wrap=True))


@schedules.command("show")
@click.argument("name")
@click.pass_obj
def schedules_show(settings: Settings, name: str) -> None:
    """One schedule as JSON, as GET /v1/schedules/{name} answers."""
    with connected(settings) as c:
        click.echo(c.client.schedule(name).model_dump_json(indent=2))


@schedules.command("create")
@click.argument("name")
@click.option(
    "--agent", type=STORED_TEXT, required=True, help="The agent whose sessions it starts."
)
@click.option("--cron", default=None, help='A five-field cron expression, e.g. "0 8 * * 1-5".')
@click.option(
    "--every",
    type=click.FloatRange(min=1),
    default=None,
    help="Or: every so many seconds, from now.",
)
@click.option("--timezone", default="UTC", show_default=True, help="The cron expression's zone.")
@click.option("--input", "input_json", default=None, help="Each session's input (JSON).")
@click.option(
    "--catch-up",
    type=click.Choice(CATCH_UPS),
    default="skip",
    show_default=True,
    help="Due times missed while no scheduler ran: skip them, start the latest, or all.",
)
@click.option(
    "--overlap",
    type=click.Choice(OVERLAPS),
    default="skip",
    show_default=True,
    help="While its last session is live: skip the due time, allow another, or queue one.",
)
@click.option("--paused", is_flag=True, help="Create it paused.")
@click.option("--by", type=STORED_TEXT, default=None, help="Who (default: cli:<user>).")
@click.pass_obj
def schedules_create(
    settings: Settings,
    name: str,
    agent: str,
    cron: str | None,
    every: float | None,
    timezone: str,
    input_json: str | None,
    catch_up: str,
    overlap: str,
    paused: bool,
    by: str | None,
) -> None:
    """Create a schedule at run time (the same definition again is no change)."""
    schedule = Schedule(
        name=name,
        agent=agent,
        cron=cron,
        every=every,
        timezone=timezone,
        input=None if input_json is None else parse_json(input_json, "--input"),
        catch_up=catch_up,  # type: ignore[arg-type]
        overlap=overlap,  # type: ignore[arg-type]
    )
    with connected(settings) as c:
        created = c.client.create_schedule(schedule, actor=actor(by), paused=paused)
    _say(created, "created")


@schedules.command("pause")
@click.argument("name")
@click.option("--reason", type=STORED_TEXT, default=None, help="Why (shown on the schedule).")
@click.option("--by", type=STORED_TEXT, default=None, help="Who (default: cli:<user>).")
@click.pass_obj
def schedules_pause(settings: Settings, name: str, reason: str | None, by: str | None) -> None:
    """Pause a schedule: it starts nothing until resumed."""
    with connected(settings) as c:
        _say(c.client.pause_schedule(name, reason=reason, actor=actor(by)), "paused")


@schedules.command("resume")
@click.argument("name")
@click.option("--by", type=STORED_TEXT, default=None, help="Who (default: cli:<user>).")
@click.pass_obj
def schedules_resume(settings: Settings, name: str, by: str | None) -> None:
    """Resume a paused schedule from now (due times of the pause start nothing)."""
    with connected(settings) as c:
        _say(c.client.resume_schedule(name, actor=actor(by)), "resumed")


@schedules.command("delete")
@click.argument("name")
@click.option("--by", type=STORED_TEXT, default=None, help="Who (default: cli:<user>).")
@click.pass_obj
def schedules_delete(settings: Settings, name: str, by: str | None) -> None:
    """Delete a schedule; the sessions it started go on. A schedule defined
    in code comes back when a worker that loads its agent starts."""
    with connected(settings) as c:
        c.client.delete_schedule(name, actor=actor(by))
    click.echo(f"schedule {name} deleted")


@schedules.command("trigger")
@click.argument("name")
@click.option("--by", type=STORED_TEXT, default=None, help="Who (default: cli:<user>).")
@click.pass_obj
def schedules_trigger(settings: Settings, name: str, by: str | None) -> None:
    """Start a session of the schedule now (whatever its overlap policy and
    even if paused); print the session's id."""
    with connected(settings) as c:
        session_id = c.client.trigger_schedule(name, actor=actor(by))
    click.echo(str(session_id))


def _say(item: ScheduleInfo, what: str) -> None:
    state = "paused" if item.paused else f"next due {item.next_due_at.isoformat()}"
    click.echo(f"schedule {item.name} {what}: {item.when}; {state}")
