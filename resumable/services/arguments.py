"""The Python API's checks of its callers' arguments.

The HTTP API refuses a malformed id, a NUL in a name or a limit out of range
with a 4xx before anything runs (its request models); `Client` checks the same
things here, so a caller gets a clear exception from ``resumable``
(``InvalidArgumentError``, a ``ValueError``, naming the argument) instead of a
psycopg or SQLAlchemy error from deep inside a query, and nothing is written.
"""

from __future__ import annotations

import math
import uuid

from resumable._internal import serialization
from resumable._internal.serialization import unstorable_text
from resumable.agent import MAX_NAME_LENGTH
from resumable.errors import (
    DeadLetterNotFoundError,
    InvalidArgumentError,
    InvalidCursorError,
    MalformedDeadLetterIdError,
    MalformedSessionIdError,
    NotSerializableError,
    UnstorableArgumentError,
)
from resumable.models.status import SessionStatus

#: As the HTTP API: ``Idempotency-Key`` and ``webhook-id`` are 1 to 256 bytes
#: (a header is bytes; here, the key's UTF-8), whichever way a key comes.
MAX_IDEMPOTENCY_KEY_LENGTH = 256
#: Agent names, topics and other names: as the HTTP API's request models.
#: The most rows one call returns (a bigint LIMIT beyond is an error in PostgreSQL).
MAX_LIMIT = 100_000
_BIGINT = 2**63 - 1


def session_id(value: object) -> uuid.UUID:
    """A session id (a UUID, or its text); for text that is not one,
    MalformedSessionIdError (a SessionNotFoundError and an InvalidArgumentError),
    InvalidArgumentError for anything else."""
    if isinstance(value, uuid.UUID):
        return value
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"a session id is a UUID or a string, got {type(value).__name__}"
        )
    try:
        return uuid.UUID(value)
    except ValueError:
        raise MalformedSessionIdError(f"{value!r} is not a session id") from None


def new_session_id(value: object, what: str) -> uuid.UUID | None:
    """An id to give a session being made (None: one is drawn)."""
    if value is None or isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise InvalidArgumentError(f"{what} must be a UUID, got {str(value)[:80]!r}")


def dead_letter_id(value: object) -> int:
    """A dead letter's id; DeadLetterNotFoundError for one no dead letter can have."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedDeadLetterIdError(f"{value!r} is not a dead letter id (an integer)")
    if not 1 <= value <= _BIGINT:
        raise DeadLetterNotFoundError(f"no dead letter {value}")
    return value


def text(value: object, what: str, max_length: int = MAX_NAME_LENGTH) -> str:
    """Non-empty text PostgreSQL can store, at most `max_length` characters."""
    storable(value, what)
    assert isinstance(value, str)
    if not value or len(value) > max_length:
        raise InvalidArgumentError(f"{what} must be 1 to {max_length} characters, got {len(value)}")
    return value


def storable(value: object, what: str) -> str:
    """Text of any length PostgreSQL can store (an actor, a reason)."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a string, got {type(value).__name__}")
    problem = unstorable_text(value)
    if problem:
        raise InvalidArgumentError(f"{what} contains {problem}")
    return value


def json_text(value: object, what: str) -> str:
    """`value` as the JSON text stored for it. One that JSON or PostgreSQL
    cannot hold (NUL, a lone surrogate, a set) is an argument error as well as
    unstorable: ``UnstorableArgumentError`` is both."""
    try:
        return serialization.dumps(value, what)
    except NotSerializableError as exc:
        raise UnstorableArgumentError(exc.message) from None


def idempotency_key(value: str | None) -> str | None:
    """1 to 256 bytes of UTF-8, not all blank (an empty key would dedupe as a
    real one), as the HTTP API and the CLI bound a key."""
    if value is None:
        return None
    storable(value, "idempotency_key")
    size = len(value.encode())
    if not value.strip() or size > MAX_IDEMPOTENCY_KEY_LENGTH:
        raise InvalidArgumentError(
            f"idempotency_key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} bytes (UTF-8), not blank;"
            f" got {size}"
        )
    return value


def count(value: object, what: str, *, minimum: int = 1, maximum: int = MAX_LIMIT) -> int:
    """A limit (or another count) from `minimum` to `maximum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be an integer, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise InvalidArgumentError(f"{what} must be from {minimum} to {maximum}, got {value}")
    return value


def position(value: object, what: str) -> int:
    """An ``after``/``before`` position (an event id, a seq, a version): 0 or more."""
    return count(value, what, minimum=0, maximum=_BIGINT)


def filter_text(value: object, what: str) -> str | None:
    """A list's filter by name (agent, step, error type): None, or text as a
    name is (the HTTP API's query models bound them alike)."""
    return None if value is None else text(value, what)


def session_status(value: object) -> str | None:
    """A list's status filter: None or one of the lifecycle's statuses
    (the HTTP API answers 422 for another; an empty page would hide the typo)."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in {status.value for status in SessionStatus}:
        known = ", ".join(status.value for status in SessionStatus)
        raise InvalidArgumentError(f"status must be one of {known}, got {str(value)[:80]!r}")
    return value


DEAD_LETTER_STATUSES = ("open", "retried", "discarded", "all")


def dead_letter_status(value: object) -> str:
    """A dead-letter list's status filter, as `session_status` for sessions."""
    if not isinstance(value, str) or value not in DEAD_LETTER_STATUSES:
        known = ", ".join(DEAD_LETTER_STATUSES)
        raise InvalidArgumentError(f"status must be one of {known}, got {str(value)[:80]!r}")
    return value


#: The longest a duration argument may be (a century, in seconds).
MAX_SECONDS = 100 * 365 * 86_400.0


def seconds(value: object, what: str) -> float:
    """A duration in seconds: a finite number from 0 to a century."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = type(value).__name__
        raise InvalidArgumentError(f"{what} must be a number of seconds, got {kind}")
    if not (math.isfinite(value) and 0 <= value <= MAX_SECONDS):
        raise InvalidArgumentError(f"{what} must be from 0 to {MAX_SECONDS:g} seconds, got {value}")
    return float(value)


def cursor(value: object) -> str | None:
    """A page cursor as a list handed it out: None or a string. An empty one
    is no cursor a list hands out (it read as "the first page", so a paging
    loop fed an empty `next_cursor` never ended), as over HTTP."""
    if value == "":
        raise InvalidCursorError("an empty cursor is not one this API handed out")
    if value is None or isinstance(value, str):
        return value
    kind = type(value).__name__
    raise InvalidArgumentError(f"cursor must be a string from next_cursor, got {kind}")
