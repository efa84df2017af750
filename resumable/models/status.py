"""Session and tool-call statuses; each value is the string stored in PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class SessionStatus(StrEnum):
    """Where a session is in its lifecycle (see DESIGN.md, "Session lifecycle")."""

    PENDING = "pending"  # waiting for a worker to pick it up
    RUNNING = "running"  # a worker holds its lease and is running steps
    SUSPENDED = "suspended"  # waiting for a callback, signal, timer or poll; no worker held
    RETRYING = "retrying"  # a step failed transiently; the next attempt is scheduled
    COMPENSATING = "compensating"  # failed for good; saga compensations are running
    COMPLETED = "completed"  # finished with a result
    FAILED = "failed"  # finished with an error (and a dead-letter entry)
    CANCELLED = "cancelled"  # stopped by an operator
    BLOCKED = "blocked"  # replay diverged from the record: parked until an operator acts

    @property
    def is_terminal(self) -> bool:
        """Whether no step will ever run again for a session in this status."""
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset(
    {SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.CANCELLED}
)


class ToolCallStatus(StrEnum):
    """Progress of one idempotent tool call."""

    STARTED = "started"  # claimed; the side effect may or may not have happened
    COMPLETED = "completed"  # the result is recorded and is returned on replay
    FAILED = "failed"  # the tool raised; a later attempt calls it again with the same key


class SagaOutcome(StrEnum):
    """What became of a dead-lettered session's compensations."""

    NONE = "none"  # it had nothing to compensate
    COMPLETED = "completed"  # every compensation ran
    FAILED = "failed"  # a compensation kept failing: an operator must step in


def sql_values(members: Iterable[StrEnum]) -> str:
    """The members as a SQL list of string literals (for CHECK constraints), in
    declaration order, so the constraint text stays what the migrations wrote."""
    return ",".join(f"'{member.value}'" for member in members)
