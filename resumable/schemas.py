"""The records resumable hands out, as frozen pydantic models, shared by the
HTTP API and the Python client so that both speak one vocabulary.

The names, once for every surface (HTTP bodies, Python models, CLI JSON):

- ``session_id``: a session's UUID. Every other identifier is also
  ``<thing>_id`` (``event_id``, ``dead_letter_id``, ``delivery_id``); nothing
  is a bare ``id``.
- ``step``: on a session, where it is: the step that runs next, is running,
  waits to resume or failed (the column is ``cursor``, an internal name); on
  an event, checkpoint or dead letter, the step it is about.
- ``seq``: a checkpoint's number, counted from 1 per session; on a session,
  how many steps it has committed (its latest checkpoint's ``seq``).
- ``status``: a lifecycle status, the same strings PostgreSQL stores.
- Times are RFC 3339 (``*_at``; an event or checkpoint's own time is ``at``).
- A list is a ``Page``: ``items`` and ``next_cursor``, the opaque value to send
  back as ``cursor`` for the next page (``null`` on the last one).

Who uses them: the HTTP routes answer them; ``Client`` and ``AsyncClient``
return them; the CLI's ``--json`` (``sessions list/show/events/history``,
``dlq list/show``) prints them. docs/guides/http-api.md ("One vocabulary")
points here.

No model carries lease internals (epochs, owners, expiry) as fields: those are the
workers' business (only the payload of an audit event that records a run
starting names the worker and the epoch). Each record has a ``from_row`` constructor, so code that
reads the tables builds exactly what the API returns.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, PlainValidator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema
from typing_extensions import TypeAliasType

from resumable.models.status import SessionStatus, ToolCallStatus
from resumable.priorities import Priority
from resumable.schedules import describe

if TYPE_CHECKING:
    from resumable.models.records import (
        AuditEventRecord,
        DeadLetterRecord,
        ScheduleRecord,
        SessionRecord,
        ToolCallRecord,
    )

# A JSON value resumable can store: PostgreSQL refuses NUL in text and jsonb,
# so no string (and no object key) may hold one. The web process refuses that
# and the rest of what cannot be stored (lone surrogates, nesting deeper than
# 100, integers over 4,300 digits, non-finite numbers) as 400s while it parses
# a body (``resumable/webhooks/bodies.py``); these types only describe it.
_NO_NUL = r"^[^\x00]*$"
_Text = Annotated[str, Field(pattern=_NO_NUL)]


class _Described:
    """Adds a description to a JSON schema (and closes an object to keys that
    do not match its patternProperties)."""

    def __init__(self, description: str, *, closed: bool = False) -> None:
        self.description = description
        self.closed = closed

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["description"] = self.description
        if self.closed:
            json_schema["additionalProperties"] = False
        return json_schema


def _schema_aliases() -> tuple[Any, Any]:
    """The recursive JsonValue and JsonObject definitions, for the schema only
    (built in a function: mypy need not follow the recursion)."""
    alias: Any = TypeAliasType
    value = alias(
        "JsonValue",
        Annotated[
            Union[_Text, float, bool, list["JsonValue"], "JsonObject", None],
            _Described(
                "Any JSON value that can be stored: no string or key may contain NUL "
                "(\\u0000) or a lone surrogate, and nesting stops at 100 levels."
            ),
        ],
    )
    obj = alias(
        "JsonObject",
        Annotated[
            dict[_Text, "JsonValue"],
            _Described("A JSON object that can be stored (see JsonValue).", closed=True),
        ],
    )
    return value, obj


_JsonValueSchema, _JsonObjectSchema = _schema_aliases()


def _as_is(value: Any) -> Any:
    return value


# Taken as they come (storability is checked while a body is parsed), described
# by the definitions above (in validation mode, which the API document uses).
JsonValue = Annotated[Any, PlainValidator(_as_is, json_schema_input_type=_JsonValueSchema)]
JsonObject = Annotated[
    dict[str, Any], PlainValidator(_as_is, json_schema_input_type=_JsonObjectSchema)
]

Item = TypeVar("Item", bound=BaseModel)


class Record(BaseModel):
    """Frozen and closed: a record is read, never edited, and its JSON schema
    says exactly which fields it has."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class SessionError(Record):
    """Why a session failed (or its last attempt did)."""

    code: str | None = None
    type: str | None = Field(default=None, description="The exception's class name.")
    message: str | None = None
    step: str | None = Field(default=None, description="The step that raised.")


