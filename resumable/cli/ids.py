"""Ids as operators type them: a session id, or a unique prefix of one
(``3f2a9c1b`` from a table or a log line), and a dead letter's number or its
session's id. Several matches are an error that lists them, never a guess."""

from __future__ import annotations

import uuid

from resumable.errors import DeadLetterNotFoundError, ResumableError, SessionNotFoundError
from resumable.models import session_queries
from resumable.models.database import Database
from resumable.models.session_queries import SessionMatch

# Candidates listed when a prefix matches several.
SHOWN = 10
_HEX = frozenset("0123456789abcdef")


class AmbiguousIdError(ResumableError):
    """The id prefix matches more than one."""

    code = "ambiguous_id"


def _hex_prefix(text: str) -> str:
    prefix = text.strip().lower().replace("-", "")
    if not prefix or len(prefix) > 32 or not set(prefix) <= _HEX:
        raise SessionNotFoundError(f"{text[:60]!r} is not a session id or a prefix of one")
    return prefix


def _candidates(rows: list[SessionMatch], what: str, text: str) -> AmbiguousIdError:
    listed = ", ".join(f"{row.id} ({row.agent}, {row.status})" for row in rows[:SHOWN])
    more = " and more" if len(rows) > SHOWN else ""
    return AmbiguousIdError(
        f"{text!r} matches several {what}: {listed}{more}; give more characters"
    )


def resolve_session(db: Database, text: str) -> uuid.UUID:
    """The one session whose id is or starts with `text`."""
    prefix = _hex_prefix(text)
    with db.connection() as conn:
        rows = session_queries.sessions_by_id_prefix(conn, prefix, limit=SHOWN + 1)
    if not rows:
        raise SessionNotFoundError(f"no session {text.strip()!r}")
    if len(rows) > 1:
        raise _candidates(rows, "sessions", text.strip())
    return rows[0].id


def resolve_dead_letter(db: Database, text: str) -> int:
    """A dead letter's number, or the newest dead letter of the one session
    whose id is or starts with `text`."""
    stripped = text.strip()
    if stripped.isdigit() and len(stripped) < 19:
        with db.connection() as conn:
            found = session_queries.dead_letter_exists(conn, int(stripped))
        if found:
            return int(stripped)
    try:
        prefix = _hex_prefix(stripped)
    except SessionNotFoundError:
        raise DeadLetterNotFoundError(f"no dead letter {stripped[:60]!r}") from None
    with db.connection() as conn:
        rows = session_queries.dead_letters_by_session_prefix(conn, prefix, limit=SHOWN + 1)
    if not rows:
        raise DeadLetterNotFoundError(
            f"no dead letter {stripped!r} (neither its number nor its session's id)"
        )
    if len(rows) > 1:
        listed = [
            SessionMatch(row.session_id, row.agent, f"dead letter {row.dead_letter_id}")
            for row in rows
        ]
        raise _candidates(listed, "sessions with dead letters", stripped)
    return rows[0].dead_letter_id
