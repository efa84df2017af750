"""docs/cli.md is generated from the click commands and must not go stale."""

from __future__ import annotations

from pathlib import Path

import click

from resumable.cli.main import main
from resumable.cli.reference import commands, render

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_cli_md_is_up_to_date() -> None:
    assert REFERENCE.read_text() == render(), (
        "docs/cli.md is stale: run `python -m resumable.cli.reference > docs/cli.md`"
    )


def test_every_command_and_option_has_its_place() -> None:
    text = REFERENCE.read_text()
    found = list(commands(main, click.Context(main, info_name="resumable")))
    names = [ctx.command_path for ctx, _ in found]
    assert "resumable sessions list" in names and "resumable dlq drain" in names
    for ctx, depth in found:
        assert f"\n{'#' * depth} {ctx.command_path}\n" in text
        for param in ctx.command.params:
            if isinstance(param, click.Option):
                assert f"| `{param.opts[0]}`" in text
    assert "| `--action` | one of `retry`, `discard` | Required." in text
    assert "| `--limit` | whole number, at least 1, at most 100000 | Default: `100`. |" in text
