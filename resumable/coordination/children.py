"""Child sessions: a step spawns them, a later step waits for them.

``ctx.spawn(agent, input)`` returns the child's id at once; the child is
created in the parent step's commit transaction (so a failed step spawns
nothing) and enqueued after it. The id is a UUID derived from the parent,
the step's sequence number and the call's index in the step, so a replayed
step finds the children it made and creates none twice.

``return ctx.wait(Children(ids), then=...)`` suspends the parent. Whenever a
child finishes (completes, is dead-lettered, cancelled) the parent is
checked and woken once enough have, with their results and failures in
``ctx.wake.payload``. The check also runs right after the parent suspends
(children may all have finished already) and from the scheduler (a worker
that died between a child's commit and its check). Cancelling a parent
cancels its unfinished children, and theirs.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

import psycopg

from resumable._internal import serialization
from resumable.agent import checked_name
from resumable.broker.messages import enqueue_after_commit
from resumable.coordination import locks
from resumable.coordination.shared import CoordinationError
from resumable.models import coordination_ops
from resumable.models.database import Database
from resumable.priorities import Priority, Routed
from resumable.settings import Settings

if TYPE_CHECKING:
    import dramatiq

logger = logging.getLogger(__name__)

#: Namespace of child-session ids (uuid5 of parent, step sequence, call index).
CHILD_NAMESPACE = uuid.UUID("4f2b9c1e-7d3a-5e8f-9a6b-0c1d2e3f4a5b")


def child_id(parent_id: uuid.UUID, seq: int, index: int) -> uuid.UUID:
    return uuid.uuid5(CHILD_NAMESPACE, f"{parent_id}:{seq}:{index}")


class Spawns:
    """The children one step asks for, created when it commits."""

    def __init__(self, parent_id: uuid.UUID, seq: int, priority: Priority = "normal") -> None:
        #: The parent's, which its children are created with (SPAWN_CHILDREN).
        self.priority = priority
        self.parent_id = parent_id
        self.seq = seq
        self.children: list[dict[str, Any]] = []

    def spawn(self, agent: str, input: Any) -> uuid.UUID:
        if not isinstance(agent, str) or not agent:
            raise CoordinationError("spawn needs an agent name")
        # A name no session could be started with (NUL, 201 characters) is the
        # step's mistake, refused here: not a commit that fails on every retry.
        checked_name(agent, "child agent name")
        new_id = child_id(self.parent_id, self.seq, len(self.children))
        serialization.dumps(input, f"input of child {new_id}")
        self.children.append({"id": str(new_id), "agent": agent, "input": input})
        return new_id

    def write(self, conn: psycopg.Connection[Any]) -> None:
        """Inside the step's commit transaction."""
        if self.children:
            coordination_ops.spawn_children(conn, self.parent_id, self.children)

    def enqueue(self, broker: dramatiq.Broker, settings: Settings) -> None:
        """After the commit."""
        sends = [Routed(child["id"], self.priority) for child in self.children]
        enqueue_after_commit(broker, settings, sends, why="child sessions spawned")


def wake_parent(
    db: Database,
    broker: dramatiq.Broker,
    settings: Settings,
    *,
    parent_id: uuid.UUID | None = None,
    child_id: uuid.UUID | None = None,
) -> bool:
    """Wake the parent (named, or of `child_id`) if enough of its children
    finished; the failures it is woken with under ``inform`` are its to handle
    (their dead letters discarded, their alerts cancelled: see WAKE_PARENT)."""
    with db.connection() as conn:
        woken = coordination_ops.wake_parent(conn, parent_id=parent_id, child_id=child_id)
    if woken is None:
        return False
    parent = str(woken.id)
    handled = woken.handled
    if handled:
        logger.info(
            "dead letter(s) %s of failed children handled by their parent %s",
            ", ".join(str(i) for i in handled),
            parent,
            extra={"action": "dead_letter_handled", "session_id": parent, "dead_letters": handled},
        )
    enqueue_after_commit(
        broker, settings, [Routed(woken.id, woken.priority)], why="parent woken by its children"
    )
    return True


def session_finished(
    db: Database, broker: dramatiq.Broker, settings: Settings, session_id: uuid.UUID
) -> None:
    """A session completed, failed for good or was cancelled: its locks go to
    the next waiters and its parent (if any) may wake. Best effort: what
    fails here the scheduler's backstops (``grant_locks``, ``wake_parents``) redo."""
    try:
        with db.connection() as conn:
            finished = coordination_ops.session_finished(conn, session_id)
        if finished is None:
            return
        names = set(finished.names or ())
        if names:
            locks.grant_and_wake(db, broker, settings, names)
        if finished.parent_id is not None:
            parent_id = finished.parent_id
            if not _parent_still_waiting_for_all(db, parent_id):
                wake_parent(db, broker, settings, parent_id=parent_id)
    except Exception:
        logger.warning(
            "releasing locks or waking the parent failed; the scheduler will",
            exc_info=True,
            extra={"action": "session_finished_hooks_failed"},
        )


def _parent_still_waiting_for_all(db: Database, parent_id: uuid.UUID) -> bool:
    """Whether the parent certainly cannot wake yet (it waits for all the
    children it names and one is still running): one index probe, so that
    fan-in of N children costs N, not N squared."""
    with db.connection() as conn:
        return coordination_ops.still_waiting_for_all(conn, parent_id)


def wake_waiting_parents(db: Database, broker: dramatiq.Broker, settings: Settings) -> int:
    """The scheduler's backstop for parents whose wake-up was missed."""
    with db.connection() as conn:
        parents = coordination_ops.waiting_parents(conn, limit=500)
    return sum(wake_parent(db, broker, settings, parent_id=p) for p in parents)


def unfinished_children(db: Database, parent_id: uuid.UUID) -> list[uuid.UUID]:
    with db.connection() as conn:
        return coordination_ops.unfinished_children(conn, parent_id)
