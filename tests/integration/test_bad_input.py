"""Invariant 7: bad input gets a clear error, is recorded, and changes nothing else."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from resumable.agent import AgentRegistry
from resumable.client import Client
from resumable.errors import (
    CheckpointNotFoundError,
    DeadLetterNotFoundError,
    IdempotencyConflictError,
    InvalidArgumentError,
    NotSerializableError,
    ResumableError,
    SessionNotFoundError,
    UnknownAgentError,
)
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


def test_client_with_a_registry_refuses_unknown_agents_before_writing(client: Client) -> None:
    checked = Client(
        client.settings, client.db, client.broker, AgentRegistry.from_modules(["tests.agents"])
    )
    with pytest.raises(UnknownAgentError, match="known: approval, bad, counter, either, five"):
        checked.start("nope")
    assert client.count_by_status() == {}


@pytest.mark.parametrize(
    "bad_input",
    [{"when": object()}, {"x": math.nan}, {1: "int key"}, {"a": "x\x00"}, {"\ud800": 1}],
)
def test_unserializable_input_is_refused_before_writing(client: Client, bad_input: object) -> None:
    """Both a value that cannot be stored and (README) an invalid argument."""
    with pytest.raises(NotSerializableError, match="input") as raised:
        client.start("five", bad_input)
    assert isinstance(raised.value, InvalidArgumentError) and isinstance(raised.value, ValueError)
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
    # A session id chosen by the caller is part of the request: another one
    # under the same key is a different request; the same one is a replay.
    with pytest.raises(IdempotencyConflictError):
        client.start("five", {"a": 1}, idempotency_key="order-42", session_id=uuid.uuid4())
    assert client.start("five", {"a": 1}, idempotency_key="order-42", session_id=first.session_id)
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


# Every case's error and message is checked in milliseconds by
# tests/unit/test_unstorable_outcomes.py (resumable.testing); here, on a real
# worker, the cases whose check is the worker's own code (a tool's recorded
# result, the state and result a commit writes, a callback token, a child) and
# one wait for all the others (``Wait.spec``, which both share).
@pytest.mark.parametrize(
    ("how", "code", "message"),
    [
        ("huge_tool_result", "not_serializable", "an integer of more than 4300 digits"),
        ("huge_result", "not_serializable", "an integer of more than 4300 digits"),
        ("deep_state", "not_serializable", "nested deeper than 100 levels"),
        ("nan_sleep", "invalid_wait", "cannot be NaN"),
        ("nul_callback", "invalid_wait", "a callback topic 'a\\x00' contains NUL"),
        # Once a psycopg DataError, retried as transient, then dead-lettered as one.
        ("nul_tool_name", "agent_definition_error", "tool name 'pay\\x00' contains NUL"),
        # Once a commit that failed on every attempt, leaving the parent running.
        ("nul_child", "agent_definition_error", "child agent name 'kid\\x00' contains NUL"),
        ("long_child", "agent_definition_error", "is 201 characters; at most 200"),
    ],
)
def test_a_step_outcome_that_cannot_be_stored_fails_once_for_good(
    client: Client,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
    how: str,
    code: str,
    message: str,
) -> None:
    """A result, state or wait that cannot be stored is the step's permanent
    error: the session fails at once, with a dead letter, its tool calls made
    once. (Such values once raised outside the step's error handling, leaving
    the session running for the reconciler to re-enqueue forever, or as an
    error the retry policy took for transient, repeating the tool call.)"""
    start_worker()
    counter = tmp_path / "calls"
    session_id = client.start("hostile", {"how": how, "counter": str(counter)})
    assert wait_until(lambda: _finished(client, session_id), timeout=20) == "failed"
    session = client.get(session_id)
    assert session.error is not None
    assert session.error.code == code, session.error
    assert message in (session.error.message or ""), session.error.message
    assert [e.type for e in client.events(session_id)].count("step_failed") <= 1
    assert client.dead_letters(agent="hostile").items[0].session_id == session_id
    if how == "huge_tool_result":
        assert counter.read_text() == "1"  # the side effect ran once
    if how == "nul_tool_name":
        assert not counter.exists()  # refused before the tool ran
    if how in ("nul_child", "long_child"):
        assert counter.read_text() == "1"  # the tool before the spawn ran once
        assert client.count_by_status() == {"failed": 1}  # and no child was made


def test_bad_arguments_to_the_python_client_raise_its_own_errors_and_write_nothing(
    client: Client,
) -> None:
    """What the HTTP API refuses with a 4xx, the Python API refuses with an
    exception from resumable (InvalidArgumentError is a ValueError), before any
    statement: not a psycopg or SQLAlchemy error from inside a query."""
    unknown = str(uuid.uuid4())
    for call in (
        lambda: client.get(123),  # type: ignore[arg-type]
        lambda: client.get(None),  # type: ignore[arg-type]
        lambda: client.start("five", session_id="not-a-uuid"),  # type: ignore[arg-type]
        lambda: client.start("fi\x00ve"),
        lambda: client.start(""),
        lambda: client.start("five", idempotency_key="k\x00"),
        lambda: client.start("five", idempotency_key="k" * 257),
        lambda: client.start("five", {"n": 10**5000}),
        lambda: client.signal(unknown, "to\x00pic"),
        lambda: client.signal(unknown, "topic", {"n": 10**5000}),
        lambda: client.signal(unknown, "topic", {"a": "\ud800"}),
        lambda: client.signal(unknown, "topic", {"a": "x\x00"}),
        lambda: client.page_sessions(cursor="not-one-of-ours"),
        lambda: client.page_sessions(limit=0),
        lambda: client.page_sessions(limit=-1),
        lambda: client.list_sessions(limit=10**20),
        lambda: client.dead_letters(limit=-1),
        lambda: client.events(unknown, limit=-1),
        lambda: client.events(unknown, latest=-1),
        lambda: client.events(unknown, after=2**70),
        lambda: client.hung_sessions(limit=0),
        lambda: client.cancel(unknown, actor="ops\x00"),
        # Once raw psycopg/SQLAlchemy errors (or, for an int actor, written).
        lambda: client.page_sessions(agent="a\x00"),
        lambda: client.page_sessions(agent="\ud800"),
        lambda: client.page_sessions(agent=5),  # type: ignore[arg-type]
        lambda: client.page_sessions(status="a\x00"),
        lambda: client.page_sessions(status="bogus"),
        lambda: client.page_sessions(cursor=5),  # type: ignore[arg-type]
        lambda: client.page_sessions(hung_after=float("nan")),
        lambda: client.page_sessions(hung_after=1e308),
        lambda: client.hung_sessions(after_seconds=-1),
        lambda: client.dead_letters(agent="\x00"),
        lambda: client.dead_letters(error_type="\ud800"),
        lambda: client.dead_letters(step=4),  # type: ignore[arg-type]
        lambda: client.fork(unknown, 1, actor="\x00"),
        lambda: client.fork(unknown, 1, new_session_id="nope"),  # type: ignore[arg-type]
        lambda: client.retry_dead_letter(1, reason="\x00"),
        lambda: client.retry_dead_letter(1, actor=1),  # type: ignore[arg-type]
        lambda: client.discard_dead_letter(1, reason="\ud800"),
        lambda: client.discard_dead_letter(1, reason="r", actor=7),  # type: ignore[arg-type]
        # Once a raw SQLAlchemy ProgrammingError, an empty page, a CoordinationError.
        lambda: client.dead_letters(status=5),  # type: ignore[arg-type]
        lambda: client.dead_letters(status="garbage"),  # type: ignore[arg-type]
        lambda: client.shared("a\x00"),
        lambda: client.shared_history(""),
    ):
        with pytest.raises(ResumableError) as raised:
            call()
        # Every one an InvalidArgumentError, so a ValueError (README).
        assert isinstance(raised.value, InvalidArgumentError), raised.value
        assert isinstance(raised.value, ValueError), raised.value
    # A malformed id names nothing: it is not found, and (README) an invalid argument.
    for call in (lambda: client.get("not-a-uuid"), lambda: client.events("nope")):
        with pytest.raises(SessionNotFoundError) as raised:
            call()
        assert isinstance(raised.value, InvalidArgumentError)
    for bad_id in (2**70, "abc", -1, True):
        with pytest.raises(DeadLetterNotFoundError) as raised:
            client.dead_letter(bad_id)  # type: ignore[arg-type]
        assert isinstance(raised.value, InvalidArgumentError) == isinstance(bad_id, str | bool)
    session_id = client.start("five")
    for seq in (2**70, -1, "1", True):
        with pytest.raises(CheckpointNotFoundError) as raised:
            client.checkpoint_state(session_id, seq)  # type: ignore[arg-type]
        assert isinstance(raised.value, InvalidArgumentError) == isinstance(seq, str | bool)
        with pytest.raises(CheckpointNotFoundError):
            client.fork(session_id, seq)  # type: ignore[arg-type]
    assert client.count_by_status() == {"pending": 1}  # only the good start
