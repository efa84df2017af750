"""What the API takes: JSON bodies and query strings, as pydantic models.

The same models validate requests and describe them in ``/openapi.json``, so
the two cannot drift. Strict where JSON would otherwise be coerced
(``{"reason": 5}`` is not a string, ``true`` is not a number), closed to
unknown body fields, bounded where a value reaches SQL or a sleep. A request
that does not fit answers 422 naming the field; nothing is read or written
before it fits.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    TypeAdapter,
    ValidationError,
)

from resumable.models.status import SessionStatus
from resumable.priorities import Priority
from resumable.schedules import MAX_EVERY_SECONDS, MAX_SCHEDULE_NAME_LENGTH
from resumable.schemas import JsonValue
from resumable.services.dead_letters import MAX_RATE, MIN_RATE, Compensation
from resumable.webhooks.errors import ApiError

# The largest value of an INTEGER column (checkpoint numbers).
MAX_SEQ = 2**31 - 1
# Ids of BIGINT identity columns (events, dead letters) stay far below this.
MAX_ID = 2**62
# How long one HTTP request may pace a drain for (limit / rate): a request is
# not a job, and a proxy would time it out long before a slow drain finished.
MAX_PACED_DRAIN_SECONDS = 60.0
# Same bounds as `resumable dlq drain --limit/--rate`.
MAX_DRAIN_LIMIT = 100_000

NAME_PATTERN = r"^[A-Za-z0-9_.:\-]{1,200}$"
NO_NUL_PATTERN = r"^[^\x00]*$"
SCHEDULE_NAME_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9._:-]{{0,{MAX_SCHEDULE_NAME_LENGTH - 1}}}$"
# Not blank as Python's str.strip() sees it (what the library and the CLI
# refuse), spelt out: `\S` differs by regex engine (pydantic's Rust one, the one
# a client validates the JSON Schema with), and lets \x1c-\x1f through in Rust.
PYTHON_WHITESPACE = r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NON_BLANK_PATTERN = rf"^[^\x00]*[^\x00{PYTHON_WHITESPACE}][^\x00]*$"
# A JSON Pointer (RFC 6901): "" or "/"-separated tokens, "~" escaped as ~0 and ~1.
POINTER_PATTERN = r"^(/([^~/\x00]|~[01])*)*$"
_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$", re.ASCII
)


def _rfc3339_text(value: Any) -> Any:
    """Only an RFC 3339 date-time string (pydantic alone would also take a
    number as a Unix time, or a time without its offset)."""
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ValueError("must be an RFC 3339 date-time, e.g. 2026-11-01T09:00:00Z")
    return value


def _integer_text(value: Any) -> Any:
    """A query string's digits only (pydantic alone would take "1.0" and " 5")."""
    if isinstance(value, str) and not re.fullmatch(r"[0-9]{1,20}", value):
        raise ValueError("must be a whole number")
    return value


Name = Annotated[StrictStr, Field(pattern=NAME_PATTERN, examples=["support"])]
ScheduleName = Annotated[
    StrictStr, Field(pattern=SCHEDULE_NAME_PATTERN, examples=["weekday-summary"])
]
Text = Annotated[StrictStr, Field(min_length=1, max_length=200, pattern=NO_NUL_PATTERN)]
Reason = Annotated[StrictStr, Field(max_length=2000, pattern=NO_NUL_PATTERN)]
NonBlankReason = Annotated[
    StrictStr, Field(min_length=1, max_length=2000, pattern=NON_BLANK_PATTERN)
]
Time = Annotated[datetime, BeforeValidator(_rfc3339_text)]
Pointer = Annotated[StrictStr, Field(max_length=2000, pattern=POINTER_PATTERN)]
_CURSOR = "The `next_cursor` of the previous page."
# Opaque (it encodes a position in time); one this API did not hand out is a 400.
SessionCursor = Annotated[
    StrictStr,
    Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_\-]+$", description=_CURSOR),
]
# Positions after (or before) an id or seq: any such number is a valid position.
IdCursor = Annotated[StrictStr, Field(pattern=r"^[0-9]{1,18}$", description=_CURSOR)]
SeqCursor = Annotated[StrictStr, Field(pattern=r"^[0-9]{1,9}$", description=_CURSOR)]


