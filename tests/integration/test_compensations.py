"""Sagas tell the truth: a dead letter counts the attempt that failed, and a
compensation that fails permanently is not tried again."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from resumable.client import Client
from resumable.models.database import Database
from tests.conftest import ManagedProcess, wait_until
from tests.fake_api import FakeAPI


def _failed(client: Client, session_id: uuid.UUID) -> bool:
    return client.get(session_id).status == "failed"


def _dead_letter(db: Database, session_id: uuid.UUID) -> dict[str, Any]:
    with db.connection() as conn:
        [letter] = conn.execute(
            "SELECT * FROM dead_letters WHERE session_id = %s", (session_id,)
        ).fetchall()
    return letter


def _count(client: Client, session_id: uuid.UUID, kind: str) -> int:
    return sum(e.type == kind for e in client.events(session_id))


def test_a_permanent_error_with_a_saga_counts_its_attempt(
    client: Client, db: Database, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()
    with FakeAPI() as api:
        session_id = client.start("saga", {"api": api.url})
        wait_until(lambda: _failed(client, session_id), what="the saga")
    letter = _dead_letter(db, session_id)
    assert (letter["error_type"], letter["compensation"]) == ("PermanentError", "completed")
    assert letter["attempts"] == 1
    assert client.get(session_id).attempts == 1


def test_a_compensation_raising_permanent_error_is_not_retried(
    client: Client,
    db: Database,
    tmp_path: Path,
    start_worker: Callable[..., ManagedProcess],
    start_scheduler: Callable[..., ManagedProcess],
) -> None:
    start_worker()
    start_scheduler()  # would bring back a retried compensation, if one were scheduled
    counter = tmp_path / "refunds"
    with FakeAPI() as api:
        session_id = client.start("stuck_saga", {"api": api.url, "counter": str(counter)})
        wait_until(lambda: _failed(client, session_id), timeout=30, what="the saga")
    assert counter.read_text() == "1"  # tried once, though 5 attempts were allowed
    assert _count(client, session_id, "compensation_retry_scheduled") == 0
    assert _count(client, session_id, "compensation_gave_up") == 1
    letter = _dead_letter(db, session_id)
    assert (letter["compensation"], letter["attempts"]) == ("failed", 1)
    assert "the airline refuses refunds" in letter["compensation_error"]["message"]


def test_a_forks_saga_undoes_only_the_calls_the_fork_made(
    client: Client, start_worker: Callable[..., ManagedProcess]
) -> None:
    """The tool results a fork keeps from its origin are the origin's effects:
    its saga (had it not run already) undoes them. A fork that fails undoes
    only what it booked itself, so neither an origin still relying on a
    booking loses it, nor an undone one is undone again under a new key."""
    start_worker()
    with FakeAPI() as api:
        origin = client.start("saga", {"api": api.url})
        wait_until(lambda: client.get(origin).status == "failed", what="the origin's saga")
        # Forked after flight and hotel (both undone by the origin's saga, so
        # the fork must be allowed to reuse them): it books a card and fails.
        fork = client.fork(origin, 2, allow_compensated=True)
        wait_until(lambda: client.get(fork.session_id).status == "failed", what="the fork")
        undone = Counter(body["what"] for path, body in api.order if path.endswith("/undo"))
    # The origin undid its three bookings; the fork only the card it booked.
    assert undone == {"flight": 1, "hotel": 1, "card": 2}
    fork_events = [e.type for e in client.events(fork.session_id)]
    assert fork_events.count("compensation_completed") == 1
