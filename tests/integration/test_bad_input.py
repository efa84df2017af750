"""Invariant 7: bad input gets a clear error, is recorded, and changes nothing else."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable

import pytest

from resumable.agent import AgentRegistry
from resumable.client import Client
from resumable.errors import IdempotencyConflictError, NotSerializableError, UnknownAgentError
from tests import agents
from tests.conftest import WorkerProcess, run_cli, wait_until


def _finished(client: Client, session_id: uuid.UUID) -> str:
    status = client.get(session_id).status
    return status if status in {"completed", "failed"} else ""


@pytest.mark.parametrize(
    ("go", "code", "error_type", "message"),
    [
        ("raises", "step_failed", "RuntimeError", "the step broke"),
        ("unserializable", "not_serializable", "NotSerializableError", "state.when (object)"),
        ("unknown_next", "unknown_step", "UnknownStepError", "no step 'no_such_step'"),
        ("wrong_type", "invalid_step_result", "InvalidStepResultError", "got int"),
    ],
)
def test_a_bad_step_fails_its_session_and_the_worker_goes_on(
    client: Client,
    start_worker: Callable[..., WorkerProcess],
    go: str,
    code: str,
    error_type: str,
    message: str,
) -> None:
    worker = start_worker()
    session_id = client.start("bad", {"go": go})
    assert wait_until(lambda: _finished(client, session_id)) == "failed"

    session = client.get(session_id)
    assert session.error is not None
    assert session.error.code == code
    assert session.error.type == error_type
    assert session.error.message is not None and message in session.error.message
    assert session.error.step == go
    # The traceback stays with the row (and the dead letter), not the public record.
    row_error = client.session_row(session_id).error
    assert row_error is not None and "Traceback" in row_error["traceback"]
    # Only the first step ("dispatch") committed; the failing one wrote nothing.
    assert session.seq == 1
    assert session.state == {"touched": True}
    assert [c.seq for c in client.checkpoints(session_id)] == [1]
    failed = [e for e in client.events(session_id) if e.type == "session_failed"]
    assert len(failed) == 1 and failed[0].payload["code"] == code

    # The worker survived and runs the next session.
    healthy = client.start("five")
    assert wait_until(lambda: _finished(client, healthy)) == "completed"
    assert worker.proc.poll() is None


def test_unknown_agent_is_recorded_by_the_worker(
    client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker()
    session_id = client.start("no-such-agent", {"x": 1})
    assert wait_until(lambda: _finished(client, session_id)) == "failed"
    session = client.get(session_id)
    assert session.error is not None
    assert session.error.code == "unknown_agent"
    assert "unknown agent 'no-such-agent'" in (session.error.message or "")
    assert client.checkpoints(session_id) == []


def test_client_with_a_registry_refuses_unknown_agents_before_writing(client: Client) -> None:
    checked = Client(
        client.settings, client.db, client.broker, AgentRegistry.from_modules(["tests.agents"])
    )
    with pytest.raises(UnknownAgentError, match="known: approval, bad, counter, either, five"):
        checked.start("nope")
    assert client.count_by_status() == {}


@pytest.mark.parametrize("bad_input", [{"when": object()}, {"x": math.nan}, {1: "int key"}])
def test_unserializable_input_is_refused_before_writing(client: Client, bad_input: object) -> None:
    with pytest.raises(NotSerializableError, match="input"):
        client.start("five", bad_input)
    assert client.count_by_status() == {}


def test_idempotency_key_returns_the_same_session_and_refuses_a_different_request(
    client: Client,
) -> None:
    first = client.start_session("five", {"a": 1}, idempotency_key="order-42")
    again = client.start_session("five", {"a": 1}, idempotency_key="order-42")
    assert first.created and not again.created
    assert again.session_id == first.session_id
    with pytest.raises(IdempotencyConflictError):
        client.start("five", {"a": 2}, idempotency_key="order-42")
    assert client.count_by_status() == {"pending": 1}


def test_cli_reports_errors_with_a_message_and_nonzero_exit(client: Client) -> None:
    bad_json = run_cli(client.settings, "enqueue", "five", "--input", "{nope")
    assert bad_json.returncode != 0
    assert "--input is not valid JSON" in bad_json.stderr
    unknown = run_cli(client.settings, "enqueue", "nope", "--agents", "tests.agents")
    assert unknown.returncode == 1
    assert "unknown agent 'nope'" in unknown.stderr
    missing = run_cli(client.settings, "sessions", "show", str(uuid.uuid4()))
    assert missing.returncode == 1
    assert "no session" in missing.stderr
    assert client.count_by_status() == {}
    assert agents.five.name == "five"
