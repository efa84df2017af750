"""The typed functions that run ``wait_queries``' statements (suspending,
waking, inbound deliveries), one per statement, in its order; that module
holds the SQL and why it is written so."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import kwargs_row, scalar_row, tuple_row

from resumable._internal import serialization
from resumable.models import callback_tokens, rows
from resumable.models.records import CallbackRecord
from resumable.models.status import TERMINAL_STATUSES
from resumable.models.wait_queries import (
    CALLBACK_DELIVERY,
    CALLBACKS_BY_TOKEN,
    CREATE_CALLBACK,
    DELIVERY_AGE,
    INSERT_OPEN_CALLBACK_DELIVERY,
    INSERT_SIGNAL_DELIVERY,
    LOCK_CALLBACK,
    LOCK_SESSION_FOR_SIGNAL,
    LOCK_SESSION_OF_CALLBACK,
    REJECTED_DELIVERY,
    RESUSPEND_AFTER_POLL,
    SIGNAL_DELIVERY,
    STRANDED_DELIVERIES,
    WAKE_DUE,
    WAKE_FROM_CALLBACK,
    WAKE_FROM_DELIVERIES,
)
from resumable.priorities import Priority


def create_callback(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    epoch: int,
    *,
    token: str,
    step_seq: int,
    call_index: int,
    topic: str,
) -> str | None:
    """The step's callback token at this call index (`token` if new); None
    if this epoch no longer holds the session."""
    params = {
        "session_id": session_id,
        "epoch": epoch,
        "token": token,
        "step_seq": step_seq,
        "call_index": call_index,
        "topic": topic,
    }
    row = rows.one(conn, _CreatedCallback, CREATE_CALLBACK, params)
    if row is None or not row.owned or row.token is None:
        return None
    return row.token


@dataclass(frozen=True)
class _CreatedCallback:
    owned: int
    token: str | None


@dataclass(frozen=True)
class Woken:
    """A row of WAKE_FROM_DELIVERIES (and WAKE_FROM_CALLBACK)."""

    id: uuid.UUID
    delivery_id: int
    kind: str
    priority: Priority = "normal"  # the lane its message goes on


def wake_from_deliveries(conn: psycopg.Connection[Any], session_id: uuid.UUID) -> Woken | None:
    """Wake the suspended session with its oldest matching pending delivery;
    None if none woke it."""
    return rows.one(conn, Woken, WAKE_FROM_DELIVERIES, {"id": session_id})


def stranded_deliveries(conn: psycopg.Connection[Any], *, limit: int) -> list[uuid.UUID]:
    return [uuid.UUID(str(i)) for i in rows.values(conn, STRANDED_DELIVERIES, {"limit": limit})]


@dataclass(frozen=True)
class WokenByTime:
    """A row of WAKE_DUE: a session woken, and by what (timer, timeout, poll_check)."""

    id: uuid.UUID
    kind: str
    priority: Priority = "normal"  # the lane its message goes on


def wake_due(conn: psycopg.Connection[Any], *, limit: int) -> list[WokenByTime]:
    return rows.every(conn, WokenByTime, WAKE_DUE, {"limit": limit})


def resuspend_after_poll(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, epoch: int, *, wake_at: datetime
) -> bool:
    """Back to sleep until the next check; False if the epoch moved on."""
    params = {"id": session_id, "epoch": epoch, "wake_at": wake_at}
    return rows.found(conn, RESUSPEND_AFTER_POLL, params)


@dataclass(frozen=True)
class CallbackTarget:
    """A row of LOCK_CALLBACK: the callback and where its session stands."""

    token: str
    session_id: uuid.UUID
    topic: str
    callback_status: str
    session_status: str
    step_seq: int
    cursor: str | None


@dataclass(frozen=True)
class StoredDelivery:
    """A row of CALLBACK_DELIVERY or SIGNAL_DELIVERY: a delivery stored before."""

    id: int
    status: str
    payload: Any
    dedupe_key: str | None = None


@dataclass(frozen=True)
class CallbackReceived:
    """What the statements of a callback's transaction found and did."""

    target: CallbackTarget | None  # None: no callback with this token
    previous: StoredDelivery | None  # what was delivered for the token before
    delivery_id: int | None  # stored now (None: refused, see `target` and `previous`)
    woke: bool  # its session was woken (by this delivery, or a stranded one)
    priority: Priority = "normal"  # the woken session's, for its message's lane


def _receipt_params(token: str, payload: str, dedupe_key: str | None) -> dict[str, Any]:
    return {
        "token": token,
        "session_id": callback_tokens.session_of(token),
        "dedupe_key": dedupe_key,
        "payload": payload,
        "terminal": sorted(TERMINAL_STATUSES),
    }


def _received(
    target: CallbackTarget | None,
    previous: StoredDelivery | None,
    delivery_id: Any,
    woken_row: tuple[Any, ...] | None,
) -> CallbackReceived:
    return CallbackReceived(
        target,
        previous,
        None if delivery_id is None else int(delivery_id),
        woken_row is not None,
        "normal" if woken_row is None else woken_row[3],
    )