class WaitingFor(Record):
    """What a suspended session waits for; the first to fire resumes it."""

    callbacks: int = Field(description="Open single-use callback URLs.")
    signals: list[str] = Field(description="Signal topics it accepts.")
    timer_at: datetime | None = Field(default=None, description="When its timer fires.")
    poll: str | None = Field(default=None, description="The check it polls.")
    deadline: datetime | None = Field(
        default=None, description="When the wait times out (it then resumes with a timeout)."
    )
    lock: str | None = Field(default=None, description="The lock or semaphore it waits for.")
    children: int | None = Field(
        default=None,
        description="How many of the child sessions it waits for must finish (its Children "
        "wait's `need`).",
    )


class SlotWait(Record):
    """A pending session waiting for a free slot of its concurrency key
    (``Concurrency`` on its agent): it starts, in its turn, when a run of
    the key ends."""

    key: str = Field(description='The key, as a JSON array: ["agent", "input value"].')
    limit: int | None = Field(description="How many sessions of the key may run at once.")
    since: datetime = Field(description="When it began to wait.")


class ConcurrencyKey(Record):
    """One concurrency key (``Concurrency`` on an agent) as it stands: how
    many of its sessions run in its slots and how many wait for one."""

    key: str = Field(description='The key, as a JSON array: ["agent", "input value"].')
    limit: int | None = Field(description="How many of its sessions may run at once.")
    running: int = Field(ge=0, description="Its sessions running now, each in a slot.")
    waiting: int = Field(ge=0, description="Its sessions pending for a free slot.")
    oldest_wait_seconds: float | None = Field(
        description="How long its longest wait for a slot has lasted; null: none waits."
    )


class RateLimitInfo(Record):
    """One rate limit (``RateLimit`` on an agent) as it stands, for every
    worker: when its next turn comes, the calls it held back, and the
    sessions that let their worker go to wait for a turn."""

    name: str = Field(description="The limit's name, as agents declare it.")
    description: str = Field(description='What it allows, as last declared: "10 requests per 1 s".')
    next_turn_in_seconds: float = Field(
        ge=0, description="How long until a new call could start (0: at once)."
    )
    reserved_ahead_seconds: float = Field(
        ge=0,
        description="How far ahead turns are reserved by calls waiting in place for them.",
    )
    held_back_seconds: float = Field(
        ge=0, description="How long the provider's last refusal (HTTP 429) still holds it back."
    )
    turns: int = Field(ge=0, description="Turns given since the limit was last idle a period.")
    waited_in_place: int = Field(ge=0, description="Of those, turns a call waited for in place.")
    refused: int = Field(ge=0, description="Calls the provider refused (RateLimited) meanwhile.")
    sessions_waiting: int = Field(
        ge=0, description="Sessions retrying at their turn, holding no worker meanwhile."
    )
    oldest_wait_seconds: float | None = Field(
        description="How long the longest of those waits has lasted; null: none waits."
    )


