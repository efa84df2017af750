"""The ``resumable`` command line: the root group and its commands, one module
per command group."""

from __future__ import annotations

import importlib
import signal
import sys
from types import FrameType

import click

from resumable._internal.logs import configure_logging
from resumable.cli.failures import ErrorGroup
from resumable.settings import load_settings
from resumable.tracing import configure_tracing

# Each command, and where it is defined: a command's module (and what it
# imports: the broker, the web app, Alembic) loads only when that command
# runs, so `resumable sessions list` does not pay for `resumable web`.
COMMANDS = {
    "db": "resumable.cli.db:db",
    "worker": "resumable.cli.processes:worker",
    "web": "resumable.cli.processes:web",
    "scheduler": "resumable.cli.processes:scheduler",
    "dev": "resumable.cli.processes:dev",
    "demo": "resumable.cli.processes:demo",
    "enqueue": "resumable.cli.sessions:enqueue",
    "sessions": "resumable.cli.sessions:sessions",
    "reconcile": "resumable.cli.sessions:reconcile",
    "dlq": "resumable.cli.dlq:dlq",
    "schedules": "resumable.cli.schedules:schedules",
    "concurrency": "resumable.cli.concurrency:concurrency",
    "rate-limits": "resumable.cli.rate_limits:rate_limits",
    "shared": "resumable.cli.shared:shared",
    "services": "resumable.cli.services:services",
}

# Commands that run until stopped; the others export their spans as they exit.
LONG_RUNNING_COMMANDS = frozenset({"web", "worker", "scheduler", "dev", "demo"})


class LazyGroup(ErrorGroup):
    """The root group: lists its commands by name and imports one only when
    asked for it (click's documented pattern for a large CLI)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return None
        module, name = where.split(":")
        command = getattr(importlib.import_module(module), name)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup)
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
