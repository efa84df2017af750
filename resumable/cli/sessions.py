"""``resumable enqueue``, ``resumable sessions ...`` and ``resumable reconcile``.

Every SESSION argument is a session id or a unique prefix of one. Actions
on a session (cancel, signal, fork) are audit events that say who (``--by``,
default ``cli:<user>``) and why, as the dead-letter actions are.
"""

from __future__ import annotations

import getpass
import json
import re
from datetime import UTC, datetime
from typing import Any

import click

from resumable.agent import AgentRegistry
from resumable.cli.failures import ErrorGroup, console, fail
from resumable.cli.ids import resolve_session
from resumable.cli.json_args import (
    STORED_TEXT,
    FiniteFloatRange,
    parse_json,
    parse_key,
    parse_patch,
    parse_text,
)
from resumable.cli.support import connected, optional_agents
from resumable.cli.tables import fitted
from resumable.client import HUNG_AFTER_SECONDS
from resumable.errors import (
    ConfirmationRequiredError,
    IdempotencyConflictError,
    ResumableError,
    SessionStateError,
    UnknownAgentError,
)
from resumable.models import agent_queries
from resumable.models.database import Database
from resumable.models.status import SessionStatus
from resumable.priorities import DEFAULT_PRIORITY, PRIORITIES, Priority
from resumable.schemas import AcceptPreview, Checkpoint, Event, Page
from resumable.services import arguments
from resumable.services.narration import doing_now
from resumable.settings import Settings

# The same names the HTTP API accepts.
_TOPIC = re.compile(r"^[A-Za-z0-9_.:\-]{1,100}$")
STATUSES = [status.value for status in SessionStatus]


#: As long as the HTTP API keeps an X-Resumable-Actor.
MAX_ACTOR_LENGTH = 200


# A session id in a table: its first characters, which every command takes as
# a unique prefix (as `docker ps` shows container ids).
SHORT_ID = 8


def actor(by: str | None) -> str:
    """Who did it, for the audit log: --by, or cli:<user> without it. A blank
    or overlong --by is refused rather than kept as an actor no one can read."""
    if by is None or by == "":
        return f"cli:{getpass.getuser()}"
    who = by.strip()
    if not who:
        raise click.UsageError("--by must not be blank")
    if len(who) > MAX_ACTOR_LENGTH:
        raise click.UsageError(f"--by is at most {MAX_ACTOR_LENGTH} characters")
    return who


def _check_agent(db: Database, registry: AgentRegistry | None, agent: str) -> None:
    """Refuse an agent no code defines, as ``POST /v1/sessions`` does (422):
    against the given modules if any, else against the agents workers announced."""
    arguments.text(agent, "AGENT")  # an empty or NUL name is a bad argument, not unknown
    if registry is not None:
        registry.get(agent)  # raises UnknownAgentError
        return
    with db.connection() as conn:
        known = agent_queries.agent_known(conn, agent)
    if not known:
        raise UnknownAgentError(
            f"unknown agent {agent!r}: no worker has announced it (start a worker that "
            "loads it, or pass --agents MODULE to check against the code)"
        )


@click.command()
@click.argument("agent", type=STORED_TEXT)
@click.option(
    "--input", "input_json", default=None, help="Input as JSON (default: {}, an empty object)."
)
@click.option("--idempotency-key", default=None, help="Same key, same session.")
@click.option(
    "--priority",
    type=click.Choice(PRIORITIES),
    default=DEFAULT_PRIORITY,
    show_default=True,
    help="Which pending session a free worker takes first (aged: low is never starved).",
)
@click.option(
    "--agents", "agent_modules", multiple=True, help="Validate AGENT against these modules."
)
@click.pass_obj
def enqueue(
    settings: Settings,
    agent: str,
    input_json: str | None,
    idempotency_key: str | None,
    priority: Priority,
    agent_modules: tuple[str, ...],
) -> None:
    """Start a session of AGENT; prints its id."""
    payload = parse_json(input_json, "--input")
    if payload is None and input_json is None:
        payload = {}
    parse_key(idempotency_key, "--idempotency-key")
    registry = optional_agents(agent_modules or settings.agents)
    with connected(settings, registry, broker=True) as c:
        _check_agent(c.db, registry, agent)
        started = c.client.start_session(
            agent, payload, idempotency_key=idempotency_key, priority=priority
        )
    click.echo(str(started.session_id))


