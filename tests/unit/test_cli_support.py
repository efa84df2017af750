"""The command line's error handling, on click's test runner: which failures
are one line, and how a genuine bug still shows its traceback."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import click
import psycopg
import pytest
from click.testing import CliRunner

from resumable.cli.failures import ErrorGroup, describe
from resumable.errors import SessionNotFoundError


@click.group(cls=ErrorGroup)
def cli() -> None:
    pass


@cli.command()
@click.argument("what")
def boom(what: str) -> None:
    if what == "bug":
        raise KeyError("the_missing_key")
    if what == "driver":
        raise psycopg.OperationalError("connection is bad: server closed the connection")
    raise SessionNotFoundError("no session 1234")


@pytest.fixture
def root_level() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    level = root.level
    yield root
    root.setLevel(level)


@pytest.mark.parametrize(
    ("what", "line"),
    [
        ("known", "error: no session 1234 [session_not_found]"),
        ("driver", "error: cannot use PostgreSQL (check DATABASE_URL): connection is bad: "
         "server closed the connection"),
        ("bug", "error: unexpected KeyError: 'the_missing_key' (a bug: run with --log-level "
         "DEBUG for the traceback)"),
    ],
)  # fmt: skip
def test_failures_are_one_line_on_stderr(root_level: logging.Logger, what: str, line: str) -> None:
    root_level.setLevel(logging.INFO)
    result = CliRunner().invoke(cli, ["boom", what])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.strip() == line


def test_a_bug_keeps_its_traceback_when_debugging(root_level: logging.Logger) -> None:
    root_level.setLevel(logging.DEBUG)
    result = CliRunner().invoke(cli, ["boom", "bug"])
    assert isinstance(result.exception, KeyError)
    assert result.stderr == ""


def test_usage_errors_are_one_line_with_a_pointer_to_help() -> None:
    result = CliRunner().invoke(cli, ["boom"])
    assert result.exit_code == 2
    assert result.stderr.strip() == ("error: Missing argument 'WHAT'. (see `cli boom --help`)")


def test_an_unknown_relation_says_to_migrate() -> None:
    message = describe(psycopg.errors.UndefinedTable('relation "sessions" does not exist'))
    assert message is not None and "run `resumable db upgrade`" in message


@pytest.mark.parametrize(
    ("args", "line"),
    [
        ([], "error: missing command: one of db, worker, web, scheduler, dev, demo, enqueue, "
         "sessions, reconcile, dlq, schedules, concurrency, rate-limits, shared, services "
         "(see `resumable --help`)"),
        (["dlq"], "error: missing command: one of list, show, retry, discard, drain "
         "(see `resumable dlq --help`)"),
    ],
)  # fmt: skip
def test_a_group_called_without_its_command_says_so_in_one_line(args: list[str], line: str) -> None:
    """Click's message for it is the group's whole help text, which came out
    as a 20-line 'error: Usage: ...'."""
    from resumable.cli import main

    result = CliRunner().invoke(main, args, prog_name="resumable")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.strip() == line
