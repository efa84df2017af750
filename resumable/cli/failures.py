"""How every ``resumable`` command fails: one line on stderr and exit status
1 (2 for a bad argument), never a traceback unless asked for.

Kept apart from :mod:`resumable.cli.support` and light to import: the root
group needs it before it knows which command runs, and a command that fails
on its arguments should not first load the database driver and the broker.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape

from resumable.errors import (
    NO_SCHEMA_MESSAGE,
    InvalidArgumentError,
    InvalidDrainError,
    ResumableError,
)

console = Console()
errors = Console(stderr=True)


def fail(message: str, status: int = 1) -> NoReturn:
    errors.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    sys.exit(status)


def describe(exc: BaseException) -> str | None:
    """One line for a failure an operator can act on; None for a bug."""
    if isinstance(exc, ResumableError):
        return f"{exc.message} [{exc.code}]"
    # Only a failing command gets here: the driver's and the probes' modules
    # are loaded by then if they had any part in it.
    import psycopg
    import sqlalchemy.exc

    from resumable._internal.reachability import reason, which_server

    undefined = (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn)
    orig = exc.orig if isinstance(exc, sqlalchemy.exc.DBAPIError) else exc
    if isinstance(orig, undefined):
        return f"{NO_SCHEMA_MESSAGE} ({reason(orig)})"
    server = which_server(exc)
    if server == "database":
        return f"cannot use PostgreSQL (check DATABASE_URL): {reason(exc)}"
    if server == "redis":
        return f"cannot use Redis (check REDIS_URL): {reason(exc)}"
    if isinstance(exc, OSError) and exc.strerror and not isinstance(exc, BrokenPipeError):
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return None


# Click repeats a refused value in its message: one longer than this (a
# 50,000-digit number) is cut, so the line stays one a person can read.
MAX_SHOWN_VALUE = 60
_LONG_VALUE = re.compile(rf"[^\s']{{{MAX_SHOWN_VALUE + 1},}}")


def _cut_long_values(message: str) -> str:
    return _LONG_VALUE.sub(
        lambda m: f"{m.group()[:MAX_SHOWN_VALUE]}... ({len(m.group()):,} characters)", message
    )


def usage_error(exc: click.ClickException) -> NoReturn:
    """A bad argument or option: one line (click's default adds a usage block)
    and click's exit status (2)."""
    hint = ""
    message = _cut_long_values(exc.format_message())
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        hint = f" (see `{exc.ctx.command_path} --help`)"
        command = exc.ctx.command
        if isinstance(exc, click.exceptions.NoArgsIsHelpError) and isinstance(command, click.Group):
            # Its message is the whole help text: a group called alone says
            # what it takes instead, on one line as every error is.
            message = f"missing command: one of {', '.join(command.list_commands(exc.ctx))}"
    errors.print(
        f"[red]error:[/red] {escape(message)}{escape(hint)}",
        highlight=False,
        soft_wrap=True,
    )
    sys.exit(exc.exit_code)


class ErrorGroup(click.Group):
    """Turns every foreseeable failure into one line on stderr and exit
    status 1 (2 for a bad argument); a bug also gets one line, and its
    traceback with --log-level DEBUG."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """In the order they were written (most used first), not click's
        alphabetical one: ``--help`` and the reference read as a guide."""
        return list(self.commands)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            usage_error(exc)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            usage_error(exc)
        except (click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            message = describe(exc)
            if message is not None:
                # A value the command cannot take (found past click's own
                # checks: an empty filter, a cursor, a patch) is a bad argument.
                bad = isinstance(exc, InvalidArgumentError | InvalidDrainError)
                fail(message, 2 if bad else 1)
            if logging.getLogger().isEnabledFor(logging.DEBUG):
                raise
            fail(
                f"unexpected {type(exc).__name__}: {exc} "
                "(a bug: run with --log-level DEBUG for the traceback)"
            )