@click.group(cls=ErrorGroup)
def sessions() -> None:
    """Inspect sessions, and cancel or signal one."""


@sessions.command("list")
@click.option("--status", type=click.Choice(STATUSES), default=None)
@click.option("--agent", type=STORED_TEXT, default=None)
@click.option("--parent", default=None, help="Only the children this session spawned (ID).")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option(
    "--hung",
    is_flag=True,
    help="Only running sessions whose step is past its time limit or has run long (--hung-after).",
)
@click.option(
    "--hung-after",
    type=FiniteFloatRange(1, 30 * 86_400),
    default=HUNG_AFTER_SECONDS,
    show_default=True,
    help="Seconds a step may run before --hung lists it.",
)
@click.option(
    "--unserved", is_flag=True, help="Only sessions waiting for a worker that loads their agent."
)
@click.option(
    "--blocked",
    is_flag=True,
    help="Only blocked sessions (parked for an operator), with why each is blocked.",
)
@click.option("--cursor", default=None, help="Page: the next_cursor of the previous page.")
@click.option(
    "--full-ids",
    is_flag=True,
    help="Whole session ids (the table shows their first 8 characters, which every command "
    "takes as a unique prefix).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="A page of sessions, as GET /v1/sessions answers."
)
@click.pass_obj
def sessions_list(
    settings: Settings,
    status: str | None,
    agent: str | None,
    parent: str | None,
    limit: int,
    hung: bool,
    hung_after: float,
    unserved: bool,
    blocked: bool,
    cursor: str | None,
    full_ids: bool,
    as_json: bool,
) -> None:
    """List sessions, newest first, each with what it is doing now in words."""
    if blocked and status not in (None, "blocked"):
        raise click.UsageError(f"--blocked lists blocked sessions, not --status {status}")
    status = "blocked" if blocked else status
    with connected(settings) as c:
        page = c.client.page_sessions(
            status=status,
            agent=agent,
            limit=limit,
            cursor=cursor,
            hung_after=hung_after if hung else None,
            unserved=unserved,
            parent=None if parent is None else resolve_session(c.db, parent),
        )
    if as_json:
        click.echo(page.model_dump_json())
        return
    now = datetime.now(UTC)
    parents = parent is None and any(r.parent_id for r in page.items)
    headers = ["id", "agent", "status", "now"] + (["parent"] if parents else [])
    rows = []
    for r in page.items:
        row = [
            str(r.session_id) if full_ids else str(r.session_id)[:SHORT_ID],
            r.agent,
            r.status,
            doing_now(r, now),  # names the step where it matters
        ]
        if parents:
            row.append(str(r.parent_id)[:SHORT_ID] if r.parent_id else "")
        rows.append(row)
    table = fitted(headers, rows, flexible="now", wrap=True, whole=["id"])
    console.print(table)
    if page.next_cursor:
        # Never wrapped (a pipe is 80 columns to rich): scripts cut the token out.
        console.print(f"more: --cursor {page.next_cursor}", highlight=False, soft_wrap=True)


@sessions.command("show")
@click.argument("session_id")
@click.pass_obj
def sessions_show(settings: Settings, session_id: str) -> None:
    """Show one session as JSON, as GET /v1/sessions/{session_id} answers
    (SESSION_ID may be a unique prefix)."""
    with connected(settings) as c:
        session = c.client.get(resolve_session(c.db, session_id))
    click.echo(session.model_dump_json(indent=2))


