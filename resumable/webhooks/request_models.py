"""The JSON bodies the API takes, as pydantic models.

Strict where JSON would otherwise be coerced (``{"reason": 5}`` is not a
string, ``true`` is not a number), closed to unknown fields, bounded where a
value reaches SQL or a sleep. A body that does not fit answers 422 naming the
field; nothing is read or written before it fits.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from resumable.webhooks.errors import ApiError

# The largest value of an INTEGER column (checkpoint numbers).
MAX_SEQ = 2**31 - 1
# Same bounds as `resumable dlq drain --limit/--rate`.
MAX_DRAIN_LIMIT = 100_000
MIN_DRAIN_RATE = 0.01

Reason = Annotated[StrictStr, Field(max_length=2000)]
Name = Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_.:\-]{1,200}$")]
StatePatch = list[dict[str, Any]]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CreateSession(_Body):
    agent: Name
    input: Any = None
    session_id: uuid.UUID | None = None


class CancelSession(_Body):
    reason: Reason | None = None


class ForkSession(_Body):
    at: Annotated[int, Field(strict=True, ge=1, le=MAX_SEQ)]
    state_patch: StatePatch | None = None
    session_id: uuid.UUID | None = None
    # Fork even though the tool calls it reuses were undone by a compensation.
    allow_compensated: StrictBool = False


class RetryDeadLetter(_Body):
    reason: Reason | None = None
    state_patch: StatePatch | None = None


class DiscardDeadLetter(_Body):
    reason: Annotated[StrictStr, Field(min_length=1, max_length=2000, pattern=r"\S")]


class DrainDeadLetters(_Body):
    action: Literal["retry", "discard"]
    dry_run: StrictBool = False
    limit: Annotated[int, Field(strict=True, ge=1, le=MAX_DRAIN_LIMIT)] = 100
    rate: Annotated[float, Field(strict=True, ge=MIN_DRAIN_RATE, allow_inf_nan=False)] | None = None
    reason: Reason | None = None
    agent: StrictStr | None = None
    error_type: StrictStr | None = None
    step: StrictStr | None = None
    since: StrictStr | None = None
    until: StrictStr | None = None


Model = TypeVar("Model", bound=_Body)


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(part) for part in error["loc"]) or "body"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def parse_body(model: type[Model], body: Any) -> Model:
    """`body` (parsed JSON; an empty body is ``{}``) as `model`, or a 422."""
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_request", "the body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise ApiError(422, "invalid_request", _describe(exc)) from None
