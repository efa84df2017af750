"""The ``resumable`` command line."""

from __future__ import annotations

import json
import signal
import sys
import uuid
from typing import Any

import click
from rich.table import Table

from resumable.agent import AgentRegistry
from resumable.cli_dlq import dlq
from resumable.cli_support import ErrorGroup as _Group
from resumable.cli_support import connected, console, process_urls
from resumable.cli_support import fail as _fail
from resumable.embedded import EmbeddedServices, reap_orphans, service_urls
from resumable.logs import configure_logging
from resumable.models import migrate
from resumable.settings import Settings, load_settings


@click.group(cls=_Group)
@click.option("--log-level", default="INFO", show_default=True, help="Logging level.")
@click.pass_context
def main(ctx: click.Context, log_level: str) -> None:
    """resumable: a suspend-and-resume job queue for long-running AI agents."""
    configure_logging(log_level.upper())
    ctx.obj = load_settings()


# -- database -----------------------------------------------------------------------


@main.group(cls=_Group)
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
@click.pass_obj
def db_upgrade(settings: Settings, revision: str) -> None:
    """Apply migrations (safe to run from several processes at once)."""
    with service_urls(settings.database_url, settings.redis_url, settings.home_dir) as urls:
        migrate.upgrade(urls.database_url, revision)
        console.print(f"schema at {migrate.current_revision(urls.database_url)}")


# -- worker ---------------------------------------------------------------------------


@main.command()
@click.option(
    "--agents", "agent_modules", multiple=True, help="Module defining agents (repeatable)."
)
@click.option("--threads", type=int, default=None, help="Worker threads.")
@click.pass_obj
def worker(settings: Settings, agent_modules: tuple[str, ...], threads: int | None) -> None:
    """Run sessions from the queue until SIGTERM."""
    from resumable.queue.worker import build_runtime, run_worker

    modules = list(agent_modules) or settings.agents
    if not modules:
        _fail("no agent modules: pass --agents MODULE or set RESUMABLE_AGENTS")
    if threads:
        settings = settings.model_copy(update={"worker_threads": threads})
    registry = AgentRegistry.from_modules(modules)
    with process_urls(settings) as urls:
        runtime = build_runtime(settings, urls.database_url, urls.redis_url, registry)
        run_worker(runtime)


@main.command()
@click.option("--host", default=None, help="Bind address (default RESUMABLE_WEB_HOST).")
@click.option("--port", type=int, default=None, help="Port (default RESUMABLE_WEB_PORT).")
@click.pass_obj
def web(settings: Settings, host: str | None, port: int | None) -> None:
    """Serve the HTTP API, callbacks and signals with uvicorn."""
    import uvicorn

    from resumable.webhooks.app import create_app

    registry = AgentRegistry.from_modules(settings.agents) if settings.agents else None
    # uvicorn re-raises the signal that stopped it once it has shut down; turn
    # that into an exit that unwinds the `with`, so embedded servers are released.
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, lambda _signum, _frame: sys.exit(0))
    with process_urls(settings) as urls:
        app = create_app(settings, urls.database_url, urls.redis_url, registry)
        uvicorn.run(
            app,
            host=host or settings.web_host,
            port=port if port is not None else settings.web_port,
            log_config=None,
            access_log=False,
        )


@main.command()
@click.pass_obj
def scheduler(settings: Settings) -> None:
    """Wake due timers, polls and timeouts; re-enqueue stranded sessions."""
    from resumable.scheduler.process import run_scheduler

    with process_urls(settings) as urls:
        run_scheduler(settings, urls.database_url, urls.redis_url)


# -- sessions -------------------------------------------------------------------------


def _parse_json(value: str | None, what: str) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"{what} is not valid JSON: {exc}") from None


@main.command()
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


@main.group(cls=_Group)
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
    from resumable.history import History

    sid = _session_id(session_id)
    with connected(settings) as c:
        rows = History(c.db).checkpoints(sid, limit=100_000)
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
    from resumable.history import History

    sid = _session_id(session_id)
    modules = list(agent_modules) or settings.agents
    registry = AgentRegistry.from_modules(modules) if modules else None
    with connected(settings) as c:
        if seq is None:
            click.echo(json.dumps(c.client.get(sid).state, indent=2))
            return
        past = History(c.db, registry).state_at(sid, seq)
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

    from resumable.history import History

    state_patch = _parse_json(patch, "--patch")
    if state_patch is not None and not isinstance(state_patch, list):
        raise click.BadParameter("--patch must be a JSON array of operations")
    sid = _session_id(session_id)
    modules = list(agent_modules) or settings.agents
    registry = AgentRegistry.from_modules(modules) if modules else None
    with connected(settings) as c:
        fork_id = History(c.db, registry).fork(
            sid,
            seq,
            actor=by or f"cli:{getpass.getuser()}",
            state_patch=state_patch,
            broker=c.client.broker,
            settings=settings,
        )
    click.echo(str(fork_id))


@main.command()
@click.option("--grace", type=float, default=None, help="Seconds a pending session may sit.")
@click.pass_obj
def reconcile(settings: Settings, grace: float | None) -> None:
    """Re-enqueue sessions whose queue message was lost or whose worker died."""
    from resumable.reconcile import reconcile as run_reconcile

    with connected(settings) as c:
        report = run_reconcile(settings, c.db, c.client.broker, grace_seconds=grace)
    console.print(f"re-enqueued {len(report.pending)} pending, {len(report.expired)} expired")


main.add_command(dlq)


# -- embedded services -------------------------------------------------------------------


@main.group(cls=_Group)
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
    EmbeddedServices(settings.home_dir).stop()
    reaped = reap_orphans()
    console.print(f"stopped {settings.home_dir}" + (f"; reaped {reaped}" if reaped else ""))


@main.command()
@click.option(
    "--agents", "agent_modules", multiple=True, help="Agent modules for the worker (repeatable)."
)
@click.pass_obj
def dev(settings: Settings, agent_modules: tuple[str, ...]) -> None:
    """Run web, worker and scheduler together on the embedded (or configured) servers."""
    from resumable.dev import run_dev

    sys.exit(run_dev(settings, console, list(agent_modules) or settings.agents))


@main.command()
@click.pass_obj
def demo(settings: Settings) -> None:
    """Run the end-to-end demo on the embedded default (or the configured URLs)."""
    from resumable.demo import run_demo

    sys.exit(run_demo(settings, console))


if __name__ == "__main__":  # pragma: no cover
    main()