class Session(Record):
    """One run of an agent."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "session_id": "3f1c9b7e-8d2a-4c51-9a0e-6b7f2d9c1e45",
                    "agent": "support",
                    "status": "suspended",
                    "step": "charge_customer",
                    "seq": 2,
                    "attempts": 0,
                    "input": {"amount": 500},
                    "state": {"plan": ["approval", "charge", "finish"]},
                    "result": None,
                    "error": None,
                    "waiting_for": {
                        "callbacks": 0,
                        "signals": ["approval"],
                        "timer_at": None,
                        "poll": None,
                        "deadline": "2026-11-02T09:00:00Z",
                    },
                    "forked_from": None,
                    "forked_at": None,
                    "created_at": "2026-11-01T09:00:00Z",
                    "updated_at": "2026-11-01T09:00:01Z",
                    "finished_at": None,
                }
            ]
        }
    )

    session_id: uuid.UUID
    agent: str
    status: SessionStatus
    step: str | None = Field(
        description="Where the session is: the step that runs next, is running, waits to "
        "resume or failed; null once it completed."
    )
    seq: int = Field(ge=0, description="Steps committed so far (its latest checkpoint).")
    attempts: int = Field(ge=0, description="Failed attempts of the current step.")
    input: JsonValue
    state: JsonObject | None = Field(
        default=None,
        description="The current state; null in lists of sessions (it can be large): "
        "read one session for it.",
    )
    result: JsonValue = Field(description="What the agent completed with; null until then.")
    error: SessionError | None
    waiting_for: WaitingFor | None = Field(description="Set while the session is suspended.")
    slot_wait: SlotWait | None = Field(
        default=None,
        description="Set while the session is pending for a free slot of its concurrency key.",
    )
    blocked_reason: JsonObject | None = Field(
        default=None,
        description="Set while the session is blocked: why its replay diverged from the"
        " record (kind, step, what was recorded, what the code asked for).",
    )
    version: int = Field(
        default=0,
        ge=0,
        description="The agent version that serves the session (0: unversioned code): only"
        " workers of that version run it, or a newer one that migrates it.",
    )
    started_version: int = Field(
        default=0,
        ge=0,
        description="The agent version the session started on (what a step's ctx.version is).",
    )
    priority: Priority = Field(
        default="normal",
        description="Which pending session a free worker takes first: `high`, `normal` or"
        " `low` (aged: a low session is never starved); set at start, changed by an operator.",
    )
    forked_from: uuid.UUID | None = Field(
        default=None, description="The session this one was forked from."
    )
    forked_at: int | None = Field(default=None, description="The origin's checkpoint it forked at.")
    parent_id: uuid.UUID | None = Field(
        default=None, description="The session whose step spawned this one (ctx.spawn)."
    )
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    @classmethod
    def from_row(cls, row: SessionRecord, *, include_state: bool = True) -> Session:
        wait = row.wait or {}
        return cls(
            session_id=row.id,
            agent=row.agent,
            status=SessionStatus(row.status),
            step=row.cursor,
            seq=row.step_seq,
            attempts=row.attempts,
            input=row.input,
            state=row.state if include_state else None,
            result=row.result,
            error=None
            if row.error is None
            else SessionError(**{k: row.error.get(k) for k in ("code", "type", "message", "step")}),
            waiting_for=None
            if row.status != SessionStatus.SUSPENDED
            else WaitingFor(
                callbacks=len(wait.get("callbacks", [])),
                signals=list(wait.get("signals", [])),
                timer_at=wait.get("timer_at"),
                poll=(wait.get("poll") or {}).get("check"),
                deadline=wait.get("deadline"),
                lock=(wait.get("lock") or {}).get("name"),
                children=(wait.get("children") or {}).get("need"),
            ),
            slot_wait=None
            if row.status != SessionStatus.PENDING
            or row.slot_wait_since is None
            or row.concurrency_key is None
            else SlotWait(
                key=row.concurrency_key, limit=row.concurrency_limit, since=row.slot_wait_since
            ),
            blocked_reason=row.blocked_reason if row.status == SessionStatus.BLOCKED else None,
            version=row.agent_version,
            started_version=row.started_version,
            priority=row.priority,
            forked_from=row.forked_from,
            forked_at=row.forked_at_seq,
            parent_id=row.parent_id,
            created_at=row.created_at,
            updated_at=row.changed_at,
            finished_at=row.finished_at,
        )


class Event(Record):
    """One entry of a session's append-only audit log."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "event_id": 41,
                    "session_id": "3f1c9b7e-8d2a-4c51-9a0e-6b7f2d9c1e45",
                    "seq": 2,
                    "step": "ask_approval",
                    "type": "suspended",
                    "payload": {"signals": ["approval"]},
                    "at": "2026-11-01T09:00:01Z",
                }
            ]
        }
    )

    event_id: int = Field(description="Increases with every event, across sessions.")
    session_id: uuid.UUID
    seq: int | None = Field(description="The checkpoint it belongs to, if any.")
    step: str | None
    type: str = Field(description="What happened, e.g. step_completed, suspended.")
    payload: JsonObject
    at: datetime

    @classmethod
    def from_row(cls, row: AuditEventRecord) -> Event:
        assert row.id is not None
        return cls(
            event_id=row.id,
            session_id=row.session_id,
            seq=row.seq,
            step=row.step,
            type=row.event_type,
            payload=row.payload,
            at=row.created_at,
        )


CheckpointKind = Literal["snapshot", "delta", "events"]


