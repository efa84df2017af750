"""``resumable enqueue``, ``resumable sessions ...`` and ``resumable reconcile``."""

from __future__ import annotations

import json
import uuid
from typing import Any

import click
from rich.table import Table

from resumable.agent import AgentRegistry
from resumable.cli.support import ErrorGroup, connected, console
from resumable.settings import Settings


def _parse_json(value: str | None, what: str) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"{what} is not valid JSON: {exc}") from None


@click.command()
@click.argument("agent")
@click.option("--input", "input_json", default=None, help="Input as JSON.")
@click.option("--idempotency-key", default=None, help="Same key, same session.")
@click.option(
    "--agents", "agent_modules", multiple=True, help="Validate AGENT against these modules."
)
@click.pass_obj
def enqueue(
    settings: Settings,
    agent: str,
    input_json: str | None,
    idempotency_key: str | None,
    agent_modules: tuple[str, ...],
) -> None:
    """Start a session of AGENT; prints its id."""
    payload = _parse_json(input_json, "--input")
    modules = list(agent_modules) or settings.agents
    registry = AgentRegistry.from_modules(modules) if modules else None
    with connected(settings, registry) as c:
        started = c.client.start_session(agent, payload, idempotency_key=idempotency_key)
    click.echo(str(started.session_id))


@click.group(cls=ErrorGroup)
def sessions() -> None:
    """Inspect sessions."""


@sessions.command("list")
@click.option("--status", default=None)
@click.option("--agent", default=None)
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def sessions_list(
    settings: Settings, status: str | None, agent: str | None, limit: int, as_json: bool
) -> None:
    """List sessions, newest first."""
    with connected(settings) as c:
        rows = c.client.list_sessions(status=status, agent=agent, limit=limit)
    if as_json:
        click.echo(json.dumps([r.model_dump(mode="json", exclude={"state"}) for r in rows]))
        return
    table = Table("id", "agent", "status", "step", "seq", "updated")
    for r in rows:
        table.add_row(
            str(r.id), r.agent, r.status, r.cursor or "", str(r.step_seq), str(r.updated_at)
        )
    console.print(table)


def _session_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a session id") from None


@sessions.command("show")
@click.argument("session_id")
@click.pass_obj
def sessions_show(settings: Settings, session_id: str) -> None:
    """Show one session as JSON."""
    sid = _session_id(session_id)
    with connected(settings) as c:
        row = c.client.get(sid)
    click.echo(json.dumps(row.model_dump(mode="json"), indent=2))


@sessions.command("events")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def sessions_events(settings: Settings, session_id: str, as_json: bool) -> None:
    """Show a session's audit log in order."""
    sid = _session_id(session_id)
    with connected(settings) as c:
        c.client.get(sid)
        events = c.client.events(sid)
    if as_json:
        click.echo(json.dumps([e.model_dump(mode="json") for e in events]))
        return
    table = Table("time", "seq", "step", "event", "payload")
    for e in events:
        table.add_row(
            str(e.created_at),
            "" if e.seq is None else str(e.seq),
            e.step or "",
            e.event_type,
            json.dumps(e.payload)[:120],
        )
    console.print(table)


@sessions.command("history")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def sessions_history(settings: Settings, session_id: str, as_json: bool) -> None:
    """List a session's checkpoints."""
    from resumable.time_travel import TimeTravel

    sid = _session_id(session_id)
    with connected(settings) as c:
        rows = TimeTravel(c.db).checkpoints(sid, limit=100_000)
    if as_json:
        click.echo(json.dumps(rows, default=str))
        return
    table = Table("seq", "step", "next", "kind", "bytes", "at")
    for r in rows:
        table.add_row(
            str(r["seq"]), str(r["step"]), str(r["next_step"] or ""), str(r["kind"]),
            str(r["bytes"]), str(r["created_at"]),
        )  # fmt: skip
    console.print(table)


@sessions.command("state")
@click.argument("session_id")
@click.option("--at", "seq", type=click.IntRange(min=1), default=None, help="Checkpoint number.")
@click.option("--agents", "agent_modules", multiple=True, help="For event-sourced agents.")
@click.pass_obj
def sessions_state(
    settings: Settings, session_id: str, seq: int | None, agent_modules: tuple[str, ...]
) -> None:
    """Print a session's state: current, or as it was after checkpoint --at."""
    from resumable.time_travel import TimeTravel

    sid = _session_id(session_id)
    modules = list(agent_modules) or settings.agents
    registry = AgentRegistry.from_modules(modules) if modules else None
    with connected(settings) as c:
        if seq is None:
            click.echo(json.dumps(c.client.get(sid).state, indent=2))
            return
        past = TimeTravel(c.db, registry).state_at(sid, seq)
    click.echo(json.dumps(past.state, indent=2))


@sessions.command("fork")
@click.argument("session_id")
@click.option("--at", "seq", type=click.IntRange(min=1), required=True, help="Checkpoint.")
@click.option("--patch", default=None, help="RFC 6902 JSON Patch applied to that state.")
@click.option("--by", default=None, help="Who (default: cli:<user>).")
@click.option("--agents", "agent_modules", multiple=True, help="For event-sourced agents.")
@click.pass_obj
def sessions_fork(
    settings: Settings,
    session_id: str,
    seq: int,
    patch: str | None,
    by: str | None,
    agent_modules: tuple[str, ...],
) -> None:
    """Start a new session from a past checkpoint; prints the fork's id."""
    import getpass

    from resumable.time_travel import TimeTravel

    state_patch = _parse_json(patch, "--patch")
    if state_patch is not None and not isinstance(state_patch, list):
        raise click.BadParameter("--patch must be a JSON array of operations")
    sid = _session_id(session_id)
    modules = list(agent_modules) or settings.agents
    registry = AgentRegistry.from_modules(modules) if modules else None
    with connected(settings) as c:
        fork_id = TimeTravel(c.db, registry).fork(
            sid,
            seq,
            actor=by or f"cli:{getpass.getuser()}",
            state_patch=state_patch,
            broker=c.client.broker,
            settings=settings,
        )
    click.echo(str(fork_id))


@click.command()
@click.option("--grace", type=float, default=None, help="Seconds a pending session may sit.")
@click.pass_obj
def reconcile(settings: Settings, grace: float | None) -> None:
    """Re-enqueue sessions whose queue message was lost or whose worker died."""
    from resumable.scheduler.reconcile import reconcile as run_reconcile

    with connected(settings) as c:
        report = run_reconcile(settings, c.db, c.client.broker, grace_seconds=grace)
    console.print(f"re-enqueued {len(report.pending)} pending, {len(report.expired)} expired")
