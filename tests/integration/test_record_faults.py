"""The database lost under a call's own records is not the step's failure.

A trigger ends the worker's database session at the exact statement that
records book B's result (or claims the call): the call's effect has
happened (or not), and only a replay under the same key can tell. With one
attempt allowed, charging the step with that failure would run the saga
over the recorded calls only and leave booking B in place; instead the
session is replayed, B is booked under its one key, and the saga undoes
both, each once."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from resumable.client import Client
from resumable.dev.fake_server import FakeServer, Reply, Request
from resumable.models.database import Database
from tests.conftest import LocalDeployment, wait_until

AGENTS = "tests.booking_agents"


class Ledger(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str]] = []  # (name, idempotency key)

    def handle(self, request: Request) -> Reply:
        body = request.json()
        with self.lock:
            self.calls.append((body["name"], body["key"]))
        return Reply(200, {"ok": True, "name": body["name"]})

    def effects(self) -> Counter[str]:
        """Effects per name, a key counted once (an API that dedupes by key)."""
        with self.lock:
            return Counter(name for name, _ in set(self.calls))


# Where the fault strikes: the table, the statement, and which of its rows.
FAULTS = {
    "record": (
        "tool_execution_cache",
        "UPDATE",
        "NEW.tool = 'book_b' AND NEW.status = 'completed' AND OLD.status = 'started'",
    ),
    "claim": ("tool_execution_cache", "INSERT", "NEW.tool = 'book_b'"),
    "callback": ("callbacks", "INSERT", "true"),
}


@contextmanager
def session_ended_once(db: Database, when: str) -> Iterator[None]:
    """Once, end the database session that runs `when` (``record``: the
    update that records book B's result; ``claim``: the insert that claims
    it; ``callback``: the insert of a callback's token). A sequence counts
    the firings: it does not roll back with the statement the termination
    aborts."""
    table, event, condition = FAULTS[when]
    with db.connection() as conn:
        conn.execute("DROP SEQUENCE IF EXISTS test_fault_once")
        conn.execute("CREATE SEQUENCE test_fault_once")
        conn.execute(
            f"""
            CREATE OR REPLACE FUNCTION test_fault() RETURNS trigger AS $$
            BEGIN
                IF {condition} AND nextval('test_fault_once') = 1 THEN
                    PERFORM pg_terminate_backend(pg_backend_pid());
                END IF;
                RETURN NEW;
            END $$ LANGUAGE plpgsql
            """
        )
        conn.execute(
            f"CREATE TRIGGER test_fault BEFORE {event} ON {table}"
            " FOR EACH ROW EXECUTE FUNCTION test_fault()"
        )
    try:
        yield
    finally:
        with db.connection() as conn:
            conn.execute(f"DROP TRIGGER IF EXISTS test_fault ON {table}")
            conn.execute("DROP FUNCTION IF EXISTS test_fault()")
            conn.execute("DROP SEQUENCE IF EXISTS test_fault_once")


@pytest.mark.parametrize(
    ("agent", "when"), [("booker", "record"), ("booker", "claim"), ("abooker", "record")]
)
def test_a_call_whose_records_the_database_lost_is_replayed_and_undone(
    client: Client, db: Database, deployment: LocalDeployment, agent: str, when: str
) -> None:
    with Ledger() as ledger, session_ended_once(db, when):
        deployment.worker(AGENTS)
        session_id = client.start(agent, {"ledger": ledger.url})
        wait_until(lambda: client.get(session_id).status == "failed", timeout=60, what="the saga")
        with db.connection() as conn:
            fired = conn.execute("SELECT last_value, is_called FROM test_fault_once").fetchone()
            letter = conn.execute(
                "SELECT compensation FROM dead_letters WHERE session_id = %s", (session_id,)
            ).fetchone()
            rows = conn.execute(
                "SELECT tool, status, compensation_status FROM tool_execution_cache"
                " WHERE session_id = %s ORDER BY step_seq",
                (session_id,),
            ).fetchall()
    assert fired is not None and fired["is_called"]  # the fault struck
    assert letter is not None and letter["compensation"] == "completed"
    assert ledger.effects() == {"a": 1, "b": 1, "undo-a": 1, "undo-b": 1}
    assert [(r["tool"], r["status"], r["compensation_status"]) for r in rows] == [
        ("book_a", "completed", "completed"),
        ("book_b", "completed", "completed"),
    ]
    error = client.get(session_id).error
    assert error is not None and error.type == "PermanentError"  # the step's own failure


def test_a_callback_whose_token_the_database_lost_is_made_again(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    with session_ended_once(db, "callback"):
        deployment.worker(AGENTS)
        session_id = client.start("approver", {})
        wait_until(lambda: client.get(session_id).status == "suspended", what="the wait")
        with db.connection() as conn:
            fired = conn.execute("SELECT is_called FROM test_fault_once").fetchone()
            tokens = conn.execute(
                "SELECT count(*) AS n FROM callbacks WHERE session_id = %s", (session_id,)
            ).fetchone()
    assert fired is not None and fired["is_called"]  # the fault struck
    assert tokens is not None and tokens["n"] == 1
    events = Counter(e.type for e in client.events(session_id))
    assert events["retry_scheduled"] == 0 and events["dead_lettered"] == 0
