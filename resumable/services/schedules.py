"""Schedules at run time: recording the ones defined in code, creating,
pausing, resuming, deleting and triggering them, and starting their due
sessions (the scheduler's job, ``start_due``).

Starting a due time is one transaction: the schedule's row is locked
(``SKIP LOCKED``: another scheduler takes the next schedule), its sessions
are inserted with the due time's idempotency key and a ``scheduled`` audit
event, and ``next_due_at`` moves past them; the queue messages follow the
commit (``enqueue_after_commit``: a lost one is re-sent by the reconciler,
as for any session). A crash before the commit starts nothing and moves
nothing, so the next pass starts the same due time once.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from resumable._internal import serialization
from resumable.broker.messages import BrokerSource, broker_of, enqueue_after_commit
from resumable.errors import (
    ScheduleDefinitionError,
    ScheduleExistsError,
    ScheduleNotFoundError,
    UnknownAgentError,
)
from resumable.models import agent_queries, schedule_queries, session_queries
from resumable.models.database import Database
from resumable.models.records import ScheduleRecord
from resumable.models.schedule_queries import DueSchedule
from resumable.schedules import MAX_CATCH_UP_PER_PASS, Schedule, due_key
from resumable.services import arguments
from resumable.settings import Settings

if TYPE_CHECKING:
    from resumable.agent import Agent

logger = logging.getLogger(__name__)

# Schedules one transaction handles (each may start several sessions), and
# the most batches one pass handles.
DUE_BATCH = 50
MAX_BATCHES_PER_PASS = 20


def definition(row: ScheduleRecord) -> Schedule:
    """The schedule a row records (validated again: a row written by an
    older version, or by hand, that no longer passes is an error here)."""
    return Schedule(
        name=row.name,
        agent=row.agent,
        cron=row.cron,
        every=row.every_seconds,
        timezone=row.timezone,
        input=row.input,
        catch_up=row.catch_up,  # type: ignore[arg-type]
        overlap=row.overlap,  # type: ignore[arg-type]
    )


@dataclass
class Pass:
    """What one ``start_due`` did."""

    started: list[uuid.UUID] = field(default_factory=list)
    skipped: int = 0
    schedules: int = 0


@dataclass(frozen=True)
class Plan:
    """What a due schedule does in this pass: the due times it starts, how
    many it skips, what it queues and where it goes on from."""

    start: list[datetime]
    skipped: int
    queued: datetime | None
    next_due_at: datetime


def plan(schedule: Schedule, row: DueSchedule, *, live: bool, grace: timedelta) -> Plan:
    """What one locked due schedule does now, from its row and the
    transaction's time (pure: tested without a database)."""
    now = row.now
    due: list[datetime] = []
    moment = row.next_due_at
    while moment <= now and len(due) < MAX_CATCH_UP_PER_PASS:
        due.append(moment)
        moment = schedule.next_due(moment, row.anchor_at)
    behind = moment <= now  # more due times than one pass walks
    if schedule.catch_up == "all":
        chosen, next_due_at = due, moment  # behind: the next pass goes on from `moment`
    else:
        if behind:  # a long outage: jump to its end rather than walk every due time
            moment = max(schedule.last_due(now - grace, row.anchor_at), due[-1])
            if moment != due[-1]:
                due.append(moment)  # the latest missed one
            moment = schedule.next_due(moment, row.anchor_at)
            for _ in range(MAX_CATCH_UP_PER_PASS):  # those on time (the next pass goes on)
                if moment > now:
                    break
                due.append(moment)
                moment = schedule.next_due(moment, row.anchor_at)
        next_due_at = moment
        on_time = [d for d in due if now - d <= grace]
        missed = [d for d in due if now - d > grace]
        chosen = (missed[-1:] if schedule.catch_up == "latest" else []) + on_time
    skipped = len(due) - len(chosen)
    candidates = ([row.queued_due_at] if row.queued_due_at is not None else []) + chosen
    if schedule.overlap == "allow":
        return Plan(candidates, skipped, None, next_due_at)
    # "skip" and "queue": one live session of the schedule at a time.
    start = [] if live or not candidates else candidates[:1]
    rest = candidates[len(start) :]
    queued = rest[-1] if schedule.overlap == "queue" and rest else None
    skipped += len(rest) - (1 if queued is not None else 0)
    return Plan(start, skipped, queued, next_due_at)


