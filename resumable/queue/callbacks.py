"""Creating callback tokens from inside a step.

A token must exist before the step hands its URL to an external system,
because that system may answer before the step has even returned; so it is
committed at once (fenced by the lease epoch), and a delivery that arrives
before the session suspends is kept until the wait takes it. Tokens are
random and unguessable, but a replay of the same step finds the same token
(by session, step and call index), so a URL already handed out stays valid.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import psycopg

from resumable.errors import LeaseLostError
from resumable.models import callback_tokens, wait_ops
from resumable.models.database import Database
from resumable.queue.failing import RecordsUnavailable, connection_lost
from resumable.waits import Callback, check_name, check_seconds


class CallbackFactory:
    """The callbacks of one step execution."""

    def __init__(
        self, db: Database, session_id: uuid.UUID, epoch: int, step_seq: int, public_url: str
    ) -> None:
        self._db = db
        self._session_id = session_id
        self._epoch = epoch
        self._step_seq = step_seq
        self._public_url = public_url.rstrip("/")
        self._next_index = 0

    def create(self, topic: str, timeout: float | timedelta | None = None) -> Callback:
        check_name(topic, "a callback topic")  # before anything is stored
        check_seconds(timeout)
        index = self._next_index
        self._next_index += 1
        try:
            with self._db.connection() as conn:
                token = wait_ops.create_callback(
                    conn,
                    self._session_id,
                    self._epoch,
                    token=callback_tokens.new_token(self._session_id),
                    step_seq=self._step_seq,
                    call_index=index,
                    topic=topic,
                )
        except psycopg.OperationalError as exc:  # ours, not the step's: it is replayed
            if not connection_lost(exc):
                raise
            raise RecordsUnavailable(f"the database failed creating a callback: {exc}") from exc
        if token is None:
            raise LeaseLostError("lease lost before creating a callback")
        return Callback(
            token=token,
            topic=topic,
            url=f"{self._public_url}/v1/callbacks/{token}",
            timeout=timeout,
        )