class Checkpoint(Record):
    """The record of one committed step (its state is read separately)."""

    session_id: uuid.UUID
    seq: int = Field(ge=1)
    step: str = Field(description="The step that ran.")
    next_step: str | None = Field(description="The step after it; null if it completed.")
    kind: CheckpointKind = Field(
        description="How it is stored: a whole snapshot, an RFC 6902 delta from the "
        "previous checkpoint, or the step's events (event-sourced agents)."
    )
    bytes: int = Field(ge=0, description="Stored size.")
    at: datetime

    @classmethod
    def from_row(cls, session_id: uuid.UUID, row: Mapping[str, Any]) -> Checkpoint:
        """From a ``checkpoint_queries.LIST_CHECKPOINTS`` row."""
        return cls(
            session_id=session_id,
            seq=row["seq"],
            step=row["step"],
            next_step=row["next_step"],
            kind=row["kind"],
            bytes=row["bytes"],
            at=row["created_at"],
        )


class CheckpointState(Record):
    """A session's state as it was right after step ``seq``."""

    session_id: uuid.UUID
    seq: int = Field(ge=1)
    step: str
    next_step: str | None
    state: JsonObject = Field(description="Redacted where the history is (see docs/concepts.md).")


class ToolCall(Record):
    """One logical side effect made through ``ctx.tool``, recorded once."""

    idempotency_key: str = Field(description="Derived from (session, step, call, arguments).")
    session_id: uuid.UUID
    seq: int = Field(description="The checkpoint of the step that made the call.")
    step: str
    call_index: int = Field(ge=0, description="Its position among the step's calls.")
    tool: str
    request: JsonValue
    status: ToolCallStatus
    response: JsonValue
    error: JsonObject | None
    attempts: int
    compensation: str | None = Field(description="The compensation registered for it, if any.")
    compensation_status: str | None
    compensation_attempts: int
    compensation_error: JsonObject | None
    compensated_at: datetime | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: ToolCallRecord) -> ToolCall:
        return cls(
            idempotency_key=row.idempotency_key,
            session_id=row.session_id,
            seq=row.step_seq,
            step=row.step,
            call_index=row.call_index,
            tool=row.tool,
            request=row.request,
            status=ToolCallStatus(row.status),
            response=row.response,
            error=row.error,
            attempts=row.attempts,
            compensation=row.compensation,
            compensation_status=row.compensation_status,
            compensation_attempts=row.compensation_attempts,
            compensation_error=row.compensation_error,
            compensated_at=row.compensated_at,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


class SupersededEffect(Record):
    """A recorded tool call that accepting a blocked session supersedes: it is
    no longer replayed, and its effect (it happened, or may have: `started`,
    `failed`) stays in the outside world. Accepting undoes nothing."""

    idempotency_key: str = Field(description="The key it was made under (name it in `confirm`).")
    seq: int = Field(description="The checkpoint of the step that made the call.")
    step: str
    call_index: int = Field(ge=0, description="Its position among the step's calls.")
    tool: str
    status: ToolCallStatus
    request: JsonValue = Field(description="Its arguments, redacted as recorded.")
    result: str | None = Field(
        description="What it answered (or its error), as recorded, cut to 200 characters."
    )
    compensation: str | None = Field(
        description="Its compensation, if any: it still runs if the session later fails."
    )


class ArgumentChange(Record):
    """One argument a replayed call asks for differently than recorded."""

    path: str = Field(
        description="Where: a keyword argument by name (`currency`), a positional one as "
        "`args[1]`, and below either `.key` or `[index]` (`args[1].nights`)."
    )
    change: Literal["changed", "added", "removed"]
    recorded: JsonValue = Field(description="The recorded value (null when `added`).")
    requested: JsonValue = Field(description="The value asked for now (null when `removed`).")


class NewCall(Record):
    """A call an accepted step makes in place of a recorded one."""

    call_index: int = Field(ge=0, description="Its position among the step's calls.")
    tool: str
    request: JsonValue = Field(description="Its new arguments, redacted as the block recorded.")
    idempotency_key: str | None = Field(
        description="The key it will be made under, derived as the worker derives it (if the "
        "step asks for the same call when it runs again); null when it cannot be known "
        "before then: the key is derived from the unredacted arguments, and the block "
        "recorded some of them redacted."
    )
    replaces: str = Field(description="The idempotency key of the recorded call it replaces.")
    changes: list[ArgumentChange] = Field(
        description="How its arguments differ from the recorded call's (at most 50)."
    )


class AcceptPreview(Record):
    """What accepting a blocked session's new behaviour would do; nothing is
    changed by reading it. The calls it makes again are `new_calls`; the
    recorded calls it supersedes, whose effects stay, are `superseded`."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "session_id": "3f1c9b7e-8d2a-4c51-9a0e-6b7f2d9c1e45",
                    "kind": "tool_call_diverged",
                    "step": "refund",
                    "seq": 1,
                    "call_index": 0,
                    "new_calls": [
                        {
                            "call_index": 0,
                            "tool": "refund",
                            "request": {"args": [], "kwargs": {"amount": 40, "currency": "EUR"}},
                            "idempotency_key": "rsm_9d2f...",
                            "replaces": "rsm_4b1a...",
                            "changes": [
                                {
                                    "path": "currency",
                                    "change": "changed",
                                    "recorded": "USD",
                                    "requested": "EUR",
                                }
                            ],
                        }
                    ],
                    "superseded": [
                        {
                            "idempotency_key": "rsm_4b1a...",
                            "seq": 1,
                            "step": "refund",
                            "call_index": 0,
                            "tool": "refund",
                            "status": "completed",
                            "request": {"args": [], "kwargs": {"amount": 40, "currency": "USD"}},
                            "result": '{"refund_id": "re_1"}',
                            "compensation": None,
                        }
                    ],
                    "confirmation_required": True,
                    "confirm": ["rsm_4b1a..."],
                    "summary": [
                        "argument `currency` changed from `USD` to `EUR` in call `refund` #0",
                    ],
                }
            ]
        }
    )

    session_id: uuid.UUID
    kind: Literal["tool_call_diverged", "tool_calls_missing"] = Field(
        description="Why the session is blocked (the only two kinds an accept takes)."
    )
    step: str = Field(description="The step that diverged; it runs again when accepted.")
    seq: int = Field(description="The checkpoint that step commits.")
    call_index: int = Field(ge=0, description="The first of its calls that diverged.")
    new_calls: list[NewCall] = Field(
        description="The calls that run again, with their new arguments and keys: the one at "
        "the divergence point (`tool_call_diverged`); none for `tool_calls_missing`. Calls "
        "the step makes after it are made as it asks for them: one it asks for with the "
        "same arguments as a superseded one goes out again under that one's key."
    )
    superseded: list[SupersededEffect] = Field(
        description="The recorded calls of the step from the divergence point on: no longer "
        "replayed, their effects stay."
    )
    confirmation_required: bool = Field(
        description="True when the accept makes a call again in place of a recorded one "
        "(`new_calls` and `superseded` are not empty): it is refused (409 "
        "`confirmation_required`) unless `confirm` names every superseded call."
    )
    confirm: list[str] = Field(
        description="What to send as `confirm`: the idempotency keys of the superseded calls."
    )
    summary: list[str] = Field(description="The same, in sentences for a person.")


DeadLetterStatus = Literal["open", "retried", "discarded"]


class DeadLetter(Record):
    """A session that failed for good, kept for an operator."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "dead_letter_id": 7,
                    "session_id": "3f1c9b7e-8d2a-4c51-9a0e-6b7f2d9c1e45",
                    "agent": "support",
                    "step": "charge_customer",
                    "error_code": "permanent_error",
                    "error_type": "PermanentError",
                    "error_message": "card declined",
                    "attempts": 1,
                    "compensation": "none",
                    "compensation_error": None,
                    "status": "open",
                    "failed_at": "2026-11-01T09:00:03Z",
                    "resolved_at": None,
                    "resolved_by": None,
                    "resolution": None,
                }
            ]
        }
    )

    dead_letter_id: int
    session_id: uuid.UUID
    agent: str
    step: str | None
    error_code: str
    error_type: str
    error_message: str
    traceback: str | None = Field(
        default=None, description="Null in lists; read one dead letter for it."
    )
    attempts: int
    compensation: Literal["none", "completed", "failed"] = Field(
        description="How the saga's compensations ended."
    )
    compensation_error: JsonObject | None
    status: DeadLetterStatus
    failed_at: datetime
    resolved_at: datetime | None
    resolved_by: str | None
    resolution: str | None = Field(description="The operator's reason.")

    @classmethod
    def from_row(cls, row: DeadLetterRecord, *, include_traceback: bool = True) -> DeadLetter:
        assert row.id is not None
        return cls(
            dead_letter_id=row.id,
            session_id=row.session_id,
            agent=row.agent,
            step=row.step,
            error_code=row.error_code,
            error_type=row.error_type,
            error_message=row.error_message,
            traceback=row.traceback if include_traceback else None,
            attempts=row.attempts,
            compensation=row.compensation,
            compensation_error=row.compensation_error,
            status=row.status,
            failed_at=row.failed_at,
            resolved_at=row.resolved_at,
            resolved_by=row.resolved_by,
            resolution=row.resolution,
        )