@sessions.command("events")
@click.argument("session_id")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="The whole log as one page of events, as GET /v1/sessions/{session_id}/events answers.",
)
@click.pass_obj
def sessions_events(settings: Settings, session_id: str, as_json: bool) -> None:
    """Show a session's audit log in order."""
    with connected(settings) as c:
        events = c.client.events(resolve_session(c.db, session_id))
    if as_json:
        click.echo(Page[Event](items=events, next_cursor=None).model_dump_json())
        return
    cells = [
        [
            e.at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
            "" if e.seq is None else str(e.seq),
            e.step or "",
            e.type,
            json.dumps(e.payload),
        ]
        for e in events
    ]
    # One line per event, its payload cut to fit (--json has it whole).
    table = fitted(["at", "seq", "step", "type", "payload"], cells, flexible="payload")
    console.print(table)


@sessions.command("history")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def sessions_history(settings: Settings, session_id: str, as_json: bool) -> None:
    """List a session's checkpoints (--json: one page of them, as
    GET /v1/sessions/{session_id}/checkpoints answers)."""
    with connected(settings) as c:
        rows = c.client.checkpoints(resolve_session(c.db, session_id))
    if as_json:
        click.echo(Page[Checkpoint](items=rows, next_cursor=None).model_dump_json())
        return
    cells = [
        [str(r.seq), r.step, r.next_step or "", r.kind, str(r.bytes), str(r.at)[:23]] for r in rows
    ]
    headers = ["seq", "step", "next_step", "kind", "bytes", "at"]
    table = fitted(headers, cells, flexible="at", right=("seq", "bytes"))
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
    from resumable.services.time_travel import TimeTravel

    registry = optional_agents(agent_modules or settings.agents)
    with connected(settings) as c:
        sid = resolve_session(c.db, session_id)
        if seq is None:
            click.echo(json.dumps(c.client.get(sid).state, indent=2))
            return
        past = TimeTravel(c.db, registry).state_at(sid, seq)
    click.echo(json.dumps(past.state, indent=2))


@sessions.command("fork")
@click.argument("session_id")
@click.option("--at", "seq", type=click.IntRange(min=1), required=True, help="Checkpoint.")
@click.option("--patch", default=None, help="RFC 6902 JSON Patch applied to that state.")
@click.option("--by", type=STORED_TEXT, default=None, help="Who (default: cli:<user>).")
@click.option("--agents", "agent_modules", multiple=True, help="For event-sourced agents.")
@click.option(
    "--allow-compensated",
    is_flag=True,
    help="Fork even if a tool result it reuses was compensated (undone) by the saga.",
)
@click.pass_obj
def sessions_fork(
    settings: Settings,
    session_id: str,
    seq: int,
    patch: str | None,
    by: str | None,
    agent_modules: tuple[str, ...],
    allow_compensated: bool,
) -> None:
    """Start a new session from a past checkpoint; prints the fork's id."""
    from resumable.services.time_travel import TimeTravel

    state_patch = parse_patch(patch)
    registry = optional_agents(agent_modules or settings.agents)
    with connected(settings, broker=True) as c:
        fork_id = TimeTravel(c.db, registry).fork(
            resolve_session(c.db, session_id),
            seq,
            actor=actor(by),
            state_patch=state_patch,
            broker=c.client.broker,
            settings=settings,
            allow_compensated=allow_compensated,
        )
    click.echo(str(fork_id))


@sessions.command("cancel")
@click.argument("session_id")
@click.option("--reason", required=True, help="Why (kept in the audit log).")
@click.option("--by", type=STORED_TEXT, default=None, help="Who (default: cli:<user>).")
@click.pass_obj
def sessions_cancel(settings: Settings, session_id: str, reason: str, by: str | None) -> None:
    """Cancel a session that has not finished (fences out a running worker)."""
    parse_text(reason, "--reason")
    if not reason.strip():
        raise click.UsageError("--reason must not be empty")
    with connected(settings) as c:
        sid = resolve_session(c.db, session_id)
        c.client.cancel(sid, actor=actor(by), reason=reason)
    console.print(f"cancelled session {sid}", highlight=False)


