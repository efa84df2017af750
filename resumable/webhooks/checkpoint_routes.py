"""Time travel over HTTP: checkpoints, past states, forks (bearer-authenticated)."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from resumable.time_travel import TimeTravel
from resumable.webhooks.auth import request_actor
from resumable.webhooks.bodies import json_body
from resumable.webhooks.errors import ApiError
from resumable.webhooks.params import path_session_id, query_int
from resumable.webhooks.request_models import MAX_SEQ, ForkSession, parse_body
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
    session_id = path_session_id(request)
    after = query_int(request, "after", 0, 0, MAX_SEQ)
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
    session_id = path_session_id(request)
    raw = request.path_params["seq"]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 10 and 1 <= int(raw) <= MAX_SEQ):
        raise ApiError(404, "checkpoint_not_found", f"no checkpoint {raw[:20]!r}")
    seq = int(raw)
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
            additionalProperties: false
            properties:
              at: {type: integer, minimum: 1, maximum: 2147483647}
              state_patch: {type: array, description: RFC 6902 JSON Patch}
              session_id: {type: string, format: uuid}
              allow_compensated:
                type: boolean
                description: Fork even if tool calls it would reuse were compensated
    responses:
      201: {description: "The fork: {session_id, forked_from, at}"}
      404: {description: Unknown session or checkpoint}
      409: {description: "Finished at that checkpoint, compensated effects, or id taken"}
      422: {description: Invalid request or patch}
    """
    state = web_state(request)
    actor = request_actor(request)
    session_id = path_session_id(request)
    body = parse_body(ForkSession, await json_body(request, empty={}))

    def fork() -> Any:
        return _history(state).fork(
            session_id,
            body.at,
            actor=actor,
            state_patch=body.state_patch,
            new_id=body.session_id,
            broker=state.broker,
            settings=state.settings,
            allow_compensated=body.allow_compensated,
        )

    fork_id = await run_in_threadpool(fork)
    return JSONResponse(
        {"session_id": str(fork_id), "forked_from": str(session_id), "at": body.at},
        status_code=201,
    )


routes = [
    Route("/v1/sessions/{session_id}/checkpoints", list_checkpoints, methods=["GET"]),
    Route("/v1/sessions/{session_id}/checkpoints/{seq}", get_checkpoint, methods=["GET"]),
    Route("/v1/sessions/{session_id}/fork", fork_session, methods=["POST"]),
]
