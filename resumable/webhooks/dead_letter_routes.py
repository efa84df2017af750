"""The dead-letter queue over HTTP (bearer-authenticated)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from resumable.dead_letters import DeadLetterFilter, DeadLetters
from resumable.webhooks.auth import request_actor
from resumable.webhooks.bodies import json_body
from resumable.webhooks.errors import ApiError
from resumable.webhooks.params import bounded_int
from resumable.webhooks.request_models import (
    DiscardDeadLetter,
    DrainDeadLetters,
    RetryDeadLetter,
    parse_body,
)
from resumable.webhooks.state import WebState, web_state

_STATUSES = {"open", "retried", "discarded", "all"}


def _letters(state: WebState) -> DeadLetters:
    return DeadLetters(state.settings, state.db, state.broker)


def _time(value: Any, name: str) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        if len(str(value)) > 64:
            raise ValueError(value)
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
            additionalProperties: false
            properties:
              reason: {type: string, maxLength: 2000}
              state_patch: {type: array, description: RFC 6902 JSON Patch for the state}
    responses:
      200: {description: Retrying}
      404: {description: Unknown id}
      409: {description: Not open, or its compensations ran}
      422: {description: Invalid patch}
    """
    state = web_state(request)
    actor = request_actor(request)
    dead_letter_id = _dead_letter_id(request)
    body = parse_body(RetryDeadLetter, await json_body(request, empty={}))
    session_id = await run_in_threadpool(
        lambda: _letters(state).retry(
            dead_letter_id, actor=actor, reason=body.reason, state_patch=body.state_patch
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
          schema:
            type: object
            required: [reason]
            additionalProperties: false
            properties: {reason: {type: string, minLength: 1, maxLength: 2000}}
    responses:
      200: {description: Discarded}
      404: {description: Unknown id}
      409: {description: Not open}
      422: {description: No reason}
    """
    state = web_state(request)
    actor = request_actor(request)
    dead_letter_id = _dead_letter_id(request)
    body = parse_body(DiscardDeadLetter, await json_body(request, empty={}))
    await run_in_threadpool(
        lambda: _letters(state).discard(dead_letter_id, actor=actor, reason=body.reason)
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
            additionalProperties: false
            properties:
              action: {type: string, enum: [retry, discard]}
              dry_run: {type: boolean}
              limit: {type: integer, minimum: 1, maximum: 100000}
              rate: {type: number, minimum: 0.01, description: max actions per second}
              reason: {type: string}
              agent: {type: string}
              error_type: {type: string}
              step: {type: string}
              since: {type: string, format: date-time}
              until: {type: string, format: date-time}
    responses:
      200: {description: "{action, dry_run, matched, done, failed}"}
      422: {description: "Invalid request (checked before anything is drained)"}
    """
    state = web_state(request)
    actor = request_actor(request)
    body = parse_body(DrainDeadLetters, await json_body(request, empty={}))
    where = _filter(body.model_dump())
    if body.action == "discard" and not (body.reason and body.reason.strip()):
        raise ApiError(422, "invalid_request", "discarding needs a non-empty 'reason'")
    report = await run_in_threadpool(
        lambda: _letters(state).drain(
            body.action,
            where,
            actor=actor,
            reason=body.reason,
            dry_run=body.dry_run,
            limit=body.limit,
            rate=body.rate,
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
