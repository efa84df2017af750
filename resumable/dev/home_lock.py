"""One ``resumable dev`` per home.

Two of them in one home share its embedded servers and its web port: the
second would run sessions on its own workers until its web process died on
the port, and stopping either would pull the servers from under the other.
So ``dev`` holds an exclusive ``flock`` on ``<home>/dev.lock`` for its whole
life, with its pid inside for the message a second one prints. The kernel
drops the lock when the process dies, however it dies (SIGKILL included), so
a stale file never blocks the next start; children do not inherit it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from resumable._internal.home import make_home
from resumable.errors import ConfigurationError

LOCK_NAME = "dev.lock"


class AnotherDevError(ConfigurationError):
    """Another ``resumable dev`` is running in this home."""


@contextlib.contextmanager
def dev_lock(home: Path) -> Iterator[None]:
    """Hold the home's dev lock; AnotherDevError if another ``dev`` holds it."""
    make_home(home)
    path = home / LOCK_NAME
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "unknown"
            raise AnotherDevError(
                f"another `resumable dev` (pid {owner}) is running in {home}; stop it,"
                " or give this one a RESUMABLE_HOME of its own"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
