"""The ``resumable`` command line: the root group and its commands, one module
per command group."""

from __future__ import annotations

import click

from resumable.cli import db, processes, services, sessions
from resumable.cli.dlq import dlq
from resumable.cli.shared import shared
from resumable.cli.support import ErrorGroup
from resumable.logs import configure_logging
from resumable.settings import load_settings
from resumable.tracing import configure_tracing

# Commands that run until stopped; the others export their spans as they exit.
LONG_RUNNING_COMMANDS = frozenset({"web", "worker", "scheduler", "dev", "demo"})


@click.group(cls=ErrorGroup)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
    help="Logging level (DEBUG also shows the traceback of an unexpected error).",
)
@click.pass_context
def main(ctx: click.Context, log_level: str) -> None:
    """resumable: a suspend-and-resume job queue for long-running AI agents."""
    configure_logging(log_level.upper())
    ctx.obj = load_settings()
    if ctx.obj.log_format != "text":
        configure_logging(log_level.upper(), ctx.obj.log_format)
    command = ctx.invoked_subcommand
    configure_tracing(  # on if OTEL_* asks for it
        f"resumable-{command}", long_running=command in LONG_RUNNING_COMMANDS
    )


for command in (
    db.db,
    processes.worker,
    processes.web,
    processes.scheduler,
    processes.dev,
    processes.demo,
    sessions.enqueue,
    sessions.sessions,
    sessions.reconcile,
    dlq,
    shared,
    services.services,
):
    main.add_command(command)
