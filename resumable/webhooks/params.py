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
        number = int(value)
    except (TypeError, ValueError):
        raise ApiError(422, "invalid_request", f"{name} must be an integer") from None
    if not low <= number <= high:
        raise ApiError(422, "invalid_request", f"{name} must be between {low} and {high}")
    return number


def query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    return bounded_int(request.query_params.get(name), name, default, low, high)


def path_session_id(request: Request) -> uuid.UUID:
    raw = request.path_params["session_id"]
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise ApiError(404, "session_not_found", f"no session {raw[:80]!r}") from None


def body_session_id(body: dict[str, Any]) -> uuid.UUID | None:
    """An optional client-chosen session id from a JSON body."""
    if body.get("session_id") is None:
        return None
    try:
        return uuid.UUID(str(body["session_id"]))
    except ValueError:
        raise ApiError(422, "invalid_request", "'session_id' must be a UUID") from None


def body_state_patch(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """An optional RFC 6902 patch from a JSON body (applied, and so fully
    validated, by ``resumable.state_patch``)."""
    patch = body.get("state_patch")
    if patch is not None and not isinstance(patch, list):
        raise ApiError(422, "invalid_request", "state_patch must be a JSON Patch array")
    return patch
