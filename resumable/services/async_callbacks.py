"""Receiving a callback on an event loop: ``Inbox.callback``'s statements,
awaited on an async connection instead of run on a thread.

The same transaction (its statements are ``wait_ops.receive_callback``'s,
in one pipeline), the same verdicts (``judge_callback``) and the same order:
the woken session's message leaves before the commit, handed to a sender
(``broker/background_sends.py``) so the loop never waits on the broker,
and the answer waits for the commit. The claim that the message causes waits
for this transaction's row lock, as it does for the thread-bound receiver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from resumable._internal import serialization
from resumable.models import wait_ops
from resumable.models.async_database import AsyncDatabase, apipelined_transaction
from resumable.priorities import Routed
from resumable.services.inbox import Receipt, judge_callback


class AsyncCallbacks:
    """Stores callbacks' deliveries and wakes their sessions, awaited."""

    def __init__(self, db: AsyncDatabase, send: Callable[[Routed], None]) -> None:
        self.db = db
        self.send = send

    async def callback(self, token: str, payload: Any, dedupe_key: str | None) -> Receipt:
        encoded = serialization.dumps(payload, "callback payload")
        async with self.db.connection() as conn, apipelined_transaction(conn):
            got = await wait_ops.areceive_callback(
                conn, token, payload=encoded, dedupe_key=dedupe_key
            )
            if got.target is not None and got.woke:
                self.send(Routed(got.target.session_id, got.priority))
                # One turn of the loop, in which a loop's sender puts the
                # message on the wire before the COMMIT goes (the claim
                # waits for the commit's row lock, not for its WAL flush).
                await asyncio.sleep(0)
        receipt, rejection = judge_callback(got, token, payload, dedupe_key)
        if rejection is not None:
            async with self.db.connection() as conn:
                await wait_ops.arejected_delivery(conn, rejection)
        return receipt