def _json_integer(value: Any) -> Any:
    """JSON has one number type: 3.0 is the integer 3 (as JSON Schema says)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Digits = BeforeValidator(_integer_text)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- RFC 6902 JSON Patch, applied to a session's state -------------------------------


class AddOperation(_Body):
    op: Literal["add"]
    path: Pointer
    value: JsonValue


class RemoveOperation(_Body):
    op: Literal["remove"]
    path: Pointer


class ReplaceOperation(_Body):
    op: Literal["replace"]
    path: Pointer
    value: JsonValue


class MoveOperation(_Body):
    model_config = ConfigDict(populate_by_name=True)

    op: Literal["move"]
    from_: Pointer = Field(alias="from")
    path: Pointer


class CopyOperation(_Body):
    model_config = ConfigDict(populate_by_name=True)

    op: Literal["copy"]
    from_: Pointer = Field(alias="from")
    path: Pointer


class TestOperation(_Body):
    __test__ = False  # not a pytest class

    op: Literal["test"]
    path: Pointer
    value: JsonValue


PatchOperation = Annotated[
    AddOperation
    | RemoveOperation
    | ReplaceOperation
    | MoveOperation
    | CopyOperation
    | TestOperation,
    Field(discriminator="op"),
]
StatePatch = Annotated[
    list[PatchOperation],
    Field(
        description="An RFC 6902 JSON Patch applied to the state; 422 if it does not apply.",
        examples=[[{"op": "replace", "path": "/approved", "value": True}]],
    ),
]


def patch_as_json(patch: list[PatchOperation] | None) -> list[dict[str, Any]] | None:
    """The patch as plain RFC 6902 JSON, for the code that applies and records it."""
    if patch is None:
        return None
    return [operation.model_dump(by_alias=True) for operation in patch]


# -- bodies ---------------------------------------------------------------------------


class CreateSession(_Body):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"agent": "support", "input": {"amount": 500}}]}
    )

    agent: Name = Field(description="A registered agent; 422 `unknown_agent` otherwise.")
    input: JsonValue = None
    session_id: uuid.UUID | None = Field(
        default=None, description="Choose the id yourself; 409 if it is taken."
    )
    priority: Priority = Field(
        default="normal",
        description="`high`, `normal` or `low`: which pending session a free worker takes"
        " first (aged, so a low one is never starved).",
    )


class CreateSchedule(_Body):
    """A schedule created at run time (``resumable/schedules.py``): a cron
    expression or an interval; 422 `invalid_schedule` for a bad one."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "weekday-summary",
                    "agent": "support",
                    "cron": "0 8 * * 1-5",
                    "timezone": "Europe/Paris",
                    "input": {"inbox": "support"},
                },
                {"name": "refund-check", "agent": "support", "every_seconds": 900},
            ]
        }
    )

    name: ScheduleName
    agent: Name = Field(description="An announced agent; 422 `unknown_agent` otherwise.")
    cron: (
        Annotated[StrictStr, Field(min_length=1, max_length=200, pattern=NO_NUL_PATTERN)] | None
    ) = Field(default=None, description="Five fields: minute hour day-of-month month day-of-week.")
    every_seconds: (
        Annotated[float, Field(strict=True, ge=1, le=MAX_EVERY_SECONDS, allow_inf_nan=False)] | None
    ) = Field(default=None, description="Or: every so many seconds, from now.")
    timezone: Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=NO_NUL_PATTERN)] = (
        Field(default="UTC", description="The cron expression's IANA time zone.")
    )
    input: JsonValue = Field(default=None, description="Each session's input.")
    catch_up: Literal["skip", "latest", "all"] = Field(
        default="skip", description="Due times missed while no scheduler ran."
    )
    overlap: Literal["skip", "allow", "queue"] = Field(
        default="skip", description="A due time while the last session is live."
    )
    paused: StrictBool = Field(default=False, description="Create it paused.")


