"""The dead-letter queue over HTTP (bearer-authenticated)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from resumable.dead_letters import DeadLetterFilter, DeadLetters
from resumable.webhooks.bodies import json_body
from resumable.webhooks.errors import ApiError
from resumable.webhooks.params import body_state_patch, bounded_int
from resumable.webhooks.state import WebState, web_state

_STATUSES = {"open", "retried", "discarded", "all"}


def _letters(state: WebState) -> DeadLetters:
    return DeadLetters(state.settings, state.db, state.broker)


def _time(value: Any, name: str) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        raise ApiError(422, "invalid_request", f"{name} must be an ISO 8601 time") from None


def _filter(source: Any, *, status: str | None = "open") -> DeadLetterFilter:
    def text(name: str) -> str | None:
        value = source.get(name)
        if value is not None and not isinstance(value, str):
            raise ApiError(422, "invalid_request", f"{name} must be a string")
        return value or None

    return DeadLetterFilter(
        status=status,
        agent=text("agent"),
        error_type=text("error_type"),
        step=text("step"),
        since=_time(source.get("since"), "since"),
        until=_time(source.get("until"), "until"),
    )


def _dead_letter_id(request: Request) -> int:
    return bounded_int(request.path_params["dead_letter_id"], "id", 0, 1, 2**62)


async def list_dead_letters(request: Request) -> Response:
    """Dead letters, newest first.
    ---
    summary: List dead letters
    parameters:
      - {name: status, in: query, schema: {type: string, enum: [open, retried, discarded, all]}}
      - {name: agent, in: query, schema: {type: string}}
      - {name: error_type, in: query, schema: {type: string}}
      - {name: step, in: query, schema: {type: string}}
      - {name: since, in: query, schema: {type: string, format: date-time}}
      - {name: until, in: query, schema: {type: string, format: date-time}}
      - {name: limit, in: query, schema: {type: integer, minimum: 1, maximum: 500}}
      - {name: before, in: query, schema: {type: integer}}
    responses: {200: {description: "{dead_letters, next_before}"}}
    """
    state = web_state(request)
    state.auth.actor(request)
    params = request.query_params
    status = params.get("status", "open")
    if status not in _STATUSES:
        raise ApiError(422, "invalid_request", f"status must be one of {sorted(_STATUSES)}")
    where = _filter(params, status=None if status == "all" else status)
    limit = bounded_int(params.get("limit"), "limit", 50, 1, 500)
    before = params.get("before")
    before_id = bounded_int(before, "before", 0, 1, 2**62) if before else None
    rows, next_before = await run_in_threadpool(
        _letters(state).find, where, limit=limit, before_id=before_id
    )
    return JSONResponse(
        {
            "dead_letters": [r.model_dump(mode="json", exclude={"traceback"}) for r in rows],
            "next_before": next_before,
        }
    )


async def show_dead_letter(request: Request) -> Response:
    """One dead letter with its traceback, the session's last state and events.
    ---
    summary: Show a dead letter
    responses: {200: {description: The dead letter}, 404: {description: Unknown id}}
    """
    state = web_state(request)
    state.auth.actor(request)
    shown = await run_in_threadpool(_letters(state).show, _dead_letter_id(request))
    return JSONResponse(shown)


async def retry_dead_letter(request: Request) -> Response:
    """Retry a dead-lettered session.
    ---
    summary: Retry a dead letter from the session's latest checkpoint
    requestBody:
      content:
        application/json:
          schema:
            type: object
            properties:
              reason: {type: string}
              state_patch: {type: array, description: RFC 6902 JSON Patch for the state}
    responses:
      200: {description: Retrying}
      404: {description: Unknown id}
      409: {description: Not open, or its compensations ran}
      422: {description: Invalid patch}
    """
    state = web_state(request)
    actor = state.auth.actor(request)
    dead_letter_id = _dead_letter_id(request)
    body = await json_body(request, empty={})
    if not isinstance(body, dict) or set(body) - {"reason", "state_patch"}:
        raise ApiError(422, "invalid_request", 'body must be {"reason"?, "state_patch"?}')
    patch = body_state_patch(body)
    session_id = await run_in_threadpool(
        lambda: _letters(state).retry(
            dead_letter_id, actor=actor, reason=body.get("reason"), state_patch=patch
        )
    )
    return JSONResponse(
        {"dead_letter_id": dead_letter_id, "session_id": str(session_id), "status": "retried"}
    )


async def discard_dead_letter(request: Request) -> Response:
    """Discard a dead letter.
    ---
    summary: Discard a dead letter (a reason is required)
    requestBody:
      required: true
      content:
        application/json:
          schema: {type: object, required: [reason], properties: {reason: {type: string}}}
    responses:
      200: {description: Discarded}
      404: {description: Unknown id}
      409: {description: Not open}
      422: {description: No reason}
    """
    state = web_state(request)
    actor = state.auth.actor(request)
    dead_letter_id = _dead_letter_id(request)
    body = await json_body(request, empty={})
    reason = body.get("reason") if isinstance(body, dict) else None
    if not isinstance(reason, str) or not reason.strip():
        raise ApiError(422, "invalid_request", "a discard needs a non-empty 'reason'")
    await run_in_threadpool(
        lambda: _letters(state).discard(dead_letter_id, actor=actor, reason=reason)
    )
    return JSONResponse({"dead_letter_id": dead_letter_id, "status": "discarded"})


async def drain_dead_letters(request: Request) -> Response:
    """Retry or discard every open dead letter matching a filter.
    ---
    summary: Drain the dead-letter queue
    requestBody:
      required: true
      content:
        application/json:
          schema:
            type: object
            required: [action]
            properties:
              action: {type: string, enum: [retry, discard]}
              dry_run: {type: boolean}
              limit: {type: integer, minimum: 1, maximum: 1000}
              rate: {type: number, description: max actions per second}
              reason: {type: string}
              agent: {type: string}
              error_type: {type: string}
              step: {type: string}
              since: {type: string, format: date-time}
              until: {type: string, format: date-time}
    responses: {200: {description: "{action, dry_run, matched, done, failed}"}}
    """
    state = web_state(request)
    actor = state.auth.actor(request)
    body = await json_body(request, empty={})
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_request", "body must be a JSON object")
    action = body.get("action")
    if action not in ("retry", "discard"):
        raise ApiError(422, "invalid_request", "action must be 'retry' or 'discard'")
    rate = body.get("rate")
    if rate is not None and (not isinstance(rate, int | float) or rate <= 0):
        raise ApiError(422, "invalid_request", "rate must be a positive number")
    limit = bounded_int(body.get("limit"), "limit", 100, 1, 1000)
    report = await run_in_threadpool(
        lambda: _letters(state).drain(
            action,
            _filter(body),
            actor=actor,
            reason=body.get("reason"),
            dry_run=bool(body.get("dry_run", False)),
            limit=limit,
            rate=float(rate) if rate else None,
        )
    )
    return JSONResponse(report.as_json())


routes = [
    Route("/v1/dead-letters", list_dead_letters, methods=["GET"]),
    Route("/v1/dead-letters/drain", drain_dead_letters, methods=["POST"]),
    Route("/v1/dead-letters/{dead_letter_id}", show_dead_letter, methods=["GET"]),
    Route("/v1/dead-letters/{dead_letter_id}/retry", retry_dead_letter, methods=["POST"]),
    Route("/v1/dead-letters/{dead_letter_id}/discard", discard_dead_letter, methods=["POST"]),
]
