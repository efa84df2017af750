"""The Python API on real servers: how a client is built and closed, the
records it returns (the HTTP API's), its errors, and ``AsyncClient`` under
asyncio."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import dramatiq
import pytest

from resumable import (
    AsyncClient,
    Checkpoint,
    Client,
    DeadLetter,
    Event,
    IdempotencyConflictError,
    InvalidArgumentError,
    InvalidCursorError,
    Page,
    Session,
    SessionNotFoundError,
    SessionStateError,
)
from resumable._internal.embedded import EmbeddedServices
from resumable.models.database import Database
from resumable.settings import Settings
from tests.conftest import ManagedProcess, wait_until
from tests.integration.test_readme import failed_with_a_dead_letter


def _use_the_test_servers(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
    monkeypatch.setenv("DATABASE_URL", settings.database_url or "")
    monkeypatch.setenv("REDIS_URL", settings.redis_url or "")


def test_clients_built_from_the_environment_or_urls_close_what_they_opened(
    client: Client, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_the_test_servers(monkeypatch, settings)
    with Client.from_env() as from_env:
        session_id = from_env.start("five", {"task": "env"})
        assert from_env.get(session_id) == client.get(session_id)
    assert from_env.db.pool.closed

    monkeypatch.delenv("DATABASE_URL")
    monkeypatch.delenv("REDIS_URL")
    by_url = Client(database_url=settings.database_url, redis_url=settings.redis_url)
    assert by_url.get(session_id).session_id == session_id
    by_url.close()
    assert by_url.db.pool.closed

    # Given its parts, a client leaves them to their owner.
    Client(settings, client.db, client.broker).close()
    assert not client.db.pool.closed
    with pytest.raises(TypeError, match="together"):
        Client(settings, client.db)
    with pytest.raises(TypeError, match="either"):
        Client(settings, client.db, client.broker, database_url=settings.database_url)
    with pytest.raises(TypeError, match="not both"):
        Client(settings, client.db, client.broker, make_broker=lambda: client.broker)


def test_a_client_given_make_broker_builds_it_on_its_first_send_only(
    client: Client, settings: Settings, start_worker: Callable[..., ManagedProcess]
) -> None:
    built: list[object] = []

    def make_broker() -> dramatiq.Broker:
        built.append(client.broker)
        return client.broker

    lazy = Client(settings, client.db, make_broker=make_broker)
    lazy.page_sessions(limit=5)
    assert built == [], "a read needs no broker"
    first = lazy.start("five", {"task": "lazy"})
    second = lazy.start("five", {"task": "lazy again"})
    assert len(built) == 1, "built once, on the first send"
    start_worker()
    for session_id in (first, second):
        assert client.wait(session_id, timeout=30).status == "completed"


@pytest.fixture
def fresh_home() -> Iterator[Path]:
    """A home no process has used (short, for unix socket paths)."""
    home = Path(tempfile.mkdtemp(dir="/tmp", prefix="rpc-")) / "home"
    try:
        yield home
    finally:
        if home.exists():
            EmbeddedServices(home).stop()
        shutil.rmtree(home.parent, ignore_errors=True)


def test_from_env_without_urls_starts_embedded_servers_and_stops_them(
    fresh_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("RESUMABLE_HOME", str(fresh_home))
    with Client.from_env() as embedded:
        assert EmbeddedServices(fresh_home).running_pids() != []
        session_id = embedded.start("anything")  # the schema was applied first
        assert embedded.get(session_id).status == "pending"
    assert EmbeddedServices(fresh_home).running_pids() == [], "the last user stops them"


def test_signals_cancels_and_pages_answer_records(client: Client) -> None:
    first, second, third = (client.start("five", {"n": n}) for n in range(3))

    delivery = client.signal(first, "approval", {"ok": True}, idempotency_key="k-1")
    assert (delivery.status, delivery.session_id) == ("accepted", first)
    again = client.signal(first, "approval", {"ok": True}, idempotency_key="k-1")
    assert (again.status, again.delivery_id) == ("duplicate", delivery.delivery_id)
    with pytest.raises(IdempotencyConflictError):
        client.signal(first, "approval", {"ok": False}, idempotency_key="k-1")
    with pytest.raises(SessionNotFoundError):
        client.signal(uuid.uuid4(), "approval")

    cancelled = client.cancel(second, actor="test", reason="not needed")
    assert isinstance(cancelled, Session) and cancelled.status == "cancelled"
    with pytest.raises(SessionStateError):
        client.cancel(second, actor="test")
    with pytest.raises(SessionStateError, match="cancelled"):
        client.signal(second, "approval")

    page = client.page_sessions(limit=2)
    assert isinstance(page, Page) and [s.session_id for s in page.items] == [third, second]
    assert all(s.state is None for s in page.items)  # lists leave the state out
    assert page.next_cursor is not None
    rest = client.page_sessions(limit=2, cursor=page.next_cursor)
    assert ([s.session_id for s in rest.items], rest.next_cursor) == ([first], None)
    assert client.list_sessions(limit=2) == page.items
    with pytest.raises(InvalidCursorError):
        client.page_sessions(cursor="not-a-cursor")

    session = client.get(first)
    assert session.state == {} and client.state(first) == {}
    assert "lease_owner" not in session.model_dump() and "id" not in session.model_dump()
    events = client.events(first)
    assert all(isinstance(e, Event) for e in events)
    assert [e.type for e in events] == ["session_created", "signal_received"]
    assert client.events(first, latest=1) == events[-1:]
    assert client.events(first, after=events[0].event_id) == events[1:]


def test_history_forks_and_dead_letters_answer_records(
    client: Client, db: Database, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()
    session_id = client.start("five")
    wait_until(lambda: client.get(session_id).status == "completed", what="completion")
    checkpoints = client.checkpoints(session_id)
    assert all(isinstance(c, Checkpoint) for c in checkpoints)
    assert [(c.seq, c.step) for c in checkpoints][:2] == [(1, "one"), (2, "two")]
    assert client.checkpoints(session_id, after=3) == checkpoints[3:]
    past = client.checkpoint_state(session_id, 2)
    assert (past.seq, past.step, past.next_step) == (2, "two", "three")
    with pytest.raises(SessionNotFoundError):
        client.checkpoints(uuid.uuid4())

    fork = client.fork(session_id, 2, actor="test")
    assert (fork.forked_from, fork.forked_at, fork.step) == (session_id, 2, "three")
    wait_until(lambda: client.get(fork.session_id).status == "completed", what="the fork")

    older = failed_with_a_dead_letter(client, db, "TransientError")
    newer = failed_with_a_dead_letter(client, db, "PermanentError")
    page = client.dead_letters(limit=1)
    assert [d.dead_letter_id for d in page.items] == [newer]
    assert page.items[0].traceback is None and page.next_cursor == str(newer)
    rest = client.dead_letters(limit=1, cursor=page.next_cursor)
    assert ([d.dead_letter_id for d in rest.items], rest.next_cursor) == ([older], None)
    with pytest.raises(InvalidCursorError):
        client.dead_letters(cursor="-1")
    discarded = client.discard_dead_letter(newer, reason="duplicate order", actor="test")
    assert isinstance(discarded, DeadLetter) and discarded.status == "discarded"
    assert client.dead_letters().items == [
        client.dead_letter(older).model_copy(update={"traceback": None})
    ]


class _ThreadRecordingClient(Client):
    """Notes which thread each read runs on (the database work is real)."""

    threads: list[str]

    def get(self, session_id: uuid.UUID | str) -> Session:
        self.threads.append(threading.current_thread().name)
        return super().get(session_id)


def test_async_client_runs_the_calls_off_the_event_loop(
    client: Client, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    recording = _ThreadRecordingClient(settings, client.db, client.broker)
    recording.threads = []

    async def handler() -> tuple[uuid.UUID, list[Session], str]:
        async with AsyncClient(recording) as resumable:
            session_id = await resumable.start("five", idempotency_key="order-1")
            assert await resumable.start("five", idempotency_key="order-1") == session_id
            delivery = await resumable.signal(session_id, "approval", {"approved": True})
            assert delivery.status == "accepted"
            reads = await asyncio.gather(*(resumable.get(session_id) for _ in range(20)))
            page = await resumable.page_sessions()
            assert [s.session_id for s in page.items] == [session_id]
            events = await resumable.events(session_id)
            assert [e.type for e in events] == ["session_created", "signal_received"]
            with pytest.raises(SessionNotFoundError):
                await resumable.get(uuid.uuid4())
            cancelled = await resumable.cancel(session_id, actor="test")
            assert cancelled.status == "cancelled"
            return session_id, list(reads), threading.current_thread().name

    session_id, reads, loop_thread = asyncio.run(handler())
    assert {r.session_id for r in reads} == {session_id}
    assert len(recording.threads) == 22
    assert all(name.startswith("resumable-async") for name in recording.threads)
    assert loop_thread not in recording.threads
    assert not client.db.pool.closed  # it wrapped a client it does not own

    _use_the_test_servers(monkeypatch, settings)

    async def from_env() -> AsyncClient:
        async with AsyncClient.from_env() as owned:
            assert (await owned.get(session_id)).status == "cancelled"
            assert await owned.count_by_status() == {"cancelled": 1}
        return owned

    assert asyncio.run(from_env()).client.db.pool.closed


FIVE_STEPS = ["one", "two", "three", "four", "five"]


def test_wait_answers_the_finished_session_or_times_out(
    client: Client, start_worker: Callable[..., ManagedProcess]
) -> None:
    """`wait` is what an application calls instead of polling `get` itself:
    the session once finished, however it finished; TimeoutError otherwise."""
    waiting = client.start("signalled", {})  # suspends until a signal, sent at the end
    cancelled = client.start("five")
    client.cancel(cancelled, actor="test")
    assert client.wait(cancelled, timeout=0).status == "cancelled"  # finished: no wait
    start_worker()
    done = client.wait(client.start("five"), timeout=30)
    assert (done.status, done.result) == ("completed", {"progress": FIVE_STEPS})
    wait_until(lambda: client.get(waiting).status == "suspended", what="the suspension")
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"still suspended after 0\.5 s"):
        client.wait(waiting, timeout=0.5)
    assert 0.5 <= time.monotonic() - began < 5
    for timeout in (-1, float("nan"), float("inf"), "soon"):
        with pytest.raises(InvalidArgumentError, match="timeout"):
            client.wait(waiting, timeout=timeout)  # type: ignore[arg-type]
    with pytest.raises(SessionNotFoundError):
        client.wait(uuid.uuid4(), timeout=1)

    async def handler() -> tuple[Session, Session]:
        async with AsyncClient(client) as resumable:
            started = await resumable.start("five")
            # Two waits at once on one event loop: neither blocks the other.
            finished, timed_out = await asyncio.gather(
                resumable.wait(started, timeout=30),
                resumable.wait(waiting, timeout=0.3),
                return_exceptions=True,
            )
            assert isinstance(timed_out, TimeoutError), timed_out
            assert isinstance(finished, Session)
            client.signal(waiting, "approve", {"approved": True})
            return finished, await resumable.wait(waiting, timeout=30)

    five, approved = asyncio.run(handler())
    assert (five.status, five.result) == ("completed", {"progress": FIVE_STEPS})
    assert approved.status == "completed"
