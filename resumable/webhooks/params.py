"""Path parameters: how each is read and how ``/openapi.json`` describes it.

A path that does not name a resource answers 404, whatever is wrong with it
(not a UUID, not a number, out of range): the path is the resource's name.
Only a topic, which names no resource, is validated like a field (422).
Each pattern must match the whole text (``fullmatch``): ``$`` alone also
matches before a trailing newline, and ``1\n`` is no checkpoint.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request

from resumable.errors import InvalidCursorError
from resumable.webhooks.errors import ApiError
from resumable.webhooks.request_models import MAX_ID, MAX_SEQ, SCHEDULE_NAME_PATTERN

Value = TypeVar("Value")

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_DIGITS = re.compile(r"^[0-9]{1,19}$")
TOPIC_PATTERN = r"^[A-Za-z0-9_.:\-]{1,100}$"
# Callback tokens are 75 characters (a session id in hex, then `secrets.token_urlsafe(32)`;
# 43 for tokens made before it was prefixed): longer is never one.
TOKEN_PATTERN = r"^[A-Za-z0-9_\-]{1,128}$"


class _Digits(Convertor[str]):
    """Matches an id's digits only, so that ``/v1/dead-letters/drain`` is not also
    a dead letter named "drain" (its GET would not be a 405 otherwise). Any
    number of them: one out of range is a dead letter that is not there (404
    ``dead_letter_not_found``), not a path the API does not have."""

    regex = "[0-9]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("digits", _Digits())


@dataclass(frozen=True)
class PathParam(Generic[Value]):
    """One ``{name}`` of a route's path."""

    name: str
    description: str
    schema: dict[str, Any]
    convert: Callable[[str], Value | None]  # None: not a valid value
    status: int = 404
    code: str = "not_found"
    example: Any = None
    convertor: str | None = None  # Starlette's, in the route's path
    _what: str = field(default="")

    def __call__(self, request: Request) -> Value:
        raw = str(request.path_params[self.name])
        value = self.convert(raw)
        if value is None:
            message = f"{self._what or self.name} {raw[:80]!r} does not exist"
            if self.status != 404:
                message = f"{self.name} must match {self.schema.get('pattern')}"
            raise ApiError(self.status, self.code, message)
        return value


def _uuid(raw: str) -> uuid.UUID | None:
    return uuid.UUID(raw) if _UUID.fullmatch(raw) else None


def _integer(low: int, high: int) -> Callable[[str], int | None]:
    def convert(raw: str) -> int | None:
        if not _DIGITS.fullmatch(raw):
            return None
        number = int(raw)
        return number if low <= number <= high else None

    return convert


def _matching(pattern: str) -> Callable[[str], str | None]:
    compiled = re.compile(pattern)
    return lambda raw: raw if compiled.fullmatch(raw) else None


SESSION_ID: PathParam[uuid.UUID] = PathParam(
    "session_id",
    "The session's id.",
    {"type": "string", "format": "uuid"},
    _uuid,
    code="session_not_found",
    example="3f1c9b7e-8d2a-4c51-9a0e-6b7f2d9c1e45",
    _what="session",
)
SEQ: PathParam[int] = PathParam(
    "seq",
    "A checkpoint's number (1 is the state after the first step).",
    {"type": "integer", "minimum": 1, "maximum": MAX_SEQ},
    _integer(1, MAX_SEQ),
    code="checkpoint_not_found",
    example=1,
    _what="checkpoint",
)
DEAD_LETTER_ID: PathParam[int] = PathParam(
    "dead_letter_id",
    "The dead letter's id.",
    {"type": "integer", "minimum": 1, "maximum": MAX_ID},
    _integer(1, MAX_ID),
    code="dead_letter_not_found",
    example=7,
    convertor="digits",
    _what="dead letter",
)
TOPIC: PathParam[str] = PathParam(
    "topic",
    "The signal's topic, as the session's wait names it.",
    {"type": "string", "pattern": TOPIC_PATTERN},
    _matching(TOPIC_PATTERN),
    status=422,
    code="invalid_request",
    example="approval",
)
SCHEDULE_NAME: PathParam[str] = PathParam(
    "name",
    "The schedule's name.",
    {"type": "string", "pattern": SCHEDULE_NAME_PATTERN},
    _matching(SCHEDULE_NAME_PATTERN),
    code="schedule_not_found",
    example="weekday-summary",
    _what="schedule",
)
TOKEN: PathParam[str] = PathParam(
    "token",
    "The callback's single-use token, from the URL the step handed out.",
    {"type": "string", "pattern": TOKEN_PATTERN},
    _matching(TOKEN_PATTERN),
    code="not_found",
    _what="callback",
)


def number_cursor(cursor: str | None, high: int) -> int:
    """A list's position (the last id or seq of the previous page), 0 for the first page."""
    if cursor is None:
        return 0
    if not _DIGITS.fullmatch(cursor) or int(cursor) > high:
        raise InvalidCursorError(f"not a cursor this API handed out: {cursor[:40]!r}")
    return int(cursor)