def receive_callback(
    conn: psycopg.Connection[Any], token: str, *, payload: str, dedupe_key: str | None
) -> CallbackReceived:
    """A callback's delivery (`payload` as JSON), stored only if the callback
    is still open, and the wake it allows: five statements sent together, in
    the caller's pipelined transaction (one round trip), then their answers."""
    params = _receipt_params(token, payload, dedupe_key)
    conn.execute(LOCK_SESSION_OF_CALLBACK, params)
    locked = conn.cursor(row_factory=kwargs_row(CallbackTarget)).execute(LOCK_CALLBACK, params)
    delivered = conn.cursor(row_factory=kwargs_row(StoredDelivery)).execute(
        CALLBACK_DELIVERY, params
    )
    inserted = conn.cursor(row_factory=scalar_row).execute(INSERT_OPEN_CALLBACK_DELIVERY, params)
    woken = conn.cursor(row_factory=tuple_row).execute(WAKE_FROM_CALLBACK, params)
    target, previous = locked.fetchone(), delivered.fetchone()  # flushed, not synced
    return _received(target, previous, inserted.fetchone(), woken.fetchone())


async def areceive_callback(
    conn: psycopg.AsyncConnection[Any], token: str, *, payload: str, dedupe_key: str | None
) -> CallbackReceived:
    """``receive_callback`` on an async connection (the web's callback route)."""
    params = _receipt_params(token, payload, dedupe_key)
    await conn.execute(LOCK_SESSION_OF_CALLBACK, params)
    locked = await conn.cursor(row_factory=kwargs_row(CallbackTarget)).execute(
        LOCK_CALLBACK, params
    )
    delivered = await conn.cursor(row_factory=kwargs_row(StoredDelivery)).execute(
        CALLBACK_DELIVERY, params
    )
    inserted = await conn.cursor(row_factory=scalar_row).execute(
        INSERT_OPEN_CALLBACK_DELIVERY, params
    )
    woken = await conn.cursor(row_factory=tuple_row).execute(WAKE_FROM_CALLBACK, params)
    target, previous = await locked.fetchone(), await delivered.fetchone()
    return _received(target, previous, await inserted.fetchone(), await woken.fetchone())


@dataclass(frozen=True)
class LockedSession:
    """A row of LOCK_SESSION_FOR_SIGNAL."""

    id: uuid.UUID
    status: str
    step_seq: int
    cursor: str | None


def lock_session_for_signal(
    conn: psycopg.Connection[Any], session_id: uuid.UUID
) -> LockedSession | None:
    return rows.one(conn, LockedSession, LOCK_SESSION_FOR_SIGNAL, {"session_id": session_id})


def signal_delivery(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, *, topic: str, dedupe_key: str | None
) -> StoredDelivery | None:
    """The signal stored before under this dedupe key, if any."""
    params = {"session_id": session_id, "topic": topic, "dedupe_key": dedupe_key}
    return rows.one(conn, StoredDelivery, SIGNAL_DELIVERY, params)


def insert_signal_delivery(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    *,
    topic: str,
    dedupe_key: str | None,
    payload: str,
    step_seq: int,
    step: str | None,
    actor: str,
) -> int | None:
    """Store the signal (`payload` as JSON); its delivery id, or None if a
    concurrent duplicate stored it first."""
    params = {
        "session_id": session_id,
        "topic": topic,
        "dedupe_key": dedupe_key,
        "payload": payload,
        "step_seq": step_seq,
        "step": step,
        "actor": actor,
    }
    delivery_id = rows.value(conn, INSERT_SIGNAL_DELIVERY, params)
    return None if delivery_id is None else int(delivery_id)


@dataclass(frozen=True)
class Rejection:
    """The audit event of a delivery refused (the wait or the session is
    over), recorded by ``rejected_delivery`` or ``arejected_delivery``."""

    session_id: uuid.UUID
    step_seq: int
    step: str | None
    event: str
    payload: dict[str, Any]

    def params(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "step_seq": self.step_seq,
            "step": self.step,
            "event": self.event,
            "payload": serialization.dumps(self.payload),
        }


def rejected_delivery(conn: psycopg.Connection[Any], rejection: Rejection) -> None:
    rows.run(conn, REJECTED_DELIVERY, rejection.params())


async def arejected_delivery(conn: psycopg.AsyncConnection[Any], rejection: Rejection) -> None:
    await conn.execute(REJECTED_DELIVERY, rejection.params())


@dataclass(frozen=True)
class DeliveryAge:
    """A row of DELIVERY_AGE."""

    kind: str
    seconds: float


def delivery_age(conn: psycopg.Connection[Any], delivery_id: int) -> DeliveryAge | None:
    """How long ago the delivery was stored; None if it is gone."""
    return rows.one(conn, DeliveryAge, DELIVERY_AGE, {"id": delivery_id})


def callbacks_by_token(conn: psycopg.Connection[Any], tokens: list[str]) -> list[CallbackRecord]:
    return rows.every(conn, CallbackRecord, CALLBACKS_BY_TOKEN, {"tokens": tokens})
