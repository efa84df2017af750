"""Fenced locks and semaphores under real workers: mutual exclusion as an
external ledger sees it, a paused holder's late write rejected by its token,
a semaphore's permits and FIFO order."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

from resumable.client import Client
from resumable.dev.fake_server import FakeServer, Reply, Request
from resumable.models import wait_queries
from resumable.models.database import Database
from tests.conftest import LocalDeployment, wait_until

AGENTS = "tests.coordination_agents"


class Ledger(FakeServer):
    """An external system that accepts a write only with a fencing token at
    least as large as the largest it has seen (409 otherwise)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.accepted: list[tuple[str, int, str]] = []  # (phase, token, session)
        self.rejected: list[tuple[str, int, str]] = []
        self.max_token = 0

    def handle(self, request: Request) -> Reply:
        body = request.json()
        entry = (request.path.strip("/"), int(body["token"]), str(body["session"]))
        with self.lock:
            if entry[1] < self.max_token:
                self.rejected.append(entry)
                return Reply(409, {"error": "stale fencing token"})
            self.max_token = entry[1]
            self.accepted.append(entry)
            return Reply(200, {"ok": True})

    def snapshot(self) -> tuple[list[tuple[str, int, str]], list[tuple[str, int, str]]]:
        with self.lock:
            return list(self.accepted), list(self.rejected)


