"""Shared documents as one step sees them: reads, and updates that commit with
the step.

Why row locks held only inside the commit, not optimistic versions: an update
is a pure function of the current value (``ctx.update_shared(name, fn)``), so
the runner can apply it to the value as it is *at commit time*, under a row
lock taken after the step's own ``COMMIT_STEP`` succeeded and released by the
same commit. No transaction is open while the step runs, a contended update
never re-runs the step (its tool calls, its LLM call), and no write is lost.
Optimistic versions would re-run the whole step on every conflict: with 100
sessions on one counter almost every commit conflicts (measured in
``benchmarks/coordination.py``). The price: ``fn`` may be called more than
once (at least once while the step runs, to validate it and show the step
its own write, and once at commit), so it must be pure and deterministic.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import psycopg

from resumable._internal import serialization
from resumable.errors import InvalidArgumentError, ResumableError
from resumable.models import coordination_ops
from resumable.models.coordination_queries import SharedDocument, SharedVersion
from resumable.models.database import Database

#: Longest accepted document or lock name (a btree key, and a readable one).
MAX_NAME_LENGTH = 200

Update = Callable[[Any], Any]


class CoordinationError(ResumableError):
    """A shared document, lock or child session was used incorrectly."""

    code = "coordination_error"


class InvalidNameError(CoordinationError, InvalidArgumentError):
    """A shared document's or lock's name that none can have: a step's
    CoordinationError, and the InvalidArgumentError a `Client` call raises."""


class SharedUpdateError(CoordinationError):
    """A shared-document update function failed when applied at commit."""

    code = "shared_update_failed"


#: Versions are PostgreSQL bigints; pages are bounded like every other list.
MAX_VERSION = 2**63 - 1
MAX_PAGE = 10_000


def check_name(name: object, what: str = "shared document") -> str:
    """A name is a non-empty string of printable text, at most 200 characters."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_LENGTH:
        raise InvalidNameError(
            f"a {what} name must be a non-empty string of at most {MAX_NAME_LENGTH} characters"
        )
    if "\x00" in name or not name.isprintable():
        raise InvalidNameError(f"a {what} name must be printable text, got {name!r}")
    return name


def read(db: Database, name: str) -> SharedDocument | None:
    """The document as committed now, or None if it was never written."""
    with db.connection() as conn:
        return coordination_ops.read_shared(conn, check_name(name))


class SharedState:
    """The shared documents of one step: what it read, what it will write."""

    def __init__(self, db: Database, session_id: uuid.UUID, step: str) -> None:
        self._db = db
        self._session_id = session_id
        self._step = step
        self._read: dict[str, Any] = {}
        #: Update functions per document, in call order; applied at commit.
        self.pending: dict[str, list[Update]] = {}

    def get(self, name: str, default: Any = None) -> Any:
        """The document's value with this step's own updates applied."""
        check_name(name)
        if name not in self._read:
            document = read(self._db, name)
            self._read[name] = None if document is None else document.value
        value = self._read[name]
        for fn in self.pending.get(name, ()):
            value = fn(value)
        return default if value is None else value

    def update(self, name: str, fn: Update) -> Any:
        """Queue `fn` for commit; return its value applied to what the step sees now."""
        check_name(name)
        if not callable(fn):
            raise CoordinationError("update_shared needs a function of the current value")
        preview = fn(self.get(name))  # fails inside the step, where errors belong
        serialization.dumps(preview, f"shared document {name!r}")
        self.pending.setdefault(name, []).append(fn)
        return preview

    def transaction(self, conn: psycopg.Connection[Any]) -> AbstractContextManager[Any]:
        """The step's commit as a transaction when it writes shared documents;
        else nothing (the commit stays one autocommitted statement)."""
        return conn.transaction() if self.pending else nullcontext()

    def write(self, conn: psycopg.Connection[Any], seq: int) -> None:
        """Apply the queued updates to the locked current values; call inside
        ``transaction`` after the step's own commit statement succeeded."""
        if not self.pending:
            return
        names = sorted(self.pending)
        current = coordination_ops.lock_shared(conn, names)
        docs = []
        for name in names:
            value = current[name].value
            try:
                for fn in self.pending[name]:
                    value = fn(value)
                serialization.dumps(value, f"shared document {name!r}")
            except Exception as exc:
                raise SharedUpdateError(
                    f"updating shared document {name!r} at commit failed: {exc!r}"
                ) from exc
            docs.append({"name": name, "value": value, "version": current[name].version + 1})
        coordination_ops.write_shared(
            conn, docs, session_id=self._session_id, seq=seq, step=self._step
        )


def history(
    db: Database, name: str, *, limit: int = 100, before: int | None = None
) -> list[SharedVersion]:
    """The document's committed values, newest first, older than version
    `before` when given."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise CoordinationError(f"limit must be a whole number from 1 to {MAX_PAGE}, got {limit!r}")
    if before is not None and (
        isinstance(before, bool) or not isinstance(before, int) or not 1 <= before <= MAX_VERSION
    ):
        raise CoordinationError(
            f"before must be a version number from 1 to {MAX_VERSION}, got {before!r}"
        )
    with db.connection() as conn:
        return coordination_ops.shared_history(conn, check_name(name), limit=limit, before=before)
