"""The ``resumable`` command line: the root group and its commands, one module
per command group."""

from __future__ import annotations

import signal
import sys
from types import FrameType

import click

from resumable._internal.logs import configure_logging
from resumable.cli import db, processes, services, sessions
from resumable.cli.dlq import dlq
from resumable.cli.shared import shared
from resumable.cli.support import ErrorGroup
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
    if command not in LONG_RUNNING_COMMANDS:  # those install their own handlers
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    configure_tracing(  # on if OTEL_* asks for it
        f"resumable-{command}", long_running=command in LONG_RUNNING_COMMANDS
    )


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """A one-shot command told to stop (a CI timeout, a shell's kill) unwinds
    as on Ctrl-C: its embedded servers are released (stopped, if it started
    them and no one else uses them), not left running as after a SIGKILL."""
    sys.exit(128 + signum)


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
