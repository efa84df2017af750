"""Recording inbound events: callbacks from external systems and signals.

A delivery is committed before it is acknowledged and deduplicated by the
sender's id. It is offered to the session in the same transaction, with the
session row locked from the start: the wake either sees the session
suspended, or the worker, whose suspension waits for this commit, sees the
delivery when it has suspended (see ``wait_queries``). A delivery costs one
commit, and the woken session's queue message one Redis round trip.

A callback, the path external systems hammer, is two round trips to
PostgreSQL: the BEGIN, the locks, the lookups, the delivery (inserted only
if the callback is still open) and the wake are pipelined together
(psycopg's pipeline mode), the verdict is read from the lookups, and then
the commit; a refused callback's audit event follows in its own statement.

The woken session's queue message is sent before the commit, while the
transaction still holds the session row: the worker's way to its claim (the
Redis wake-up, the hand-off to a thread) then runs alongside the commit's WAL
flush instead of after it, about half a millisecond of every resume. The
claim locks the row whatever its status, so it waits for this commit and
sees the session woken (see ``step_queries._claim``); if the commit fails
instead, the claim finds the session still suspended and the message is a
harmless duplicate. The 2xx still waits for the commit (a delivery is
durable before it is acknowledged).

The web process takes callbacks on its event loop instead
(``async_callbacks``): the same statements and verdicts (``judge_callback``),
awaited on an async connection.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from resumable._internal import serialization
from resumable.broker.messages import enqueue_after_commit
from resumable.models import wait_ops
from resumable.models.database import Database, pipelined_transaction
from resumable.models.status import TERMINAL_STATUSES
from resumable.models.wait_ops import CallbackReceived, CallbackTarget, Rejection, StoredDelivery
from resumable.priorities import Priority, Routed
from resumable.settings import Settings

if TYPE_CHECKING:
    import dramatiq

logger = logging.getLogger(__name__)


class Verdict(StrEnum):
    """What became of a delivery; the web layer maps each to an HTTP status."""

    ACCEPTED = "accepted"  # stored; will be (or was just) consumed by the session
    DUPLICATE = "duplicate"  # the same delivery id was seen before; nothing new stored
    REUSED = "reused"  # the same delivery id came before with another body; refused
    UNKNOWN = "unknown"  # no such callback token or session
    CLOSED = "closed"  # the wait or the session is over; recorded in the audit log


@dataclass(frozen=True)
class Receipt:
    verdict: Verdict
    message: str
    session_id: uuid.UUID | None = None
    delivery_id: int | None = None
    woke: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.verdict.value,
            "message": self.message,
            "session_id": None if self.session_id is None else str(self.session_id),
            "delivery_id": self.delivery_id,
        }


class Inbox:
    """Stores deliveries and wakes the sessions waiting for them."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        broker: dramatiq.Broker,
        *,
        send: Callable[[Routed], None] | None = None,
    ) -> None:
        """`send`, when given, takes a woken session's message off the
        caller's thread (the web process: its sender on the event loop, so
        a stalled broker holds neither the request nor the session row)."""
        self.settings = settings
        self.db = db
        self.broker = broker
        self.send = send

    def wake(self, session_id: uuid.UUID) -> bool:
        """Offer pending deliveries to the session; enqueue it if one woke it."""
        with self.db.connection() as conn:
            woke = wait_ops.wake_from_deliveries(conn, session_id)
        if woke is not None:
            self.enqueue(session_id, woke.priority)
        return woke is not None

    def enqueue(self, session_id: uuid.UUID, priority: Priority = "normal") -> None:
        """Send the woken session's queue message (after the wake statement;
        before or after its commit). A failed send is the one policy's: the
        wake-up is (or is about to be) committed, the session pending, and
        the scheduler's reconciler sends the message once Redis is back; if
        the commit fails instead, there was nothing to send."""
        if self.send is not None:
            self.send(Routed(session_id, priority))
            return
        enqueue_after_commit(
            self.broker, self.settings, [Routed(session_id, priority)], why="session woken"
        )

    def callback(self, token: str, payload: Any, dedupe_key: str | None) -> Receipt:
        encoded = serialization.dumps(payload, "callback payload")
        # One round trip for the BEGIN, the locks, the lookups, the guarded
        # insert and the wake, whose answers name the verdict; the queue
        # message, then the commit (see the module's docstring).
        with self.db.connection() as conn, pipelined_transaction(conn):
            got = wait_ops.receive_callback(conn, token, payload=encoded, dedupe_key=dedupe_key)
            if got.target is not None and got.woke:
                # Ours, or (on a path that stored nothing) a delivery that an
                # earlier receiver committed and died before waking it with.
                self.enqueue(got.target.session_id, got.priority)
        receipt, rejection = judge_callback(got, token, payload, dedupe_key)
        if rejection is not None:
            with self.db.connection() as conn:
                wait_ops.rejected_delivery(conn, rejection)
        return receipt

    def signal(
        self,
        session_id: uuid.UUID,
        topic: str,
        payload: Any,
        dedupe_key: str | None,
        actor: str,
    ) -> Receipt:
        encoded = serialization.dumps(payload, "signal payload")
        # The BEGIN rides with the lock; each later statement is one round trip.
        with self.db.connection() as conn, pipelined_transaction(conn):
            session = wait_ops.lock_session_for_signal(conn, session_id)
            if session is None:
                return Receipt(Verdict.UNKNOWN, "no such session")
            if dedupe_key:
                previous = wait_ops.signal_delivery(
                    conn, session_id, topic=topic, dedupe_key=dedupe_key
                )
                if previous is not None:
                    return _repeat(previous, payload, session_id, "signal")
            if session.status in TERMINAL_STATUSES:
                reason = f"the session is {session.status}; it takes no more signals"
                wait_ops.rejected_delivery(
                    conn,
                    Rejection(
                        session_id,
                        step_seq=session.step_seq,
                        step=session.cursor,
                        event="signal_rejected",
                        payload={"topic": topic, "reason": reason, "by": actor},
                    ),
                )
                return Receipt(Verdict.CLOSED, reason, session_id)
            delivery_id = wait_ops.insert_signal_delivery(
                conn,
                session_id,
                topic=topic,
                dedupe_key=dedupe_key,
                payload=encoded,
                step_seq=session.step_seq,
                step=session.cursor,
                actor=actor,
            )
            if delivery_id is None:  # a concurrent duplicate won the unique index
                previous = wait_ops.signal_delivery(
                    conn, session_id, topic=topic, dedupe_key=dedupe_key
                )
                if previous is None:  # pragma: no cover - the winner's row cannot vanish
                    return Receipt(Verdict.DUPLICATE, "signal already received", session_id)
                return _repeat(previous, payload, session_id, "signal")
            # The session row is locked since LOCK_SESSION_FOR_SIGNAL: see wait_queries.
            woke = wait_ops.wake_from_deliveries(conn, session_id)
            if woke is not None:
                self.enqueue(session_id, woke.priority)  # before the commit, as for a callback
        return Receipt(
            Verdict.ACCEPTED, "signal accepted", session_id, delivery_id, woke is not None
        )