class PauseSchedule(_Body):
    model_config = ConfigDict(json_schema_extra={"examples": [{"reason": "inbox migration"}]})

    reason: Reason | None = None


class CancelSession(_Body):
    model_config = ConfigDict(json_schema_extra={"examples": [{"reason": "customer withdrew"}]})

    reason: Reason | None = None


class SetPriority(_Body):
    """An operator's change of a session's priority (audited)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"priority": "high", "reason": "customer on the phone"}]}
    )

    priority: Priority = Field(description="`high`, `normal` or `low`.")
    reason: Reason | None = None


class BlockedSessionAction(_Body):
    """Why an operator resumes, accepts or fails a blocked session (audited)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"reason": "deployed the fix for the renamed step"}]}
    )

    reason: NonBlankReason = Field(description="Why (kept in the audit log with the actor).")


# An idempotency key as the worker derives them ("rsm_" and 64 hex digits), and
# how many an accept may name (a step's calls from its divergence point on):
# the longest list still fits in the smallest body limit worth running with.
ToolCallKey = Annotated[StrictStr, Field(pattern=NAME_PATTERN)]
MAX_CONFIRMED_CALLS = 1_000


class AcceptBlockedSession(BlockedSessionAction):
    """Why an operator accepts a blocked session's new tool calls, and the
    recorded calls it confirms superseding."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "reason": "EUR is the right currency",
                    "confirm": [
                        "rsm_4b1a7c0e9f2d3a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3"
                    ],
                }
            ]
        }
    )

    confirm: list[ToolCallKey] | None = Field(
        default=None,
        max_length=MAX_CONFIRMED_CALLS,
        description="The idempotency keys of the recorded calls this accept supersedes, all "
        "of them and no other (`confirm` of `GET .../accept`). Required when a call runs "
        "again (409 `confirmation_required` without it); when given, always checked.",
    )


class ForkSession(_Body):
    model_config = ConfigDict(json_schema_extra={"examples": [{"at": 1}]})

    at: Annotated[int, Field(strict=True, ge=1, le=MAX_SEQ), BeforeValidator(_json_integer)] = (
        Field(description="The checkpoint to start from.")
    )
    state_patch: StatePatch | None = None
    session_id: uuid.UUID | None = Field(
        default=None, description="The fork's id; 409 if it is taken."
    )
    allow_compensated: StrictBool = Field(
        default=False,
        description="Fork even though tool calls it reuses were undone by a compensation.",
    )


class RetryDeadLetter(_Body):
    model_config = ConfigDict(json_schema_extra={"examples": [{"reason": "card limit raised"}]})

    reason: Reason | None = None
    state_patch: StatePatch | None = None


class DiscardDeadLetter(_Body):
    model_config = ConfigDict(json_schema_extra={"examples": [{"reason": "duplicate order"}]})

    reason: NonBlankReason


class _Drain(_Body):
    dry_run: StrictBool = Field(default=False, description="Only list what would be drained.")
    limit: Annotated[
        int, Field(strict=True, ge=1, le=MAX_DRAIN_LIMIT), BeforeValidator(_json_integer)
    ] = 100
    rate: (
        Annotated[float, Field(strict=True, ge=MIN_RATE, le=MAX_RATE, allow_inf_nan=False)] | None
    ) = Field(
        default=None,
        description="At most this many actions per second. Over HTTP a paced drain must"
        f" fit in {MAX_PACED_DRAIN_SECONDS:g} s (limit / rate); slower drains belong to"
        " `resumable dlq drain`.",
    )
    agent: Name | None = None
    error_type: Text | None = None
    step: Text | None = None
    since: Time | None = Field(default=None, description="Failed at or after.")
    until: Time | None = Field(default=None, description="Failed before.")
    compensation: Compensation | None = Field(
        default=None,
        description="Only this saga outcome: `none` (nothing to undo), `completed`"
        " (every compensation ran) or `failed` (one kept failing).",
    )


class DrainRetry(_Drain):
    """Retry every open dead letter that matches."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"action": "retry", "limit": 10}]})

    action: Literal["retry"]
    reason: Reason | None = None


