"""The command line against real services: enqueue, inspect, reconcile."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable

import pytest
import redis

from resumable.client import Client
from resumable.schemas import Checkpoint, Event, Page, Session
from tests.conftest import ManagedProcess, run_cli, wait_until


def _cli(client: Client, *args: str) -> subprocess.CompletedProcess[str]:
    # `python -m resumable.cli` from the start, as a user runs it: the other
    # tests' commands are forks of a process that has imported the CLI.
    return run_cli(client.settings, *args, timeout=60, fresh_interpreter=True)


def test_enqueue_then_inspect_a_session(
    client: Client, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()
    made = _cli(client, "enqueue", "five", "--input", '{"task": "x"}', "--idempotency-key", "k1")
    assert made.returncode == 0, made.stderr
    session_id = uuid.UUID(made.stdout.strip())
    again = _cli(client, "enqueue", "five", "--input", '{"task": "x"}', "--idempotency-key", "k1")
    assert uuid.UUID(again.stdout.strip()) == session_id
    wait_until(lambda: client.get(session_id).status == "completed", what="completion")

    # The same records, named the same way, as the HTTP API and the Python client.
    listed = json.loads(_cli(client, "sessions", "list", "--json").stdout)
    assert Page[Session].model_validate(listed).items == client.list_sessions()
    assert [(s["session_id"], s["status"]) for s in listed["items"]] == [
        (str(session_id), "completed")
    ]
    assert listed["next_cursor"] is None and listed["items"][0]["state"] is None
    shown = json.loads(_cli(client, "sessions", "show", str(session_id)).stdout)
    assert Session.model_validate(shown) == client.get(session_id)
    assert shown["result"] == {"progress": ["one", "two", "three", "four", "five"]}
    assert "id" not in shown and "cursor" not in shown and "lease_owner" not in shown
    events = json.loads(_cli(client, "sessions", "events", str(session_id), "--json").stdout)
    assert Page[Event].model_validate(events).items == client.events(session_id)
    assert [e["type"] for e in events["items"]][-1] == "session_completed"
    history = json.loads(_cli(client, "sessions", "history", str(session_id), "--json").stdout)
    assert Page[Checkpoint].model_validate(history).items == client.checkpoints(session_id)


@pytest.mark.redis_broker
def test_reconcile_command_re_enqueues_lost_sessions(
    client: Client, redis_client: redis.Redis
) -> None:
    session_id = client.start("five")
    redis_client.flushdb()
    out = _cli(client, "reconcile", "--grace", "0")
    assert out.returncode == 0, out.stderr
    assert "re-enqueued 1 pending" in out.stdout
    assert client.get(session_id).status == "pending"
    assert redis_client.keys("resumable:*"), "the reconciler sent a message again"
