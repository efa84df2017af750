"""The Python API's checks of its callers' arguments.

The HTTP API refuses a malformed id, a NUL in a name or a limit out of range
with a 4xx before anything runs (its request models); `Client` checks the same
things here, so a caller gets a clear exception from ``resumable``
(``InvalidArgumentError``, a ``ValueError``, naming the argument) instead of a
psycopg or SQLAlchemy error from deep inside a query, and nothing is written.
"""

from __future__ import annotations

import uuid

from resumable.errors import DeadLetterNotFoundError, InvalidArgumentError, SessionNotFoundError
from resumable.serialization import unstorable_text

#: As the HTTP API: ``Idempotency-Key`` and ``webhook-id`` are 1 to 256 bytes
#: (a header is bytes; here, the key's UTF-8), whichever way a key comes.
MAX_IDEMPOTENCY_KEY_LENGTH = 256
#: Agent names, topics and other names: as the HTTP API's request models.
MAX_NAME_LENGTH = 200
#: The most rows one call returns (a bigint LIMIT beyond is an error in PostgreSQL).
MAX_LIMIT = 100_000
_BIGINT = 2**63 - 1


def session_id(value: object) -> uuid.UUID:
    """A session id (a UUID, or its text); SessionNotFoundError for text that
    names no session, InvalidArgumentError for anything else."""
    if isinstance(value, uuid.UUID):
        return value
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"a session id is a UUID or a string, got {type(value).__name__}"
        )
    try:
        return uuid.UUID(value)
    except ValueError:
        raise SessionNotFoundError(f"{value!r} is not a session id") from None


def dead_letter_id(value: object) -> int:
    """A dead letter's id; DeadLetterNotFoundError for one no dead letter can have."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise DeadLetterNotFoundError(f"{value!r} is not a dead letter id (an integer)")
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
