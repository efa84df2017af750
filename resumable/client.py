"""Starting and inspecting sessions from Python.

Every read returns a frozen ``resumable.schemas`` record, the same models the
HTTP API answers with (``Session``, ``Event``, ``Checkpoint``, ``DeadLetter``,
``Page``), so Python, HTTP and the CLI's ``--json`` speak one vocabulary and
no caller sees lease internals. A client built from the environment or from
URLs (``Client.from_env()``, ``Client(database_url=..., redis_url=...)``)
owns its connections (and embedded servers) and closes them on ``close()`` or
when its ``with`` block ends; one built from parts (``Client(settings, db,
broker)``, as the web process and CLI do) leaves them to their owner.

``start`` commits the session row before it sends the queue message, so a
message lost in between (Redis down or flushed) leaves a pending session that
the reconciler re-enqueues; it never leaves a message without a session.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from resumable import tracing
from resumable._internal import serialization
from resumable._internal.serialization import unstorable_text
from resumable.agent import AgentRegistry
from resumable.broker.messages import enqueue_after_commit
from resumable.coordination import children, shared
from resumable.coordination.records import SharedDocument, SharedVersion
from resumable.errors import (
    ConfigurationError,
    IdempotencyConflictError,
    InvalidArgumentError,
    InvalidCursorError,
    NotSerializableError,
    ScheduleDefinitionError,
    ScheduleNotFoundError,
    SessionNotFoundError,
    SessionStateError,
    UnstorableArgumentError,
)
from resumable.models import agent_queries, event_queries, session_queries, step_ops
from resumable.models.agent_queries import UnservedAgent
from resumable.models.database import Database
from resumable.models.status import SessionStatus
from resumable.models.step_queries import HungSession
from resumable.priorities import DEFAULT_PRIORITY, Priority, Routed
from resumable.priorities import priority as check_priority
from resumable.schedules import Schedule, check_schedule_name
from resumable.schemas import (
    AcceptPreview,
    Checkpoint,
    CheckpointState,
    ConcurrencyKey,
    DeadLetter,
    DeadLetterStatus,
    Delivery,
    Event,
    Page,
    RateLimitInfo,
    ScheduleInfo,
    Session,
)
from resumable.services import arguments, slots
from resumable.services.blocked import BlockedSessions
from resumable.services.dead_letters import DeadLetterFilter, DeadLetters
from resumable.services.inbox import Inbox, Verdict
from resumable.services.schedules import Schedules
from resumable.services.time_travel import TimeTravel
from resumable.settings import Settings, check_urls, load_settings

if TYPE_CHECKING:
    import dramatiq

    from resumable.models.records import SessionRecord

logger = logging.getLogger(__name__)

#: A running step is hung after this long even without a time limit of its own.
HUNG_AFTER_SECONDS = 600.0


@dataclass(frozen=True)
class Started:
    """The session a `start` call refers to, and whether this call created it."""

    session_id: uuid.UUID
    created: bool


class WaitSchedule:
    """When `Client.wait` (and `AsyncClient.wait`) read a session again: after
    20 ms, then half as long again each time up to once a second (most runs
    are short; a long wait then costs one read a second), never past the
    deadline."""

    FIRST_PAUSE = 0.02
    LONGEST_PAUSE = 1.0

    def __init__(self, session_id: uuid.UUID, timeout: float | None) -> None:
        self.session_id = session_id
        self.timeout = None if timeout is None else arguments.seconds(timeout, "timeout")
        self.deadline = None if self.timeout is None else time.monotonic() + self.timeout
        self._pause = self.FIRST_PAUSE

    def pause_after(self, session: Session) -> float | None:
        """None once `session` has finished, else the seconds to sleep before
        reading it again; TimeoutError past the deadline."""
        if SessionStatus(session.status).is_terminal:
            return None
        pause, self._pause = self._pause, min(self._pause * 1.5, self.LONGEST_PAUSE)
        if self.deadline is None:
            return pause
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(
                f"session {self.session_id} is still {session.status} after {self.timeout:g} s"
            )
        return min(pause, left)


class Client:
    """Start, signal, cancel and read sessions, and handle dead letters.

    Three ways to build one:

    - ``Client.from_env()``: settings from the environment; embedded servers
      for ``DATABASE_URL`` / ``REDIS_URL`` when they are unset (as the CLI
      does, with the embedded database's schema brought up to date).
    - ``Client(database_url=..., redis_url=...)``: those servers (a URL left
      out falls back to the environment, then to an embedded server).
    - ``Client(settings, db, broker, registry)``: parts the caller owns (the
      web process, the CLI, tests); ``make_broker=`` instead of `broker`
      builds it on the first send (the CLI's reads never need one).

    The first two own what they opened: use them as a context manager or call
    ``close()``. `registry`, when given, validates agent names before anything
    is written."""

    def __init__(
        self,
        settings: Settings | None = None,
        db: Database | None = None,
        broker: dramatiq.Broker | None = None,
        registry: AgentRegistry | None = None,
        *,
        database_url: str | None = None,
        redis_url: str | None = None,
        make_broker: Callable[[], dramatiq.Broker] | None = None,
    ) -> None:
        self._owned = contextlib.ExitStack()
        self._broker: dramatiq.Broker | None = broker
        self._make_broker = make_broker
        if broker is not None and make_broker is not None:
            raise TypeError("pass broker or make_broker, not both")
        given_broker = broker is not None or make_broker is not None
        if db is not None and given_broker:
            if database_url or redis_url:
                raise TypeError("pass either db and broker, or database_url and redis_url")
            self.settings = settings if settings is not None else load_settings()
            self.db = db
        elif db is not None or given_broker:
            raise TypeError("pass db and broker together (or neither, to connect from URLs)")
        else:
            check_urls(database_url, redis_url)
            self.settings = settings if settings is not None else load_settings()
            try:
                self.db, self._make_broker = self._connect(database_url, redis_url)
            except BaseException:
                self._owned.close()
                raise
        self.registry = registry

    @property
    def broker(self) -> dramatiq.Broker:
        """The broker, built on first use when the client was given (or made)
        a way to build one: a client that only reads never loads dramatiq or
        redis-py, a seventh of a one-shot command's start-up."""
        if self._broker is None:
            assert self._make_broker is not None
            self._broker = self._make_broker()
        return self._broker

    def _connect(
        self, database_url: str | None, redis_url: str | None
    ) -> tuple[Database, Callable[[], dramatiq.Broker]]:
        from resumable._internal.embedded import service_urls

        settings = self.settings
        urls = self._owned.enter_context(
            service_urls(
                database_url or settings.database_url,
                redis_url or settings.redis_url,
                settings.home_dir,
            )
        )
        if not (database_url or settings.database_url):
            from resumable.models import migrate

            migrate.upgrade(urls.database_url)  # the embedded database, as the CLI does
        db = Database(
            urls.database_url,
            pool_size=settings.db_pool_size,
            prepared_statements=settings.db_prepared_statements,
        )
        self._owned.callback(db.close)

        def make_broker() -> dramatiq.Broker:
            from resumable.broker.choice import build_broker

            broker = build_broker(settings, urls.redis_url)
            self._owned.callback(broker.close)
            return broker

        return db, make_broker

    @classmethod
    def from_env(cls, registry: AgentRegistry | None = None) -> Client:
        """A client on the servers the environment names (embedded ones for
        unset URLs); close it, or use it as a context manager."""
        return cls(load_settings(), registry=registry)

    def close(self) -> None:
        """Close what this client opened (nothing, if it was given its parts)."""
        self._owned.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(
        self,
        agent: str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        session_id: uuid.UUID | None = None,
        priority: Priority = DEFAULT_PRIORITY,
    ) -> uuid.UUID:
        """Create a session and enqueue it; return its id. The same idempotency
        key returns the same session (and a different request under it is an
        error). `priority` (``high``, ``normal``, ``low``) orders which pending
        session a free worker takes first (``resumable/priorities.py``)."""
        return self.start_session(
            agent, input, idempotency_key=idempotency_key, session_id=session_id, priority=priority
        ).session_id

    def start_session(
        self,
        agent: str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        session_id: uuid.UUID | None = None,
        priority: Priority = DEFAULT_PRIORITY,
    ) -> Started:
        """As `start`, and whether this call created the session (False: an
        earlier call with the same idempotency key did; its priority stands)."""
        arguments.text(agent, "agent")
        arguments.idempotency_key(idempotency_key)
        level = check_priority(priority)
        if session_id is not None and not isinstance(session_id, uuid.UUID):
            try:
                session_id = uuid.UUID(str(session_id))
            except ValueError:
                message = f"session_id must be a UUID, got {session_id!r}"
                raise InvalidArgumentError(message) from None
        new_id = session_id or uuid.uuid4()
        # The session's trace: the caller's current span's (see resumable/tracing.py).
        with tracing.session_start(agent, new_id) as trace_context:
            return self._create_session(
                agent,
                input,
                idempotency_key,
                new_id,
                trace_context,
                chosen=session_id is not None,
                priority=level,
            )

    def _create_session(
        self,
        agent: str,
        input: Any,
        idempotency_key: str | None,
        session_id: uuid.UUID,
        trace_context: dict[str, str] | None,
        *,
        chosen: bool = False,
        priority: Priority = DEFAULT_PRIORITY,
    ) -> Started:
        cursor = None
        if self.registry is not None:
            cursor = self.registry.get(agent).start_step  # raises UnknownAgentError
        encoded_input = arguments.json_text(input, "input")
        new_id = session_id
        with self.db.connection() as conn:
            created = session_queries.create(  # SessionExistsError if the id is taken
                conn,
                new_id,
                agent=agent,
                cursor=cursor,
                input=encoded_input,
                idempotency_key=idempotency_key,
                trace_context=trace_context,
                priority=priority,
            )
            if not created:
                existing = session_queries.find_by_idempotency_key(conn, idempotency_key)
                if existing is None:  # pragma: no cover - the key's row cannot vanish
                    raise IdempotencyConflictError("idempotency key conflict; try again")
                # The same request: the same agent and input, and the same id
                # if the caller chose one (another id is another session).
                same = (
                    existing.agent == agent
                    and serialization.canonical(existing.input) == serialization.canonical(input)
                    and (not chosen or existing.id == session_id)
                )
                if not same:
                    raise IdempotencyConflictError(
                        f"idempotency key {idempotency_key!r} was used for a different request"
                    )
                return Started(existing.id, created=False)
        enqueue_after_commit(
            self.broker, self.settings, [Routed(new_id, priority)], why="session started"
        )
        return Started(new_id, created=True)

    def cancel(
        self, session_id: uuid.UUID | str, *, actor: str, reason: str | None = None
    ) -> Session:
        """Cancel a session that has not finished; the cancelled `Session`.
        Fences out a running worker (the epoch moves on) and closes its callbacks;
        SessionStateError if it had already finished or is compensating (it
        failed for good and its saga is undoing its calls: it ends `failed`,
        with a dead letter, when the saga is done)."""
        sid = _as_uuid(session_id)
        arguments.storable(actor, "actor")
        if reason is not None:
            arguments.storable(reason, "reason")
        with self.db.connection() as conn:
            cancelled = session_queries.cancel(conn, sid, actor=actor, reason=reason)
        if not cancelled:
            status = self.get(sid).status  # raises SessionNotFoundError
            if status == SessionStatus.COMPENSATING:
                raise SessionStateError(
                    f"session {sid} is compensating: it failed for good and its saga is"
                    " undoing its tool calls; it ends failed, with a dead letter"
                )
            raise SessionStateError(f"session {sid} is already {status}")
        for child in children.unfinished_children(self.db, sid):  # and theirs, recursively
            with contextlib.suppress(SessionStateError):  # it finished meanwhile
                self.cancel(child, actor=actor, reason=f"parent {sid} cancelled")
        children.session_finished(self.db, self.broker, self.settings, sid)
        return self.get(sid)

    def set_priority(
        self,
        session_id: uuid.UUID | str,
        priority: Priority,
        *,
        actor: str,
        reason: str | None = None,
    ) -> Session:
        """Give a session that has not finished another priority (``high``,
        ``normal``, ``low``); the `Session`. Audited as ``priority_changed``
        (nothing is written when it already has it). A pending session's
        message is sent again on its new lane at once; a session that waits
        (suspended, for a slot) is woken on it later; a retry already
        scheduled comes back on the lane it was scheduled on, and a running
        one's own next message (a yield, a retry) goes on the new one from its
        next run. SessionStateError if it has finished."""
        sid = _as_uuid(session_id)
        level = check_priority(priority)
        arguments.storable(actor, "actor")
        if reason is not None:
            arguments.storable(reason, "reason")
        with self.db.connection() as conn:
            change = session_queries.set_priority(conn, sid, level, actor=actor, reason=reason)
        if not change.open:
            status = self.get(sid).status  # raises SessionNotFoundError
            raise SessionStateError(f"session {sid} is already {status}")
        if change.queued:
            enqueue_after_commit(
                self.broker, self.settings, [Routed(sid, level)], why="priority changed"
            )
        return self.get(sid)

    def preview_accept(self, session_id: uuid.UUID | str) -> AcceptPreview:
        """What accepting a blocked session's new tool calls would do, changing
        nothing: the calls that run again (`new_calls`, with their new
        arguments and keys), the recorded calls superseded whose effects stay
        (`superseded`), and what `accept` must be passed as `confirm`.
        SessionStateError if it is not blocked by a tool-call divergence."""
        return self._blocked().preview_accept(_as_uuid(session_id))

    def accept(
        self,
        session_id: uuid.UUID | str,
        *,
        reason: str,
        confirm: list[str] | None = None,
        actor: str = "python",
    ) -> Session:
        """Accept a blocked session's new tool calls: the recorded calls of the
        diverged step from the divergence point on are superseded (their
        effects stay) and the step runs again; the `Session`, now pending.
        `confirm`: the idempotency keys of the calls it supersedes, exactly
        (``preview_accept(id).confirm``); without it an accept that makes a
        call again raises ConfirmationRequiredError (its ``preview`` says
        what it would do) and nothing changes."""
        sid = _as_uuid(session_id)
        arguments.storable(actor, "actor")
        arguments.storable(reason, "reason")
        if not reason.strip():
            raise InvalidArgumentError("reason must not be blank")
        if confirm is not None:
            if isinstance(confirm, str) or not isinstance(confirm, list | tuple | set | frozenset):
                raise InvalidArgumentError("confirm is a list of idempotency keys")
            for key in confirm:
                arguments.storable(key, "a key in confirm")
        self._blocked().accept(sid, actor=actor, reason=reason, confirm=confirm)
        return self.get(sid)

    def signal(
        self,
        session_id: uuid.UUID | str,
        topic: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        actor: str = "python",
    ) -> Delivery:
        """Send a signal (an approval); it is committed now and kept until the
        session waits for `topic`. The same `idempotency_key` again is a
        `duplicate`; with another payload it is IdempotencyConflictError.
        SessionNotFoundError for no such session, SessionStateError once it
        has finished (as HTTP answers 404 and 409)."""
        sid = _as_uuid(session_id)
        arguments.text(topic, "topic")
        arguments.idempotency_key(idempotency_key)
        arguments.storable(actor, "actor")
        inbox = Inbox(self.settings, self.db, self.broker)
        try:
            receipt = inbox.signal(sid, topic, payload, idempotency_key, actor)
        except NotSerializableError as exc:  # the payload: a bad argument too
            raise UnstorableArgumentError(exc.message) from None
        if receipt.verdict is Verdict.UNKNOWN:
            raise SessionNotFoundError(f"no session {sid}")
        if receipt.verdict is Verdict.REUSED:
            raise IdempotencyConflictError(receipt.message)
        if receipt.verdict is Verdict.CLOSED:
            raise SessionStateError(receipt.message)
        return Delivery(
            status="accepted" if receipt.verdict is Verdict.ACCEPTED else "duplicate",
            message=receipt.message,
            session_id=sid,
            delivery_id=receipt.delivery_id,
        )

    def page_sessions(
        self,
        *,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        hung_after: float | None = None,
        unserved: bool = False,
        parent: uuid.UUID | str | None = None,
    ) -> Page[Session]:
        """Newest first, keyset-paginated, without their state (read one
        session for it): pass `next_cursor` back as `cursor` for the next page.
        `hung_after` (seconds) keeps only hung sessions: running, with a current
        step past its time limit or running longer than that. `unserved` keeps
        only sessions waiting for a worker that loads their agent (none is alive).
        `parent` keeps only the children that session spawned."""
        arguments.count(limit, "limit")
        arguments.session_status(status)
        arguments.filter_text(agent, "agent")
        arguments.cursor(cursor)
        if hung_after is not None:
            arguments.seconds(hung_after, "hung_after")
        rows, next_cursor = self._session_rows(
            parent=parent,
            status=status,
            agent=agent,
            limit=limit,
            cursor=cursor,
            hung_after=hung_after,
            unserved=unserved,
        )
        items = [Session.from_row(row, include_state=False) for row in rows]
        return Page[Session](items=items, next_cursor=next_cursor)

    def _session_rows(
        self,
        *,
        status: str | None,
        agent: str | None,
        limit: int,
        cursor: str | None,
        hung_after: float | None,
        unserved: bool,
        parent: uuid.UUID | str | None = None,
    ) -> tuple[list[SessionRecord], str | None]:
        parent_id = None if parent is None else _as_uuid(parent)
        before = decode_cursor(cursor) if cursor else None
        with self.db.connection() as conn:
            rows = session_queries.page(
                conn,
                limit=limit + 1,
                status=status,
                agent=agent,
                parent=parent_id,
                hung_after=hung_after,
                unserved=unserved,
                before=before,
            )
        if len(rows) <= limit:
            return rows, None
        last = rows[limit - 1]
        return rows[:limit], encode_cursor(last.created_at, last.id)

    def get(self, session_id: uuid.UUID | str) -> Session:
        """One session, with its state; SessionNotFoundError if there is none."""
        return Session.from_row(self.session_row(session_id))

    def wait(self, session_id: uuid.UUID | str, *, timeout: float | None = None) -> Session:
        """The session once it has finished (`completed`, `failed` or
        `cancelled`: read its `result` or `error`); TimeoutError if it has not
        within `timeout` seconds (None: no limit). It reads the session row,
        soon at first and then at most once a second, so it holds no
        connection while it waits and a crash of the worker meanwhile changes
        nothing (another worker finishes the session)."""
        sid = _as_uuid(session_id)
        schedule = WaitSchedule(sid, timeout)
        while True:
            session = self.get(sid)
            pause = schedule.pause_after(session)
            if pause is None:
                return session
            time.sleep(pause)

    def state(self, session_id: uuid.UUID | str) -> dict[str, Any]:
        """A session's current state (what its next step gets)."""
        state = self.get(session_id).state
        assert state is not None  # a single session is always read with its state
        return state

    def session_row(self, session_id: uuid.UUID | str) -> SessionRecord:
        """Internal: the table row itself, lease fields included, for code
        that works on leases (workers' tests, the console's waits). Not part of
        the public API: use `get`."""
        with self.db.connection() as conn:
            row = session_queries.get(conn, _as_uuid(session_id))
        if row is None:
            raise SessionNotFoundError(f"no session {session_id}")
        return row

    def list_sessions(
        self,
        *,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 50,
        hung_after: float | None = None,
        unserved: bool = False,
    ) -> list[Session]:
        """The newest sessions, without their state: the items of the first
        `page_sessions` page (use that to read further)."""
        return self.page_sessions(
            status=status, agent=agent, limit=limit, hung_after=hung_after, unserved=unserved
        ).items

    def unserved_agents(self) -> list[UnservedAgent]:
        """Agents with sessions waiting because no live worker loads them."""
        return unserved_agents(self.db)

    def hung_sessions(
        self, *, after_seconds: float = HUNG_AFTER_SECONDS, limit: int = 100
    ) -> list[HungSession]:
        """Running sessions whose current step has run past its time limit or
        longer than `after_seconds`, longest-running first."""
        arguments.count(limit, "limit")
        arguments.seconds(after_seconds, "after_seconds")
        return hung_sessions(self.db, after_seconds=after_seconds, limit=limit)

    def events(
        self,
        session_id: uuid.UUID | str,
        *,
        after: int = 0,
        limit: int | None = None,
        latest: int | None = None,
    ) -> list[Event]:
        """The session's audit log, oldest first, from the event after `after`
        (an `event_id`), at most `limit` of them; or only its `latest` N
        events (still oldest first). An unknown session has none."""
        arguments.position(after, "after")
        if limit is not None:
            arguments.count(limit, "limit", minimum=0)
        if latest is not None:
            arguments.count(latest, "latest", minimum=0)
        sid = _as_uuid(session_id)
        with self.db.connection() as conn:
            if latest is not None:
                rows = event_queries.latest_events(conn, sid, limit=latest, after=after)
            else:
                rows = event_queries.events(conn, sid, after=after, limit=limit)
        return [Event.from_row(row) for row in rows]

    def checkpoints(
        self, session_id: uuid.UUID | str, *, after: int = 0, limit: int = 100_000
    ) -> list[Checkpoint]:
        """The session's history, oldest first, from the checkpoint after `after`
        (a `seq`); SessionNotFoundError if there is no such session."""
        sid = _as_uuid(session_id)
        arguments.position(after, "after")
        arguments.count(limit, "limit")
        rows = TimeTravel(self.db, self.registry).checkpoints(sid, after=after, limit=limit)
        return [Checkpoint.from_row(sid, row) for row in rows]

    def checkpoint_state(self, session_id: uuid.UUID | str, seq: int) -> CheckpointState:
        """The state as it was right after step `seq` (redacted as the history
        is). An event-sourced agent's state needs the client's `registry`."""
        sid = _as_uuid(session_id)
        past = TimeTravel(self.db, self.registry).state_at(sid, seq)
        return CheckpointState(
            session_id=sid, seq=past.seq, step=past.step, next_step=past.next_step, state=past.state
        )

    def fork(
        self,
        session_id: uuid.UUID | str,
        at: int,
        *,
        actor: str = "python",
        state_patch: list[dict[str, Any]] | None = None,
        new_session_id: uuid.UUID | None = None,
        allow_compensated: bool = False,
    ) -> Session:
        """Start a new session from checkpoint `at` of this one (optionally with
        an RFC 6902 patch to that state); the fork's `Session`. See docs/concepts.md,
        "Time travel", for `allow_compensated`."""
        arguments.storable(actor, "actor")
        fork_id = TimeTravel(self.db, self.registry).fork(
            _as_uuid(session_id),
            at,
            actor=actor,
            state_patch=state_patch,
            new_id=arguments.new_session_id(new_session_id, "new_session_id"),
            allow_compensated=allow_compensated,
        )
        # Read before it is enqueued: the fork as created, not as a worker
        # may already have advanced it.
        fork = self.get(fork_id)
        enqueue_after_commit(
            self.broker, self.settings, [Routed(fork_id, fork.priority)], why="session forked"
        )
        return fork

    def dead_letters(
        self,
        *,
        status: DeadLetterStatus | Literal["all"] = "open",
        agent: str | None = None,
        error_type: str | None = None,
        step: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[DeadLetter]:
        """Dead letters, newest first, without tracebacks (read one for it);
        pass `next_cursor` back as `cursor` for the next page."""
        arguments.dead_letter_status(status)
        arguments.count(limit, "limit")
        arguments.filter_text(agent, "agent")
        arguments.filter_text(error_type, "error_type")
        arguments.filter_text(step, "step")
        arguments.cursor(cursor)
        where = DeadLetterFilter(
            status=None if status == "all" else status,
            agent=agent,
            error_type=error_type,
            step=step,
        )
        before = dead_letter_cursor(cursor)
        rows, next_before = self._dead_letters().find(where, limit=limit, before_id=before)
        return Page[DeadLetter](
            items=[DeadLetter.from_row(row, include_traceback=False) for row in rows],
            next_cursor=None if next_before is None else str(next_before),
        )

    def dead_letter(self, dead_letter_id: int) -> DeadLetter:
        """One dead letter, with its traceback; DeadLetterNotFoundError if none."""
        return DeadLetter.from_row(
            self._dead_letters().get(arguments.dead_letter_id(dead_letter_id))
        )

    def retry_dead_letter(
        self,
        dead_letter_id: int,
        *,
        actor: str = "python",
        reason: str | None = None,
        state_patch: list[dict[str, Any]] | None = None,
    ) -> DeadLetter:
        """Resume its session from the latest checkpoint, attempts reset (and
        the state patched first, if given); the dead letter, now `retried`."""
        arguments.storable(actor, "actor")
        if reason is not None:
            arguments.storable(reason, "reason")
        self._dead_letters().retry(
            arguments.dead_letter_id(dead_letter_id),
            actor=actor,
            reason=reason,
            state_patch=state_patch,
        )
        return self.dead_letter(dead_letter_id)

    def discard_dead_letter(
        self, dead_letter_id: int, *, reason: str, actor: str = "python"
    ) -> DeadLetter:
        """Close it without retrying; the dead letter, now `discarded`."""
        arguments.storable(actor, "actor")
        arguments.storable(reason, "reason")
        self._dead_letters().discard(
            arguments.dead_letter_id(dead_letter_id), actor=actor, reason=reason
        )
        return self.dead_letter(dead_letter_id)

    def shared(self, name: str) -> SharedDocument | None:
        """The shared document `name` as committed now; None if never written."""
        row = shared.read(self.db, name)
        return None if row is None else SharedDocument.from_row(row)

    def shared_history(
        self, name: str, *, limit: int = 100, before: int | None = None
    ) -> list[SharedVersion]:
        """The shared document's committed values with the session and step
        that wrote each, newest first (older than version `before` if given)."""
        arguments.count(limit, "limit")
        if before is not None:
            arguments.position(before, "before")
        rows = shared.history(self.db, name, limit=limit, before=before)
        return [SharedVersion.from_row(row) for row in rows]

    # -- concurrency keys -----------------------------------------------------------

    def concurrency_keys(self, *, limit: int = 50) -> list[ConcurrencyKey]:
        """The concurrency keys with a session running or waiting in them,
        the most waiting first (``resumable/limits.py``), at most `limit`."""
        return concurrency_keys(self.db, limit=arguments.count(limit, "limit", maximum=1000))

    # -- rate limits -----------------------------------------------------------------

    def rate_limits(self, *, limit: int = 50) -> list[RateLimitInfo]:
        """The rate limits in use (``RateLimit``): when each one's next turn
        comes, what the provider refused, and the sessions waiting for a
        turn; the most waiting first, at most `limit`."""
        from resumable.broker.redis import NAMESPACE
        from resumable.services.rate_limits import rate_limits

        count = arguments.count(limit, "limit", maximum=1000)
        redis_client = getattr(self.broker, "rate_store", None)
        if redis_client is None:  # a plain dramatiq broker: no shared line to read
            raise ConfigurationError("rate limits live in Redis; this client's broker has none")
        return rate_limits(self.db, redis_client, NAMESPACE, self.settings.queue_name, limit=count)

    # -- schedules -------------------------------------------------------------------

    def create_schedule(
        self, schedule: Schedule, *, actor: str = "python", paused: bool = False
    ) -> ScheduleInfo:
        """Create a schedule at run time (``resumable.Schedule(...)``). The same
        definition under its name again answers the existing schedule; another
        is ScheduleExistsError. Its agent must have been announced by a worker."""
        row, _ = self._schedules().create(schedule, actor=actor, paused=paused)
        return ScheduleInfo.from_row(row)

    def schedules(self, *, agent: str | None = None, limit: int = 100) -> list[ScheduleInfo]:
        """Schedules by name (this agent's only, if given), at most `limit`."""
        if agent is not None:
            arguments.text(agent, "agent")
        rows = self._schedules().page(
            limit=arguments.count(limit, "limit", maximum=1000), agent=agent
        )
        return [ScheduleInfo.from_row(row) for row in rows]

    def schedule(self, name: str) -> ScheduleInfo:
        """One schedule; ScheduleNotFoundError if none has this name."""
        return ScheduleInfo.from_row(self._schedules().get(_schedule_name(name)))

    def pause_schedule(
        self, name: str, *, reason: str | None = None, actor: str = "python"
    ) -> ScheduleInfo:
        """Start nothing until resumed."""
        return ScheduleInfo.from_row(
            self._schedules().pause(_schedule_name(name), actor=actor, reason=reason)
        )

    def resume_schedule(self, name: str, *, actor: str = "python") -> ScheduleInfo:
        """Start sessions again from now on: the due times of the pause start nothing."""
        return ScheduleInfo.from_row(self._schedules().resume(_schedule_name(name), actor=actor))

    def delete_schedule(self, name: str, *, actor: str = "python") -> None:
        """Delete a schedule; the sessions it started go on."""
        self._schedules().delete(_schedule_name(name), actor=actor)

    def trigger_schedule(
        self, name: str, *, actor: str = "python", idempotency_key: str | None = None
    ) -> uuid.UUID:
        """Start a session of the schedule now (whatever its overlap policy,
        paused or not); its due times stay as they were. The same
        `idempotency_key` again answers the session it started."""
        arguments.idempotency_key(idempotency_key)
        return self._schedules().trigger(
            _schedule_name(name), actor=actor, idempotency_key=idempotency_key
        )

    def _schedules(self) -> Schedules:
        return Schedules(self.settings, self.db, lambda: self.broker)

    def _dead_letters(self) -> DeadLetters:
        return DeadLetters(self.settings, self.db, lambda: self.broker)

    def _blocked(self) -> BlockedSessions:
        return BlockedSessions(self.settings, self.db, self.broker)

    def count_by_status(self) -> dict[str, int]:
        with self.db.connection() as conn:
            return session_queries.count_by_status(conn)


def concurrency_keys(db: Database, *, limit: int = 50) -> list[ConcurrencyKey]:
    """The busiest concurrency keys (the client, the HTTP API and the console)."""
    return [
        ConcurrencyKey(
            key=usage.key,
            limit=usage.limit,
            running=usage.running,
            waiting=usage.waiting,
            oldest_wait_seconds=usage.oldest_wait_seconds if usage.waiting else None,
        )
        for usage in slots.usage(db, limit=limit)
    ]


def hung_sessions(
    db: Database, *, after_seconds: float = HUNG_AFTER_SECONDS, limit: int = 100
) -> list[HungSession]:
    """Running sessions whose current step has run past its time limit or longer
    than `after_seconds`, longest-running first (for metrics, the CLI and alerts).

    A time limit interrupts a step busy in Python; one blocked in C code or on
    a socket without a timeout keeps its session until it returns, and this is
    where it shows. Cancelling such a session fences its writes out; its
    worker thread stays blocked until the call returns."""
    with db.connection() as conn:
        return step_ops.hung_sessions(conn, after_seconds=after_seconds, limit=limit)


def unserved_agents(db: Database) -> list[UnservedAgent]:
    """Agents with sessions waiting because no live worker loads them, and how
    many (for metrics and alerts). Such sessions are not claimed or touched;
    the first worker that loads the agent enqueues them when it starts."""
    with db.connection() as conn:
        return agent_queries.unserved_sessions_by_agent(conn)


def encode_cursor(created_at: datetime, session_id: uuid.UUID) -> str:
    raw = json.dumps([created_at.isoformat(), str(session_id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, session_id = json.loads(raw)
        return datetime.fromisoformat(created_at), uuid.UUID(session_id)
    except (ValueError, TypeError) as exc:
        raise InvalidCursorError(f"invalid cursor {cursor[:40]!r}") from exc


def _schedule_name(name: object) -> str:
    """A name to look up: any text is a name that may not exist, except text
    no schedule can have (refused as a bad argument, not a missing one)."""
    try:
        return check_schedule_name(name)
    except ScheduleDefinitionError:
        if isinstance(name, str) and name and not unstorable_text(name) and len(name) <= 1000:
            raise ScheduleNotFoundError(f"no schedule is named {name[:140]!r}") from None
        raise


def dead_letter_cursor(cursor: str | None) -> int | None:
    """A dead-letter page's cursor (the number the next page starts below)."""
    if arguments.cursor(cursor) is None:
        return None
    assert cursor is not None
    if not cursor.isdigit() or not 0 < int(cursor) < 2**63:
        raise InvalidCursorError(f"invalid cursor {cursor[:40]!r}")
    return int(cursor)


def _as_uuid(value: uuid.UUID | str) -> uuid.UUID:
    return arguments.session_id(value)
