"""Reading request parameters, each with the same clear 4xx when it is wrong."""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request

from resumable.webhooks.errors import ApiError


def bounded_int(value: Any, name: str, default: int, low: int, high: int) -> int:
    """`value` (a query string, a JSON number or None) as an int in [low, high]."""
    if value is None:
        return default
    try:
        if isinstance(value, bool) or (isinstance(value, str) and len(value) > 20):
            raise ValueError(value)
        number = int(value)
    except (TypeError, ValueError):
        number = low - 1
    if not low <= number <= high:
        raise ApiError(422, "invalid_request", f"{name} must be an integer from {low} to {high}")
    return number


def query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    return bounded_int(request.query_params.get(name), name, default, low, high)


def path_session_id(request: Request) -> uuid.UUID:
    raw = request.path_params["session_id"]
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise ApiError(404, "session_not_found", f"no session {raw[:80]!r}") from None
