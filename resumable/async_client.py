"""The client for asyncio applications (FastAPI, Starlette): the same methods
as `Client`, awaited, so a handler can start a session, send a signal or read
one without blocking its event loop and without wrapping calls itself.

Why a thread-offloading wrapper and not psycopg's ``AsyncConnectionPool``:

- Starting a session ends with a dramatiq enqueue, and dramatiq's Redis
  broker is synchronous: an async client would run that part in a thread
  anyway, between two awaits, for every start, fork and retry.
- Every operation is a short statement or two on the pool; the time is spent
  waiting on PostgreSQL, which a thread does without holding the GIL, so a
  small pool of threads costs little next to the round trips themselves.
- One implementation: each method calls the `Client` method of the same
  name, so the rules it enforces (commit before enqueue, idempotency keys,
  errors, the returned models) cannot drift between the two clients.

The threads are the client's own, as many as the database pool has
connections (``RESUMABLE_DB_POOL_SIZE``): a burst of requests queues for a
thread instead of filling the event loop's default executor or waiting on
the pool while holding a thread. Context variables are carried into the
thread, as ``asyncio.to_thread`` does.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, ParamSpec, TypeVar

from resumable.agent import AgentRegistry
from resumable.client import HUNG_AFTER_SECONDS, Client, Started, WaitSchedule
from resumable.coordination.records import SharedDocument, SharedVersion
from resumable.models.agent_queries import UnservedAgent
from resumable.models.step_queries import HungSession
from resumable.priorities import DEFAULT_PRIORITY, Priority
from resumable.schedules import Schedule
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
from resumable.services import arguments
from resumable.settings import Settings, load_settings

P = ParamSpec("P")
T = TypeVar("T")


class AsyncClient:
    """`Client`'s methods, awaitable. Build it like a `Client`:

    - ``AsyncClient.from_env()`` or ``AsyncClient(database_url=...,
      redis_url=...)``: it connects (and starts embedded servers for unset
      URLs) when built, once, at startup, and closes them on ``aclose()`` or
      at the end of ``async with``;
    - ``AsyncClient(client)``: around a `Client` someone else owns (say, the
      one ``resumable.webhooks.app.running`` hands you); closing the
      `AsyncClient` then stops only its threads.
    """

    def __init__(
        self,
        client: Client | None = None,
        *,
        settings: Settings | None = None,
        database_url: str | None = None,
        redis_url: str | None = None,
        registry: AgentRegistry | None = None,
    ) -> None:
        if client is not None and (settings or database_url or redis_url or registry):
            raise TypeError("pass either a Client or what to build one from, not both")
        self._owns_client = client is None
        self.client = client or Client(
            settings, registry=registry, database_url=database_url, redis_url=redis_url
        )
        self._threads = ThreadPoolExecutor(
            max_workers=self.client.settings.db_pool_size, thread_name_prefix="resumable-async"
        )

    @classmethod
    def from_env(cls, registry: AgentRegistry | None = None) -> AsyncClient:
        """On the servers the environment names (embedded ones for unset URLs)."""
        return cls(settings=load_settings(), registry=registry)

    @property
    def settings(self) -> Settings:
        return self.client.settings

    async def _run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._threads, call)

    def _shut(self) -> None:
        self._threads.shutdown(wait=True)
        if self._owns_client:
            self.client.close()

    async def aclose(self) -> None:
        """Wait for calls in flight, then close what this client opened."""
        await asyncio.get_running_loop().run_in_executor(None, self._shut)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # Sessions

    async def start(
        self,
        agent: str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        session_id: uuid.UUID | None = None,
        priority: Priority = DEFAULT_PRIORITY,
    ) -> uuid.UUID:
        """See `Client.start`."""
        return await self._run(
            self.client.start,
            agent,
            input,
            idempotency_key=idempotency_key,
            session_id=session_id,
            priority=priority,
        )

    async def start_session(
        self,
        agent: str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        session_id: uuid.UUID | None = None,
        priority: Priority = DEFAULT_PRIORITY,
    ) -> Started:
        """See `Client.start_session`."""
        return await self._run(
            self.client.start_session,
            agent,
            input,
            idempotency_key=idempotency_key,
            session_id=session_id,
            priority=priority,
        )

    async def set_priority(
        self,
        session_id: uuid.UUID | str,
        priority: Priority,
        *,
        actor: str,
        reason: str | None = None,
    ) -> Session:
        """See `Client.set_priority`."""
        return await self._run(
            self.client.set_priority, session_id, priority, actor=actor, reason=reason
        )

    async def get(self, session_id: uuid.UUID | str) -> Session:
        return await self._run(self.client.get, session_id)

    async def wait(self, session_id: uuid.UUID | str, *, timeout: float | None = None) -> Session:
        """See `Client.wait`; the pauses are ``asyncio.sleep``, so the event
        loop and the client's threads are free while it waits."""
        sid = arguments.session_id(session_id)
        schedule = WaitSchedule(sid, timeout)
        while True:
            session = await self.get(sid)
            pause = schedule.pause_after(session)
            if pause is None:
                return session
            await asyncio.sleep(pause)

    async def state(self, session_id: uuid.UUID | str) -> dict[str, Any]:
        return await self._run(self.client.state, session_id)

    async def list_sessions(
        self,
        *,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 50,
        hung_after: float | None = None,
        unserved: bool = False,
    ) -> list[Session]:
        return await self._run(
            self.client.list_sessions,
            status=status,
            agent=agent,
            limit=limit,
            hung_after=hung_after,
            unserved=unserved,
        )

    async def page_sessions(
        self,
        *,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        hung_after: float | None = None,
        unserved: bool = False,
    ) -> Page[Session]:
        return await self._run(
            self.client.page_sessions,
            status=status,
            agent=agent,
            limit=limit,
            cursor=cursor,
            hung_after=hung_after,
            unserved=unserved,
        )

    async def cancel(
        self, session_id: uuid.UUID | str, *, actor: str, reason: str | None = None
    ) -> Session:
        return await self._run(self.client.cancel, session_id, actor=actor, reason=reason)

    async def preview_accept(self, session_id: uuid.UUID | str) -> AcceptPreview:
        return await self._run(self.client.preview_accept, session_id)

    async def accept(
        self,
        session_id: uuid.UUID | str,
        *,
        reason: str,
        confirm: list[str] | None = None,
        actor: str = "python",
    ) -> Session:
        return await self._run(
            self.client.accept, session_id, reason=reason, confirm=confirm, actor=actor
        )

    async def signal(
        self,
        session_id: uuid.UUID | str,
        topic: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        actor: str = "python",
    ) -> Delivery:
        return await self._run(
            self.client.signal,
            session_id,
            topic,
            payload,
            idempotency_key=idempotency_key,
            actor=actor,
        )

    async def events(
        self,
        session_id: uuid.UUID | str,
        *,
        after: int = 0,
        limit: int | None = None,
        latest: int | None = None,
    ) -> list[Event]:
        return await self._run(
            self.client.events, session_id, after=after, limit=limit, latest=latest
        )

    async def checkpoints(
        self, session_id: uuid.UUID | str, *, after: int = 0, limit: int = 100_000
    ) -> list[Checkpoint]:
        return await self._run(self.client.checkpoints, session_id, after=after, limit=limit)

    async def checkpoint_state(self, session_id: uuid.UUID | str, seq: int) -> CheckpointState:
        return await self._run(self.client.checkpoint_state, session_id, seq)

    async def fork(
        self,
        session_id: uuid.UUID | str,
        at: int,
        *,
        actor: str = "python",
        state_patch: list[dict[str, Any]] | None = None,
        new_session_id: uuid.UUID | None = None,
        allow_compensated: bool = False,
    ) -> Session:
        return await self._run(
            self.client.fork,
            session_id,
            at,
            actor=actor,
            state_patch=state_patch,
            new_session_id=new_session_id,
            allow_compensated=allow_compensated,
        )

    async def count_by_status(self) -> dict[str, int]:
        return await self._run(self.client.count_by_status)

    async def hung_sessions(
        self, *, after_seconds: float = HUNG_AFTER_SECONDS, limit: int = 100
    ) -> list[HungSession]:
        return await self._run(self.client.hung_sessions, after_seconds=after_seconds, limit=limit)

    async def unserved_agents(self) -> list[UnservedAgent]:
        return await self._run(self.client.unserved_agents)

    # Shared documents

    async def shared(self, name: str) -> SharedDocument | None:
        """See `Client.shared`."""
        return await self._run(self.client.shared, name)

    async def shared_history(
        self, name: str, *, limit: int = 100, before: int | None = None
    ) -> list[SharedVersion]:
        """See `Client.shared_history`."""
        return await self._run(self.client.shared_history, name, limit=limit, before=before)

    # Dead letters

    async def dead_letters(
        self,
        *,
        status: DeadLetterStatus | Literal["all"] = "open",
        agent: str | None = None,
        error_type: str | None = None,
        step: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[DeadLetter]:
        return await self._run(
            self.client.dead_letters,
            status=status,
            agent=agent,
            error_type=error_type,
            step=step,
            limit=limit,
            cursor=cursor,
        )

    async def create_schedule(
        self, schedule: Schedule, *, actor: str = "python", paused: bool = False
    ) -> ScheduleInfo:
        return await self._run(self.client.create_schedule, schedule, actor=actor, paused=paused)

    async def concurrency_keys(self, *, limit: int = 50) -> list[ConcurrencyKey]:
        return await self._run(self.client.concurrency_keys, limit=limit)

    async def rate_limits(self, *, limit: int = 50) -> list[RateLimitInfo]:
        return await self._run(self.client.rate_limits, limit=limit)

    async def schedules(self, *, agent: str | None = None, limit: int = 100) -> list[ScheduleInfo]:
        return await self._run(self.client.schedules, agent=agent, limit=limit)

    async def schedule(self, name: str) -> ScheduleInfo:
        return await self._run(self.client.schedule, name)

    async def pause_schedule(
        self, name: str, *, reason: str | None = None, actor: str = "python"
    ) -> ScheduleInfo:
        return await self._run(self.client.pause_schedule, name, reason=reason, actor=actor)

    async def resume_schedule(self, name: str, *, actor: str = "python") -> ScheduleInfo:
        return await self._run(self.client.resume_schedule, name, actor=actor)

    async def delete_schedule(self, name: str, *, actor: str = "python") -> None:
        await self._run(self.client.delete_schedule, name, actor=actor)

    async def trigger_schedule(
        self, name: str, *, actor: str = "python", idempotency_key: str | None = None
    ) -> uuid.UUID:
        return await self._run(
            self.client.trigger_schedule, name, actor=actor, idempotency_key=idempotency_key
        )

    async def dead_letter(self, dead_letter_id: int) -> DeadLetter:
        return await self._run(self.client.dead_letter, dead_letter_id)

    async def retry_dead_letter(
        self,
        dead_letter_id: int,
        *,
        actor: str = "python",
        reason: str | None = None,
        state_patch: list[dict[str, Any]] | None = None,
    ) -> DeadLetter:
        return await self._run(
            self.client.retry_dead_letter,
            dead_letter_id,
            actor=actor,
            reason=reason,
            state_patch=state_patch,
        )

    async def discard_dead_letter(
        self, dead_letter_id: int, *, reason: str, actor: str = "python"
    ) -> DeadLetter:
        return await self._run(
            self.client.discard_dead_letter, dead_letter_id, reason=reason, actor=actor
        )