class Schedules:
    """The schedules of one database; `broker` sends the sessions they start."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        broker: BrokerSource | None,
    ) -> None:
        """`broker` sends what a trigger or a due time starts: a broker, a
        function that builds one when first needed (a command that only
        lists schedules never loads it), or None (the reconciler sends it)."""
        self.settings = settings
        self.db = db
        self.broker = broker

    # -- from code --------------------------------------------------------------------

    def sync_from_code(self, agents: list[Agent], *, worker: str) -> list[str]:
        """Record the schedules `agents` define (new or changed ones only);
        return a warning line for each name a run-time schedule holds."""
        lines = []
        now = self._now()
        with self.db.connection() as conn:
            for agent in agents:
                for schedule in agent.schedules:
                    written = schedule_queries.sync_from_code(
                        conn,
                        **_columns(schedule),
                        agent_version=agent.version,
                        anchor_at=now,
                        next_due_at=schedule.next_due(now, now),
                        created_by=f"worker:{worker}",
                    )
                    if written is not None:
                        logger.info(
                            "schedule %r of agent %r recorded: %s; next due %s",
                            schedule.name,
                            schedule.agent,
                            schedule.describe(),
                            written.next_due_at.isoformat(),
                            extra={"action": "schedule_recorded", "schedule": schedule.name},
                        )
                    elif schedule_queries.source(conn, schedule.name) == "api":
                        lines.append(
                            f"schedule {schedule.name!r} of agent {agent.name!r} is defined in "
                            "code and was created at run time under the same name: the run-time "
                            "one is kept (delete it to use the code's)"
                        )
        for line in lines:
            logger.warning(line, extra={"action": "schedule_name_taken"})
        return lines

    # -- run time ---------------------------------------------------------------------

    def create(
        self, schedule: Schedule, *, actor: str, paused: bool = False
    ) -> tuple[ScheduleRecord, bool]:
        """A schedule created at run time, and whether this call created it:
        the same definition again answers the existing one; another under a
        taken name is ScheduleExistsError."""
        self._require_agent(schedule.agent)
        now = self._now()
        with self.db.connection() as conn:
            row = schedule_queries.create(
                conn,
                **_columns(schedule),
                paused=paused,
                anchor_at=now,
                next_due_at=schedule.next_due(now, now),
                created_by=arguments.storable(actor, "actor"),
            )
            if row is not None:
                return row, True
            existing = schedule_queries.get(conn, schedule.name)
        if existing is not None and _same(definition(existing), schedule):
            return existing, False
        raise ScheduleExistsError(
            f"a schedule named {schedule.name!r} already exists with another definition "
            "(delete it first, or choose another name)"
        )

    def get(self, name: str) -> ScheduleRecord:
        with self.db.connection() as conn:
            row = schedule_queries.get(conn, name)
        if row is None:
            raise ScheduleNotFoundError(f"no schedule is named {name[:140]!r}")
        return row

    def page(
        self, *, limit: int = 100, agent: str | None = None, after: str = ""
    ) -> list[ScheduleRecord]:
        with self.db.connection() as conn:
            return schedule_queries.page(conn, limit=limit, agent=agent, after=after)

    def pause(self, name: str, *, actor: str, reason: str | None = None) -> ScheduleRecord:
        with self.db.connection() as conn:
            row = schedule_queries.pause(
                conn,
                name,
                actor=arguments.storable(actor, "actor"),
                reason=None if reason is None else arguments.storable(reason, "reason"),
            )
        if row is None:
            raise ScheduleNotFoundError(f"no schedule is named {name[:140]!r}")
        logger.info("schedule %r paused by %s", name, actor, extra={"action": "schedule_paused"})
        return row

    def resume(self, name: str, *, actor: str) -> ScheduleRecord:
        """Running again from now: the due times of the pause start nothing."""
        with self.db.connection() as conn, conn.transaction():
            row = schedule_queries.lock(conn, name)
            if row is None:
                raise ScheduleNotFoundError(f"no schedule is named {name[:140]!r}")
            if not row.paused:
                return row
            now = self._now(conn)
            resumed = schedule_queries.resume(
                conn, name, next_due_at=definition(row).next_due(now, row.anchor_at)
            )
        assert resumed is not None
        logger.info("schedule %r resumed by %s", name, actor, extra={"action": "schedule_resumed"})
        return resumed

    def delete(self, name: str, *, actor: str) -> None:
        """Delete the schedule; the sessions it started go on."""
        with self.db.connection() as conn:
            if not schedule_queries.delete(conn, name):
                raise ScheduleNotFoundError(f"no schedule is named {name[:140]!r}")
        logger.info("schedule %r deleted by %s", name, actor, extra={"action": "schedule_deleted"})

    def trigger(self, name: str, *, actor: str, idempotency_key: str | None = None) -> uuid.UUID:
        """Start a session of the schedule now, whatever its overlap policy
        says (an operator asked for it) and paused or not; its due times
        stay as they were. The same `idempotency_key` again (a retry whose
        answer was lost) answers the session it started, starting none."""
        session_id = uuid.uuid4()
        key = f"schedule:{name}:manual:{idempotency_key or session_id}"
        with self.db.connection() as conn, conn.transaction():
            row = schedule_queries.lock(conn, name)
            if row is None:
                raise ScheduleNotFoundError(f"no schedule is named {name[:140]!r}")
            payload = {"schedule": name, "triggered_by": actor}
            if not self._start(conn, row, session_id, key=key, payload=payload):
                earlier = session_queries.find_by_idempotency_key(conn, key)
                assert earlier is not None  # the key's row cannot vanish in this transaction
                return earlier.id
            schedule_queries.advance(
                conn,
                name,
                next_due_at=row.next_due_at,
                queued_due_at=row.queued_due_at,
                last_due_at=None,
                last_session_id=session_id,
                started=1,
                skipped=0,
            )
        self._send([session_id], why="schedule triggered")
        logger.info(
            "schedule %r triggered by %s: session %s",
            name,
            actor,
            session_id,
            extra={"action": "schedule_triggered", "session_id": str(session_id)},
        )
        return session_id

    # -- the scheduler's job -------------------------------------------------------------

    def start_due(self) -> Pass:
        """Start the sessions of every due schedule (a batch per transaction,
        at most MAX_BATCHES_PER_PASS batches: the next pass goes on)."""
        done = Pass()
        for _ in range(MAX_BATCHES_PER_PASS):
            started: list[uuid.UUID] = []
            with self.db.connection() as conn, conn.transaction():
                due = schedule_queries.lock_due(conn, limit=DUE_BATCH)
                for row in due:
                    started += self._handle_alone(conn, row, done)
            done.schedules += len(due)
            done.started += started
            if started and not self._send(started, why="schedules due"):
                break
            if len(due) < DUE_BATCH:
                break
        if done.started or done.skipped:
            logger.info(
                "schedules: started %d session(s), skipped %d due time(s)",
                len(done.started),
                done.skipped,
                extra={"action": "schedules_due"},
            )
        return done

    @property
    def grace(self) -> timedelta:
        """How late a due time may be handled and still count as on time:
        the setting, and never less than two scheduler intervals (a
        scheduler that looks every 5 minutes finds every due time late)."""
        interval = self.settings.scheduler_interval_seconds
        return timedelta(seconds=max(self.settings.schedule_grace_seconds, 2 * interval + 1))

    def _handle_alone(self, conn: Any, row: DueSchedule, done: Pass) -> list[uuid.UUID]:
        """Decide for one schedule, then write: a schedule whose row cannot be
        decided for (a definition no longer valid, written by hand or by
        another version; a cron expression that never matches again) is
        paused with the reason, and the batch goes on. The decision is pure
        Python over the locked row (which says whether the last session is
        live), so no savepoint is needed (two round trips per schedule,
        measured: a third of a due time's cost)."""
        try:
            decided = plan(definition(row), row, live=row.live, grace=self.grace)
        except Exception as exc:
            reason = exc.message if isinstance(exc, ScheduleDefinitionError) else repr(exc)
            schedule_queries.pause(conn, row.name, actor="scheduler", reason=reason[:2000])
            logger.error(
                "schedule %r paused: %s",
                row.name,
                reason,
                extra={"action": "schedule_invalid"},
            )
            return []
        return self._write(conn, row, decided, done)

    def _write(self, conn: Any, row: DueSchedule, decided: Plan, done: Pass) -> list[uuid.UUID]:
        started = []
        for due in decided.start:
            session_id = uuid.uuid4()
            if self._start(
                conn,
                row,
                session_id,
                key=due_key(row.name, due),
                payload={"schedule": row.name, "due_at": due.isoformat()},
            ):
                started.append(session_id)
        done.skipped += decided.skipped
        schedule_queries.advance(
            conn,
            row.name,
            next_due_at=decided.next_due_at,
            queued_due_at=decided.queued,
            last_due_at=decided.start[-1] if decided.start else None,
            last_session_id=started[-1] if started else None,
            started=len(started),
            skipped=decided.skipped,
        )
        return started

    def _start(
        self,
        conn: Any,
        row: ScheduleRecord,
        session_id: uuid.UUID,
        *,
        key: str,
        payload: dict[str, Any],
    ) -> bool:
        created = session_queries.create(
            conn,
            session_id,
            agent=row.agent,
            cursor=None,
            input=json.dumps(row.input),
            idempotency_key=key,
            trace_context=None,
        )
        if created:
            schedule_queries.record_scheduled(conn, session_id, json.dumps(payload))
        return created

    def _send(self, session_ids: list[uuid.UUID], *, why: str) -> bool:
        if self.broker is None:
            return True  # the reconciler sends pending sessions
        return enqueue_after_commit(broker_of(self.broker), self.settings, session_ids, why=why)

    def _require_agent(self, agent: str) -> None:
        with self.db.connection() as conn:
            if not agent_queries.agent_known(conn, agent):
                raise UnknownAgentError(
                    f"no worker has announced an agent named {agent[:140]!r}: start a worker "
                    "that loads it first"
                )

    def _now(self, conn: Any | None = None) -> datetime:
        if conn is not None:
            now: datetime = conn.execute("SELECT now()").fetchone()["now"]
            return now
        with self.db.connection() as fresh:
            return self._now(fresh)


def _columns(schedule: Schedule) -> dict[str, Any]:
    return {
        "name": schedule.name,
        "agent": schedule.agent,
        "cron": schedule.cron,
        "every_seconds": schedule.every_seconds,
        "timezone": schedule.timezone,
        "input": json.dumps(schedule.input),
        "catch_up": schedule.catch_up,
        "overlap": schedule.overlap,
    }


def _same(a: Schedule, b: Schedule) -> bool:
    """The same definition, inputs compared as JSON values (jsonb orders an
    object's keys its own way)."""
    ours, theirs = _columns(a), _columns(b)
    ours["input"] = serialization.canonical(a.input)
    theirs["input"] = serialization.canonical(b.input)
    return ours == theirs
