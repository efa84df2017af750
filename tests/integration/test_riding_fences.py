"""The fences around answers that ride with the next write
(``ctx.tool(..., side_effects=False)``, ``defer_record=True``), on the
worker's own ``ToolCalls`` and statements against the real database: no call
is claimed before the answers made ahead of it are written, and a statement
of an earlier lease epoch changes none of a later epoch's rows."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from resumable.client import Client
from resumable.errors import LeaseLostError
from resumable.models import step_ops, tool_call_queries
from resumable.models.database import Database
from resumable.queue.tool_calls import AnswersNotRecordedError, ToolCalls

VERSIONS = json.dumps({"a": 0})
STARTS = json.dumps({"a": {"step": "first", "limit": None}})


def _claimed(client: Client, db: Database) -> tuple[uuid.UUID, int, int]:
    """A session of agent "a" claimed by this test: its id, epoch and step seq."""
    session_id = client.start("a", {})
    with db.connection() as conn:
        claim = step_ops.claim(
            conn, session_id, owner="host:1:1", versions=VERSIONS, starts=STARTS, lease_seconds=30
        )
    assert claim is not None
    return session_id, claim.epoch, claim.step_seq


def _rows(db: Database, session_id: uuid.UUID) -> list[dict[str, Any]]:
    with db.connection() as conn:
        return conn.execute(
            "SELECT call_index, tool, status, response, lease_epoch FROM tool_execution_cache"
            " WHERE session_id = %s ORDER BY call_index",
            (session_id,),
        ).fetchall()


def _take_over(db: Database, session_id: uuid.UUID) -> None:
    """Another worker's claim, as far as the fence can tell: the epoch moves on."""
    with db.connection() as conn:
        conn.execute(
            "UPDATE sessions SET lease_epoch = lease_epoch + 1 WHERE id = %s", (session_id,)
        )


def test_no_call_is_claimed_while_a_claim_carries_the_answers_before_it(
    client: Client, db: Database
) -> None:
    """An answer, then two calls at once: the one that carries the answer is
    held in its statement while the lease moves on; the other is not claimed
    meanwhile, and fails as lease-lost without running when the first finds
    the lease gone (it must not start on an answer that was never written)."""
    session_id, epoch, seq = _claimed(client, db)
    tools = ToolCalls(db, session_id, epoch, seq + 1, "first", fresh=True)
    assert tools.call("think", lambda: {"idea": 1}, (), {}, side_effects=False) == {"idea": 1}

    real_claim_row = tools._claim_row
    release = threading.Event()
    entered: dict[str, threading.Event] = {"b": threading.Event(), "c": threading.Event()}

    def held_claim_row(index: int, tool: str, *args: Any) -> Any:
        entered[tool].set()
        if tool == "b":
            assert release.wait(30)
        return real_claim_row(index, tool, *args)

    tools._claim_row = held_claim_row  # type: ignore[method-assign,assignment]
    ran: list[str] = []
    outcomes: dict[str, BaseException | None] = {}

    def make(name: str) -> Callable[[], None]:
        def call() -> None:
            try:
                tools.call(name, lambda: ran.append(name), (), {})
                outcomes[name] = None
            except BaseException as exc:
                outcomes[name] = exc

        return call

    b = threading.Thread(target=make("b"))
    b.start()
    assert entered["b"].wait(10), "the carrying claim never started"
    c = threading.Thread(target=make("c"))
    c.start()
    # Bounded: the second claim must be waiting, not in the database.
    assert not entered["c"].wait(0.5), "a call was claimed while the answers were in flight"
    _take_over(db, session_id)
    release.set()
    b.join(10)
    c.join(10)
    assert isinstance(outcomes["b"], LeaseLostError)
    assert isinstance(outcomes["c"], LeaseLostError)
    assert not entered["c"].is_set()
    assert ran == []
    assert _rows(db, session_id) == []  # the answer was fenced out with the claim