class ScheduleInfo(Record):
    """A schedule: when it starts sessions of its agent, and what it did last
    (``GET /v1/schedules/{name}``, ``Client.schedule``)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "weekday-summary",
                    "agent": "support",
                    "cron": "0 8 * * 1-5",
                    "every_seconds": None,
                    "timezone": "Europe/Paris",
                    "when": "At 08:00 on Monday through Friday (Europe/Paris)",
                    "input": {"inbox": "support"},
                    "catch_up": "skip",
                    "overlap": "skip",
                    "source": "code",
                    "paused": False,
                    "paused_by": None,
                    "paused_reason": None,
                    "next_due_at": "2026-12-07T07:00:00Z",
                    "queued_due_at": None,
                    "last_due_at": "2026-12-04T07:00:00Z",
                    "last_session_id": "3f1c9b7e-8d2a-4c51-9a0e-6b7f2d9c1e45",
                    "last_started_at": "2026-12-04T07:00:00.214Z",
                    "started_runs": 41,
                    "skipped_runs": 0,
                    "created_at": "2026-10-01T12:00:00Z",
                    "created_by": "worker:host:4242",
                    "updated_at": "2026-10-01T12:00:00Z",
                }
            ]
        }
    )

    name: str
    agent: str
    cron: str | None = Field(description="A five-field cron expression, read in `timezone`.")
    every_seconds: float | None = Field(description="Or: the interval, in seconds.")
    timezone: str
    when: str = Field(description="When it starts sessions, in words.")
    input: JsonValue = Field(description="Each session's input.")
    catch_up: Literal["skip", "latest", "all"] = Field(
        description="Due times missed while no scheduler ran: skipped, the latest started, "
        "or all started."
    )
    overlap: Literal["skip", "allow", "queue"] = Field(
        description="A due time while its last session is live: skipped, another session "
        "beside it, or one queued until it ends."
    )
    source: Literal["code", "api"] = Field(
        description="`code`: defined on its agent (`agent.schedule`), recorded by workers; "
        "`api`: created at run time."
    )
    paused: bool
    paused_by: str | None
    paused_reason: str | None
    next_due_at: datetime = Field(description="The next due time not yet handled.")
    queued_due_at: datetime | None = Field(
        description="A due time queued until the live session ends (`overlap: queue`)."
    )
    last_due_at: datetime | None
    last_session_id: uuid.UUID | None = Field(description="The last session it started.")
    last_started_at: datetime | None
    started_runs: int
    skipped_runs: int
    created_at: datetime
    created_by: str | None
    updated_at: datetime

    @classmethod
    def from_row(cls, row: ScheduleRecord) -> ScheduleInfo:
        return cls(
            name=row.name,
            agent=row.agent,
            cron=row.cron,
            every_seconds=row.every_seconds,
            timezone=row.timezone,
            when=describe(row.cron, row.every_seconds, row.timezone),
            input=row.input,
            catch_up=row.catch_up,
            overlap=row.overlap,
            source=row.source,
            paused=row.paused,
            paused_by=row.paused_by,
            paused_reason=row.paused_reason,
            next_due_at=row.next_due_at,
            queued_due_at=row.queued_due_at,
            last_due_at=row.last_due_at,
            last_session_id=row.last_session_id,
            last_started_at=row.last_started_at,
            started_runs=row.started_runs,
            skipped_runs=row.skipped_runs,
            created_at=row.created_at,
            created_by=row.created_by,
            updated_at=row.updated_at,
        )


class Delivery(Record):
    """A signal the server has committed (it will be consumed once): what
    ``Client.signal`` returns, the body HTTP answers a signal with."""

    status: Literal["accepted", "duplicate"] = Field(
        description="`accepted`: stored now; `duplicate`: the same idempotency key "
        "and payload came before, nothing new was stored."
    )
    message: str
    session_id: uuid.UUID
    delivery_id: int | None = Field(description="The stored delivery, when known.")


class Page(Record, Generic[Item]):
    """One page of a list, in the list's order."""

    items: list[Item]
    next_cursor: str | None = Field(
        description="Send it back as `cursor` for the next page; null on the last page."
    )

    @classmethod
    def model_parametrized_name(cls, params: tuple[Any, ...]) -> str:
        return f"{params[0].__name__}Page"
