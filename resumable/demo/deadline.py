"""The demo's time budget and its one error.

The demo promises to finish in under a minute; every wait draws on one
budget, so a step that hangs turns into a clear "timed out waiting for X"
instead of a demo that never ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class DemoError(Exception):
    """Something the demo waited for did not happen; the message says what."""


class Deadline:
    """The demo's time budget, shared by every wait so the whole story ends on time."""

    def __init__(self, seconds: float, interrupted: Callable[[], None] = lambda: None) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds
        self._interrupted = interrupted  # raises if the demo must stop now

    def remaining(self) -> float:
        return self._end - time.monotonic()

    def wait_for(self, what: str, predicate: Callable[[], object], limit: float = 30.0) -> None:
        """Poll `predicate` until it is truthy; DemoError after `limit` or the deadline."""
        end = time.monotonic() + min(limit, max(self.remaining(), 0.0))
        while not predicate():
            self._interrupted()
            if time.monotonic() >= end:
                raise DemoError(f"timed out waiting for {what}")
            time.sleep(0.02)