class Gauge(FakeServer):
    """Counts how many sessions are inside at once."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.inside = 0
        self.most = 0
        self.entered: list[str] = []

    def handle(self, request: Request) -> Reply:
        body = request.json()
        with self.lock:
            if request.path == "/enter":
                self.inside += 1
                self.most = max(self.most, self.inside)
                self.entered.append(str(body["session"]))
            else:
                self.inside -= 1
            return Reply(200, {"inside": self.inside})


def _all_completed(db: Database, ids: list[uuid.UUID]) -> bool:
    with db.connection() as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM sessions WHERE id = ANY(%s) AND status = 'completed'",
            [ids],
        ).fetchone()
    return row is not None and row["n"] == len(ids)


def test_one_lock_fences_a_paused_holder_and_the_ledger_never_sees_two_holders(
    client: Client, db: Database, reconciler: None, tmp_path: Path, deployment: LocalDeployment
) -> None:
    (tmp_path / "hold").touch()
    workers = [deployment.worker(AGENTS), deployment.worker(AGENTS)]
    with Ledger() as ledger:
        common: dict[str, Any] = {"lock": "ledger", "ledger": ledger.url, "gate_dir": str(tmp_path)}
        victim = client.start("ledger_writer", {**common, "hold": True})

        def announced() -> list[Path]:
            return sorted(tmp_path.glob(f"entered-{victim}-*"))

        wait_until(announced, what="the victim to hold the lock")
        ids = [victim] + [client.start("ledger_writer", common) for _ in range(49)]
        # Pause the holder's worker past its lease (2 s; heartbeat 3 s): the
        # run whose token is the smallest announced (on a loaded machine an
        # early takeover may have announced a larger one too).
        entered = min(announced(), key=lambda path: int(path.name.rsplit("-", 1)[1]))
        first_token = int(entered.name.rsplit("-", 1)[1])
        paused = next(w for w in workers if str(w.pid) == entered.read_text())
        paused.pause()
        (tmp_path / "hold").unlink()
        # Another run of the victim takes over with a larger token and finishes.
        try:
            wait_until(
                lambda: client.get(victim).status == "completed", timeout=60, what="takeover"
            )
        except AssertionError:
            print(client.get(victim), [(e.type, e.payload) for e in client.events(victim)])
            print(ledger.snapshot())
            raise
        paused.resume()
        try:
            wait_until(lambda: ledger.snapshot()[1], timeout=30, what="the zombie's late write")
        except AssertionError:
            print("first token", first_token, "ledger", ledger.snapshot())
            print([(e.type, e.payload) for e in client.events(victim)])
            raise
        wait_until(lambda: _all_completed(db, ids), timeout=90, what="all 50 sessions")
        accepted, rejected = ledger.snapshot()

    # The zombie's late write, and only it, was rejected by its stale token.
    assert rejected == [("end", first_token, str(victim))]
    # As the ledger saw it: tokens only grew and each holder's writes are one
    # contiguous run (no other holder in between); only the zombie's run lacks its end.
    tokens = [token for _, token, _ in accepted]
    assert tokens == sorted(tokens)
    runs: list[list[tuple[str, int, str]]] = []
    for entry in accepted:
        if runs and runs[-1][0][1] == entry[1]:
            runs[-1].append(entry)
        else:
            runs.append([entry])
    # The victim's first run wrote `begin` and was paused (at `end`); a later
    # run replayed `begin` from the tool-call record and wrote `end` with a
    # larger token.
    assert [(phase, session) for phase, _, session in runs[0]] == [("begin", str(victim))]
    assert runs[0][0][1] <= first_token
    assert [(phase, session) for phase, _, session in runs[1]] == [("end", str(victim))]
    assert runs[1][0][1] > first_token
    assert [[phase for phase, _, _ in run] for run in runs[2:]] == [["begin", "end"]] * 49
    assert {run[0][2] for run in runs[2:]} == {str(i) for i in ids[1:]}


def test_locks_go_to_the_next_waiter_on_cancel_completion_and_dead_letter(
    client: Client, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)
    deployment.scheduler()

    def status(session_id: uuid.UUID) -> str:
        return client.get(session_id).status

    def holding(session_id: uuid.UUID) -> bool:
        return status(session_id) == "suspended" and "token" in client.state(session_id)

    a = client.start("lock_holder", {"lock": "x"})
    wait_until(lambda: holding(a), what="a to hold x")
    b = client.start("lock_holder", {"lock": "x"})
    c = client.start("lock_holder", {"lock": "x", "timeout": 0.5})
    wait_until(lambda: client.get(c).result == {"timed_out": True}, what="c to time out")
    assert status(b) == "suspended" and not holding(b)

    client.cancel(a, actor="test")  # cancelled: x goes to b
    wait_until(lambda: holding(b), what="b to hold x")
    d = client.start("lock_holder", {"lock": "x", "fail": True})
    wait_until(lambda: status(d) == "suspended", what="d to wait")
    client.signal(b, "go", {})  # b completes: x goes to d, which fails
    wait_until(lambda: status(d) == "failed", what="d to be dead-lettered")
    e = client.start("lock_holder", {"lock": "x"})  # free again
    wait_until(lambda: holding(e), what="e to hold x")
    assert client.state(e)["token"] > client.get(b).result["token"] > client.state(a)["token"]


def test_a_wait_that_times_out_as_the_lock_is_granted_is_skipped_for_the_next_waiter(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    """The scheduler's timeout of b's wait holds b's row, uncommitted, while
    a's cancel grants x: the grant must wait for it, see b no longer waiting
    and give x to c, not to b (which would hold it without knowing)."""
    deployment.worker(AGENTS)

    def holding(session_id: uuid.UUID) -> bool:
        return client.get(session_id).status == "suspended" and "token" in client.state(session_id)

    a = client.start("lock_holder", {"lock": "x"})
    wait_until(lambda: holding(a), what="a to hold x")
    b = client.start("lock_holder", {"lock": "x", "timeout": 3600})
    wait_until(lambda: client.get(b).status == "suspended", what="b to wait")
    c = client.start("lock_holder", {"lock": "x"})
    wait_until(lambda: client.get(c).status == "suspended", what="c to wait")

    with db.connection() as timeout_tx, timeout_tx.transaction():
        # b's deadline passes and the scheduler's statement takes its row.
        timeout_tx.execute(
            "UPDATE sessions SET wake_at = now() - interval '1 second', "
            "wait = jsonb_set(wait, '{deadline}', to_jsonb(now() - interval '1 second')) "
            "WHERE id = %s",
            [b],
        )
        woken = timeout_tx.execute(wait_queries.WAKE_DUE, {"limit": 10}).fetchall()
        assert [row["id"] for row in woken] == [b]
        canceller = threading.Thread(target=client.cancel, args=(a,), kwargs={"actor": "test"})
        canceller.start()
        with db.connection() as probe:

            def grant_waits() -> bool:
                row = probe.execute(
                    "SELECT count(*) AS n FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock' "
                    "AND query LIKE '%coordination_lock_requests%'"
                ).fetchone()
                return row is not None and int(str(row["n"])) > 0

            wait_until(grant_waits, what="the grant to wait for b's row")
    canceller.join(timeout=30)
    assert not canceller.is_alive()

    with db.connection() as conn:
        held = conn.execute(
            "SELECT session_id FROM coordination_lock_requests WHERE name = 'x' AND status = 'held'"
        ).fetchall()
    assert [row["session_id"] for row in held] == [c]
    wait_until(lambda: holding(c), what="c to hold x")


def test_a_retried_dead_letter_no_longer_holds_its_lock_and_cannot_fence(
    client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)
    d = client.start("lock_holder", {"lock": "y", "fail_once": str(tmp_path / "failed")})
    wait_until(lambda: client.get(d).status == "failed", what="d to be dead-lettered")
    e = client.start("lock_holder", {"lock": "y"})  # y went free with d's dead letter
    wait_until(
        lambda: client.get(e).status == "suspended" and "token" in client.state(e),
        what="e to hold y",
    )
    letter = client.dead_letters().items[0]
    client.retry_dead_letter(letter.dead_letter_id, actor="test")
    wait_until(lambda: len(client.dead_letters().items) == 1, what="d's second dead letter")
    again = client.dead_letters().items[0]
    assert again.session_id == d and again.error_type == "CoordinationError"
    assert "does not hold lock 'y'" in str(again.error_message)
    assert client.get(e).status == "suspended"  # e kept y throughout


def test_acquiring_locks_out_of_name_order_fails_the_step(
    client: Client, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)
    session_id = client.start("out_of_order", {})
    wait_until(lambda: client.get(session_id).status == "failed", what="the step to fail")
    error = client.get(session_id).error
    assert error is not None and "ascending name order" in str(error.message)


def test_a_semaphore_of_three_over_thirty_sessions_admits_three_in_fifo_order(
    client: Client, db: Database, tmp_path: Path, deployment: LocalDeployment
) -> None:
    (tmp_path / "hold").touch()
    deployment.worker(AGENTS)
    deployment.worker(AGENTS)
    with Gauge() as gauge:
        common = {"permits": 3, "gauge": gauge.url, "gate_dir": str(tmp_path)}
        ids: list[uuid.UUID] = []
        for index in range(30):
            ids.append(client.start("semaphore_user", common))
            if index < 3:  # granted at once: inside, held at the gate
                wait_until((tmp_path / f"entered-{ids[-1]}").exists, what="a holder")
            else:  # queued in this order
                wait_until(lambda: client.get(ids[-1]).status == "suspended", what="a waiter")
        assert gauge.inside == 3
        (tmp_path / "hold").unlink()
        wait_until(lambda: _all_completed(db, ids), timeout=60, what="all 30 sessions")
        most = gauge.most

    assert most == 3
    tokens = [client.get(session_id).result["token"] for session_id in ids]
    assert tokens == sorted(tokens) and len(set(tokens)) == 30  # granted in request order
