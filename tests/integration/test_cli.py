"""The command line against real services: enqueue, inspect, reconcile."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable

import redis

from resumable.client import Client
from tests.conftest import ManagedProcess, run_cli, wait_until


def _cli(client: Client, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(client.settings, *args, timeout=60)


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

    listed = json.loads(_cli(client, "sessions", "list", "--json").stdout)
    assert [(s["id"], s["status"]) for s in listed] == [(str(session_id), "completed")]
    shown = json.loads(_cli(client, "sessions", "show", str(session_id)).stdout)
    assert shown["result"] == {"progress": ["one", "two", "three", "four", "five"]}
    events = json.loads(_cli(client, "sessions", "events", str(session_id), "--json").stdout)
    assert [e["event_type"] for e in events][-1] == "session_completed"


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