def _answer_row(key: str, seq: int, response: Any) -> str:
    return json.dumps(
        [
            {
                "key": key,
                "step_seq": seq,
                "step": "first",
                "call_index": 0,
                "tool": "think",
                "status": "completed",
                "args_hash": "h",
                "request": {"args": [], "kwargs": {}},
                "response": response,
                "error": None,
            }
        ]
    )


@pytest.mark.parametrize(
    ("row_epoch", "row_status", "written"),
    [
        (+1, "started", False),  # a later epoch's claim: an earlier statement changes nothing
        (0, "started", True),  # this epoch's own claim: a deferred result
        (-1, "completed", True),  # an earlier run's record: the answer this run acted on wins
        (0, "completed", False),  # already recorded by this epoch
    ],
)
def test_an_answer_is_fenced_on_the_row_as_well_as_the_session(
    client: Client, db: Database, row_epoch: int, row_status: str, written: bool
) -> None:
    session_id, epoch, seq = _claimed(client, db)
    with db.connection() as conn:
        claim = tool_call_queries.claim_tool_call(
            conn,
            session_id,
            epoch,
            key="k",
            step_seq=seq + 1,
            step="first",
            call_index=0,
            tool="think",
            request=json.dumps({"args": [], "kwargs": {}}),
            compensation=None,
            args_hash="h",
        )
        assert claim.owned
        conn.execute(
            "UPDATE tool_execution_cache SET lease_epoch = %s, status = %s,"
            " response = '\"old\"'::jsonb WHERE session_id = %s",
            (epoch + row_epoch, row_status, session_id),
        )
        assert tool_call_queries.record_answers(
            conn, session_id, epoch, _answer_row("k", seq + 1, "new")
        )
    [row] = _rows(db, session_id)
    if written:
        assert (row["status"], row["response"], row["lease_epoch"]) == ("completed", "new", epoch)
    else:
        assert (row["status"], row["response"], row["lease_epoch"]) == (
            row_status,
            "old",
            epoch + row_epoch,
        )


def test_a_carrying_claim_that_fails_stops_the_calls_after_it_and_keeps_the_answer(
    client: Client, db: Database
) -> None:
    """Not a lost connection nor a lost lease (a statement cancelled): the
    calls after it fail as the step's error, and the answer stays to be
    written on its own before that failure is handled."""
    session_id, epoch, seq = _claimed(client, db)
    tools = ToolCalls(db, session_id, epoch, seq + 1, "first", fresh=True)
    tools.call("think", lambda: {"idea": 1}, (), {}, side_effects=False)

    def cancelled(*args: Any) -> Any:
        raise psycopg.errors.QueryCanceled("canceling statement due to statement timeout")

    real_claim_row = tools._claim_row
    tools._claim_row = cancelled  # type: ignore[method-assign,assignment]
    with pytest.raises(psycopg.errors.QueryCanceled):
        tools.call("b", lambda: None, (), {})
    tools._claim_row = real_claim_row  # type: ignore[method-assign]
    ran: list[str] = []
    with pytest.raises(AnswersNotRecordedError, match="answers made before it were not recorded"):
        tools.call("c", lambda: ran.append("c"), (), {})
    assert ran == []
    assert tools.unwritten
    tools.write_answers()
    assert [(r["tool"], r["status"], r["response"]) for r in _rows(db, session_id)] == [
        ("think", "completed", {"idea": 1})
    ]


def test_an_answer_made_while_the_commit_writes_is_kept_for_the_next_write(
    client: Client, db: Database
) -> None:
    session_id, epoch, seq = _claimed(client, db)
    tools = ToolCalls(db, session_id, epoch, seq + 1, "first", fresh=True)
    tools.call("think", lambda: 1, (), {}, side_effects=False)
    sent = tools.riding_answers()
    assert sent is not None and '"call_index":0' in sent
    tools.call("think", lambda: 2, (), {}, side_effects=False)  # a call left running
    tools.committed()
    assert tools.unwritten
    kept = tools.riding_answers()
    assert kept is not None and '"call_index":1' in kept and '"call_index":0' not in kept
