"""`resumable dev`: every process of the Procfile on one machine (placeholder)."""

from __future__ import annotations

from rich.console import Console

from resumable.settings import Settings


def run_dev(settings: Settings, console: Console, agents: list[str]) -> int:
    """Not built yet; see issue 6."""
    console.print("[red]resumable dev is not implemented yet[/red]")
    return 1