@sessions.command("priority")
@click.argument("session_id")
@click.argument("level", type=click.Choice(PRIORITIES))
@click.option("--reason", default=None, help="Why (kept in the audit log).")
@click.option("--by", type=STORED_TEXT, default=None, help="Who (default: cli:<user>).")
@click.pass_obj
def sessions_priority(
    settings: Settings, session_id: str, level: Priority, reason: str | None, by: str | None
) -> None:
    """Give a session that has not finished another priority (LEVEL: high,
    normal or low); a pending one is sent again on its new lane at once."""
    if reason is not None:
        parse_text(reason, "--reason")
    with connected(settings, broker=True) as c:
        sid = resolve_session(c.db, session_id)
        session = c.client.set_priority(sid, level, actor=actor(by), reason=reason)
    console.print(f"session {sid} has priority {session.priority}", highlight=False)


@sessions.command("signal")
@click.argument("session_id")
@click.argument("topic")
@click.option("--payload", default=None, help="The signal's value as JSON (default: null).")
@click.option("--idempotency-key", default=None, help="Same key, same signal (sent once).")
@click.option("--by", type=STORED_TEXT, default=None, help="Who (default: cli:<user>).")
@click.pass_obj
def sessions_signal(
    settings: Settings,
    session_id: str,
    topic: str,
    payload: str | None,
    idempotency_key: str | None,
    by: str | None,
) -> None:
    """Send signal TOPIC (an approval, an internal event) to a session; it is
    kept until the session waits for TOPIC."""
    from resumable.services.inbox import Inbox, Verdict

    if not _TOPIC.fullmatch(topic):
        raise click.UsageError("TOPIC must be 1-100 of [A-Za-z0-9_.:-]")
    value: Any = parse_json(payload, "--payload")
    parse_key(idempotency_key, "--idempotency-key")
    with connected(settings, broker=True) as c:
        sid = resolve_session(c.db, session_id)
        receipt = Inbox(settings, c.db, c.client.broker).signal(
            sid, topic, value, idempotency_key, actor(by)
        )
    if receipt.verdict is Verdict.CLOSED:
        raise SessionStateError(f"session {sid}: {receipt.message}")
    if receipt.verdict is Verdict.UNKNOWN:
        raise ResumableError(f"session {sid}: {receipt.message}")
    if receipt.verdict is Verdict.REUSED:
        raise IdempotencyConflictError(f"session {sid}: {receipt.message}")
    console.print(f"{receipt.message} (session {sid})", highlight=False)


@click.command()
@click.option(
    "--grace",
    type=FiniteFloatRange(0, 86_400),
    default=None,
    help="Seconds a pending session may sit.",
)
@click.pass_obj
def reconcile(settings: Settings, grace: float | None) -> None:
    """Re-enqueue sessions whose queue message was lost or whose worker died."""
    from resumable.scheduler.reconcile import reconcile as run_reconcile

    with connected(settings, broker=True) as c:
        report = run_reconcile(settings, c.db, c.client.broker, grace_seconds=grace)
    console.print(f"re-enqueued {len(report.pending)} pending, {len(report.expired)} expired")


# -- blocked sessions (replay diverged; see resumable/services/blocked.py) ----------------------


def _blocked_action(
    settings: Settings, action: str, session_id: str, reason: str, by: str | None
) -> None:
    from resumable.services.blocked import BlockedSessions

    parse_text(reason, "--reason")
    if not reason.strip():
        raise click.UsageError("--reason must not be empty")
    with connected(settings, broker=True) as c:
        sid = resolve_session(c.db, session_id)
        blocked = BlockedSessions(settings, c.db, c.client.broker)
        act = {"resume": blocked.resume, "accept": blocked.accept, "fail": blocked.fail}[action]
        outcome = act(sid, actor=actor(by), reason=reason)
    superseded = (
        f", {len(outcome.superseded)} recorded call(s) superseded" if outcome.superseded else ""
    )
    console.print(f"{action}: session {sid} is {outcome.status}{superseded}", highlight=False)


