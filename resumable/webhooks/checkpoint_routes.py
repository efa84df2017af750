"""Time travel over HTTP: checkpoints, past states, forks (bearer-authenticated)."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from resumable.time_travel import TimeTravel
from resumable.webhooks.bodies import json_body
from resumable.webhooks.errors import ApiError
from resumable.webhooks.params import (
    body_session_id,
    body_state_patch,
    path_session_id,
    query_int,
)
from resumable.webhooks.state import WebState, web_state


def _history(state: WebState) -> TimeTravel:
    return TimeTravel(state.db, state.client.registry)


async def list_checkpoints(request: Request) -> Response:
    """A session's checkpoints, oldest first.
    ---
    summary: List a session's checkpoints
    parameters:
      - {name: after, in: query, schema: {type: integer}}
      - {name: limit, in: query, schema: {type: integer, minimum: 1, maximum: 1000}}
    responses: {200: {description: "{checkpoints, next_after}"}, 404: {description: Unknown}}
    """
    state = web_state(request)
    state.auth.actor(request)
    session_id = path_session_id(request)
    after = query_int(request, "after", 0, 0, 2**31)
    limit = query_int(request, "limit", 100, 1, 1000)
    rows = await run_in_threadpool(
        _history(state).checkpoints, session_id, after=after, limit=limit
    )
    items = [
        {
            "seq": r["seq"],
            "step": r["step"],
            "next_step": r["next_step"],
            "kind": r["kind"],
            "bytes": r["bytes"],
            "at": r["created_at"].isoformat(),
        }
        for r in rows
    ]
    next_after = items[-1]["seq"] if len(items) == limit else None
    return JSONResponse({"checkpoints": items, "next_after": next_after})


async def get_checkpoint(request: Request) -> Response:
    """The state right after a step.
    ---
    summary: Get a session's state at a checkpoint
    responses:
      200: {description: "{seq, step, next_step, state}"}
      404: {description: Unknown session or checkpoint}
    """
    state = web_state(request)
    state.auth.actor(request)
    session_id = path_session_id(request)
    try:
        seq = int(request.path_params["seq"])
    except ValueError:
        raise ApiError(404, "checkpoint_not_found", "checkpoint must be a number") from None
    past = await run_in_threadpool(_history(state).state_at, session_id, seq)
    return JSONResponse(
        {"seq": past.seq, "step": past.step, "next_step": past.next_step, "state": past.state}
    )


async def fork_session(request: Request) -> Response:
    """Start a new session from a past checkpoint of this one.
    ---
    summary: Fork a session from a checkpoint
    requestBody:
      required: true
      content:
        application/json:
          schema:
            type: object
            required: [at]
            properties:
              at: {type: integer}
              state_patch: {type: array, description: RFC 6902 JSON Patch}
              session_id: {type: string, format: uuid}
    responses:
      201: {description: "The fork: {session_id, forked_from, at}"}
      404: {description: Unknown session or checkpoint}
      409: {description: The checkpoint finished the session}
      422: {description: Invalid request or patch}
    """
    state = web_state(request)
    actor = state.auth.actor(request)
    session_id = path_session_id(request)
    body = await json_body(request, empty={})
    if not isinstance(body, dict) or set(body) - {"at", "state_patch", "session_id"}:
        raise ApiError(422, "invalid_request", 'body must be {"at", "state_patch"?, "session_id"?}')
    at = body.get("at")
    if not isinstance(at, int) or isinstance(at, bool) or at < 1:
        raise ApiError(422, "invalid_request", "'at' must be a checkpoint number (>= 1)")
    patch = body_state_patch(body)
    new_id = body_session_id(body)

    def fork() -> Any:
        return _history(state).fork(
            session_id,
            at,
            actor=actor,
            state_patch=patch,
            new_id=new_id,
            broker=state.broker,
            settings=state.settings,
        )

    fork_id = await run_in_threadpool(fork)
    return JSONResponse(
        {"session_id": str(fork_id), "forked_from": str(session_id), "at": at}, status_code=201
    )


routes = [
    Route("/v1/sessions/{session_id}/checkpoints", list_checkpoints, methods=["GET"]),
    Route("/v1/sessions/{session_id}/checkpoints/{seq}", get_checkpoint, methods=["GET"]),
    Route("/v1/sessions/{session_id}/fork", fork_session, methods=["POST"]),
]