def judge_callback(
    got: CallbackReceived, token: str, payload: Any, dedupe_key: str | None
) -> tuple[Receipt, Rejection | None]:
    """What a callback's transaction found, as the sender's receipt, and the
    audit event to record after it when the callback was refused."""
    target, previous = got.target, got.previous
    if got.delivery_id is not None:
        assert target is not None
        receipt = Receipt(
            Verdict.ACCEPTED, "callback accepted", target.session_id, got.delivery_id, got.woke
        )
        return receipt, None
    if target is None:
        return Receipt(Verdict.UNKNOWN, "no callback with this token"), None
    session_id = target.session_id
    if previous is not None and dedupe_key and previous.dedupe_key == dedupe_key:
        return _repeat(previous, payload, session_id, "delivery"), None
    reason = _closed_reason(target, already_delivered=previous is not None)
    if reason is None:  # pragma: no cover - the guard and the lookups saw the same rows
        raise RuntimeError(f"callback {token!r}: open, yet its delivery was not stored")
    rejection = Rejection(
        session_id,
        step_seq=target.step_seq,
        step=target.cursor,
        event="callback_rejected",
        payload={"topic": target.topic, "reason": reason, "dedupe_key": dedupe_key},
    )
    return Receipt(Verdict.CLOSED, reason, session_id), rejection


def _repeat(previous: StoredDelivery, payload: Any, session_id: uuid.UUID, what: str) -> Receipt:
    """A delivery under an id seen before: a duplicate if the body is the same
    JSON, otherwise a reuse of the id for something else (refused, as
    ``POST /v1/sessions`` refuses an Idempotency-Key reused for another body)."""
    delivery_id = previous.id
    if serialization.canonical(previous.payload) == serialization.canonical(payload):
        message = f"this {what} was already received"
        return Receipt(Verdict.DUPLICATE, message, session_id, delivery_id)
    return Receipt(
        Verdict.REUSED,
        f"this {what} id was already used for a different body (delivery {delivery_id})",
        session_id,
        delivery_id,
    )


def _closed_reason(target: CallbackTarget, *, already_delivered: bool) -> str | None:
    """Why a callback can no longer be delivered, or None if it can."""
    if target.session_status in TERMINAL_STATUSES:
        return f"the session is {target.session_status}; its callbacks are closed"
    if already_delivered:
        return "this single-use callback was already delivered"
    if target.callback_status == "closed":
        return "the wait for this callback has ended (it already fired or timed out)"
    return None
