"""Sessions run to completion on real worker processes, one commit per step."""

from __future__ import annotations

from collections.abc import Callable

from resumable.client import Client
from resumable.models.database import Database
from tests.conftest import WorkerProcess, wait_until


def _status(client: Client, session_id: object) -> str:
    return client.get(str(session_id)).status


def _session_row_updates(db: Database) -> tuple[int, int]:
    """All updates of `sessions` rows so far, and how many were HOT."""
    with db.connection() as conn:
        row = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'sessions'"
        ).fetchone()
    assert row is not None
    updates, hot = row["n_tup_upd"], row["n_tup_hot_upd"]
    assert isinstance(updates, int) and isinstance(hot, int)
    return updates, hot


def test_steps_in_mid_run_write_no_index_entries(
    client: Client, db: Database, start_worker: Callable[..., WorkerProcess]
) -> None:
    """A step that continues its run changes no indexed column of the
    session's row, so PostgreSQL can update the row within its page (a HOT
    update) and write none of the table's index entries; before migration
    0015 every step wrote one into each of twelve indexes."""
    updates_before, hot_before = _session_row_updates(db)
    start_worker()
    session_id = client.start("counter", {"steps": 60})
    wait_until(lambda: _status(client, session_id) == "completed", what="completion")
    # The claim, 60 commits; backends report their statistics when idle.
    wait_until(
        lambda: _session_row_updates(db)[0] - updates_before >= 61, what="the updates counted"
    )
    updates, hot = _session_row_updates(db)
    # Not HOT: the claim and the last commit (the status changes), the 32nd
    # step (it moves the compaction mark), and any with no room in the page.
    assert hot - hot_before >= 50, (updates - updates_before, hot - hot_before)


def test_five_step_agent_runs_in_order(
    client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker()
    session_id = client.start("five", {"task": "count to five"})

    wait_until(lambda: _status(client, session_id) == "completed", what="completion")

    session = client.get(session_id)
    assert session.result == {"progress": ["one", "two", "three", "four", "five"]}
    assert session.step is None
    assert session.seq == 5
    checkpoints = client.checkpoints(session_id)
    assert [(c.seq, c.step, c.next_step) for c in checkpoints] == [
        (1, "one", "two"),
        (2, "two", "three"),
        (3, "three", "four"),
        (4, "four", "five"),
        (5, "five", None),
    ]
    assert client.checkpoint_state(session_id, 3).state == {"progress": ["one", "two", "three"]}
    events = [(e.type, e.step, e.seq) for e in client.events(session_id)]
    assert events == [
        ("session_created", None, None),
        ("run_started", None, 0),
        ("step_completed", "one", 1),
        ("step_completed", "two", 2),
        ("step_completed", "three", 3),
        ("step_completed", "four", 4),
        ("step_completed", "five", 5),
        ("session_completed", "five", 5),
    ]
