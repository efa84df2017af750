"""Sessions run to completion on real worker processes, one commit per step."""

from __future__ import annotations

from collections.abc import Callable

from resumable.client import Client
from tests.conftest import WorkerProcess, wait_until


def _status(client: Client, session_id: object) -> str:
    return client.get(str(session_id)).status


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
