"""The ``resumable`` command line (``main`` is the console script's entry point)."""

from resumable.cli.main import main

__all__ = ["main"]