class DrainDiscard(_Drain):
    """Discard every open dead letter that matches (a reason is required)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"action": "discard", "reason": "cleanup"}]}
    )

    action: Literal["discard"]
    reason: NonBlankReason


DrainDeadLetters = Annotated[DrainRetry | DrainDiscard, Field(discriminator="action")]


# -- query strings --------------------------------------------------------------------


class _Query(BaseModel):
    """Unknown query parameters are ignored, as HTTP caches and proxies add some."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class ListSchedules(_Query):
    agent: Name | None = None
    limit: Annotated[int, Field(ge=1, le=1000, description="Schedules per page."), Digits] = 100
    cursor: ScheduleName | None = Field(
        default=None, description="The last name of the previous page."
    )


class ListConcurrencyKeys(_Query):
    limit: Annotated[int, Field(ge=1, le=1000, description="Keys to list."), Digits] = 50


class ListRateLimits(_Query):
    limit: Annotated[int, Field(ge=1, le=1000, description="Limits to list."), Digits] = 50


class ListSessions(_Query):
    status: SessionStatus | None = None
    agent: Name | None = None
    parent: uuid.UUID | None = Field(default=None, description="Only this session's children.")
    limit: Annotated[int, Field(ge=1, le=200, description="Sessions per page."), Digits] = 50
    cursor: SessionCursor | None = None


class ListEvents(_Query):
    limit: Annotated[int, Field(ge=1, le=1000, description="Events per page."), Digits] = 200
    cursor: IdCursor | None = None


class ListCheckpoints(_Query):
    limit: Annotated[int, Field(ge=1, le=1000, description="Checkpoints per page."), Digits] = 100
    cursor: SeqCursor | None = None


class ListDeadLetters(_Query):
    status: Literal["open", "retried", "discarded", "all"] = "open"
    agent: Name | None = None
    error_type: Text | None = None
    step: Text | None = None
    since: Time | None = Field(default=None, description="Failed at or after.")
    until: Time | None = Field(default=None, description="Failed before.")
    compensation: Compensation | None = Field(
        default=None,
        description="Only this saga outcome: `none` (nothing to undo), `completed`"
        " (every compensation ran) or `failed` (one kept failing).",
    )
    limit: Annotated[int, Field(ge=1, le=500, description="Dead letters per page."), Digits] = 50
    cursor: IdCursor | None = None


# -- parsing --------------------------------------------------------------------------

Model = TypeVar("Model")


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(part) for part in error["loc"]) or "body"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def validate(adapter: TypeAdapter[Model], value: Any, what: str) -> Model:
    """`value` as the adapter's type, or a 422 naming what is wrong."""
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        raise ApiError(422, "invalid_request", f"{what}: {_describe(exc)}") from None


def parse_body(model: Any, body: Any) -> Any:
    """`body` (parsed JSON; an empty body is ``{}``) as `model`, or a 422."""
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_request", "the body must be a JSON object")
    return validate(_adapter(model), body, "body")


def parse_query(model: type[Model], params: Any) -> Model:
    """A query string (the last value of a repeated parameter) as `model`, or a 422."""
    adapter: TypeAdapter[Model] = _adapter(model)
    return validate(adapter, dict(params), "query")


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(model: Any) -> TypeAdapter[Any]:
    if model not in _ADAPTERS:
        _ADAPTERS[model] = TypeAdapter(model)
    return _ADAPTERS[model]