_REASON = click.option("--reason", required=True, help="Why (kept in the audit log).")
_BY = click.option("--by", type=STORED_TEXT, default=None, help="Who (default: cli:<user>).")


@sessions.command("resume")
@click.argument("session_id")
@_REASON
@_BY
@click.pass_obj
def sessions_resume(settings: Settings, session_id: str, reason: str, by: str | None) -> None:
    """Run a blocked session again (after deploying code that matches its record)."""
    _blocked_action(settings, "resume", session_id, reason, by)


@sessions.command("accept")
@click.argument("session_id")
@_REASON
@_BY
@click.option(
    "--yes",
    is_flag=True,
    help="Confirm: make the calls listed again while the recorded effects listed stay.",
)
@click.pass_obj
def sessions_accept(
    settings: Settings, session_id: str, reason: str, by: str | None, yes: bool
) -> None:
    """Accept a blocked session's new tool calls: the recorded ones are superseded.

    Prints first which calls run again (with their new arguments and keys)
    and which recorded effects stay. When a call runs again, nothing is done
    without --yes (exit status 1); --yes confirms exactly the calls listed."""
    from resumable.services.blocked import BlockedSessions

    parse_text(reason, "--reason")
    if not reason.strip():
        raise click.UsageError("--reason must not be empty")
    who = actor(by)
    with connected(settings, broker=True) as c:
        sid = resolve_session(c.db, session_id)
        blocked = BlockedSessions(settings, c.db, c.client.broker)
        preview = blocked.preview_accept(sid)
        _print_preview(preview)
        if preview.confirmation_required and not yes:
            again = ", ".join(f"`{call.tool}` #{call.call_index}" for call in preview.new_calls)
            fail(
                f"accepting makes {again} again while the recorded effects listed stay; "
                "nothing was changed: re-run with --yes to confirm "
                f"[{ConfirmationRequiredError.code}]"
            )
        # The keys shown: if the record changed meanwhile, the accept is refused.
        outcome = blocked.accept(sid, actor=who, reason=reason, confirm=preview.confirm)
    superseded = (
        f", {len(outcome.superseded)} recorded call(s) superseded" if outcome.superseded else ""
    )
    console.print(
        f"accept: session {sid} is {outcome.status}{superseded}", highlight=False, soft_wrap=True
    )


def _print_preview(preview: AcceptPreview) -> None:
    """What an accept does, as plain text (values are data, never markup)."""

    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    say(
        f"accept session {preview.session_id}: step {preview.step!r} (checkpoint "
        f"{preview.seq}) is blocked by {preview.kind} at call #{preview.call_index}"
    )
    say("calls that run again:" if preview.new_calls else "calls that run again: none")
    for call in preview.new_calls:
        key = call.idempotency_key or "a new key (known only when the step runs)"
        say(f"  {call.tool} #{call.call_index}  key {key}  (replaces {call.replaces})")
        say(f"    arguments {_compact(call.request)}")
    say(
        "recorded effects that stay (superseded, not undone):"
        if preview.superseded
        else "recorded effects that stay: none"
    )
    for effect in preview.superseded:
        say(
            f"  {effect.tool} #{effect.call_index}  {effect.status.value}  key "
            f"{effect.idempotency_key}"
        )
        say(f"    request {_compact(effect.request)}")
        if effect.result is not None:
            say(f"    result {effect.result}")
    for line in preview.summary:
        say(f"- {line}")


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@sessions.command("fail")
@click.argument("session_id")
@_REASON
@_BY
@click.pass_obj
def sessions_fail(settings: Settings, session_id: str, reason: str, by: str | None) -> None:
    """Fail a blocked session: only now does its saga run; then it is dead-lettered."""
    _blocked_action(settings, "fail", session_id, reason, by)
