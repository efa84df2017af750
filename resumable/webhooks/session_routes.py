"""The sessions API and signals (bearer-authenticated)."""

from __future__ import annotations

import re
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from resumable.errors import SessionNotFoundError, UnknownAgentError
from resumable.models import agent_queries
from resumable.models.status import SessionStatus
from resumable.webhooks.auth import request_actor
from resumable.webhooks.bodies import json_body
from resumable.webhooks.callback_routes import dedupe_key, idempotency_key, receipt_response
from resumable.webhooks.errors import ApiError
from resumable.webhooks.params import path_session_id, query_int
from resumable.webhooks.request_models import CancelSession, CreateSession, parse_body
from resumable.webhooks.state import WebState, web_state
from resumable.webhooks.views import event_json, session_json

_TOPIC = re.compile(r"^[A-Za-z0-9_.:\-]{1,100}$")
# Cursors this API hands out are ~90 characters; anything much longer is not one.
_MAX_CURSOR_LENGTH = 200


def _known_agent(state: WebState, agent: str) -> None:
    registry = state.client.registry
    if registry is not None:
        registry.get(agent)
        return
    with state.db.connection() as conn:
        known = conn.execute(agent_queries.AGENT_KNOWN, (agent,)).fetchone()
    if known is None:
        raise UnknownAgentError(f"unknown agent {agent!r}: no worker has registered it")


async def create_session(request: Request) -> Response:
    """Start a session.
    ---
    summary: Start a session of an agent
    description: An Idempotency-Key header makes a retried request return the same session.
    requestBody:
      required: true
      content:
        application/json:
          schema:
            type: object
            required: [agent]
            properties:
              agent: {type: string}
              input: {}
              session_id: {type: string, format: uuid}
    responses:
      201: {description: Created (or replayed, with header Idempotent-Replayed true)}
      400: {description: Malformed JSON, or an Idempotency-Key over 256 characters}
      409: {description: Idempotency key reused for a different request, or id taken}
      422: {description: Unknown agent or invalid input}
    """
    state = web_state(request)
    key = idempotency_key(request, "idempotency-key")
    body = parse_body(CreateSession, await json_body(request))

    def start() -> Any:
        _known_agent(state, body.agent)
        started = state.client.start_session(
            body.agent, body.input, idempotency_key=key, session_id=body.session_id
        )
        return started, state.client.get(started.session_id)

    started, row = await run_in_threadpool(start)
    headers = {} if started.created else {"Idempotent-Replayed": "true"}
    return JSONResponse(session_json(row), status_code=201, headers=headers)


async def get_session(request: Request) -> Response:
    """One session.
    ---
    summary: Get a session
    responses: {200: {description: The session}, 404: {description: Unknown session}}
    """
    state = web_state(request)
    row = await run_in_threadpool(state.client.get, path_session_id(request))
    return JSONResponse(session_json(row))


async def list_sessions(request: Request) -> Response:
    """Sessions, newest first.
    ---
    summary: List sessions
    parameters:
      - {name: status, in: query, schema: {type: string}}
      - {name: agent, in: query, schema: {type: string}}
      - {name: limit, in: query, schema: {type: integer, minimum: 1, maximum: 200}}
      - {name: cursor, in: query, schema: {type: string}}
    responses: {200: {description: "A page: {sessions, next_cursor}"}}
    """
    state = web_state(request)
    status = request.query_params.get("status")
    if status is not None and status not in {s.value for s in SessionStatus}:
        raise ApiError(422, "invalid_request", f"unknown status {status[:40]!r}")
    limit = query_int(request, "limit", 50, 1, 200)
    cursor = request.query_params.get("cursor")
    if cursor is not None and len(cursor) > _MAX_CURSOR_LENGTH:
        raise ApiError(400, "invalid_cursor", "not a cursor this API handed out (too long)")
    rows, next_cursor = await run_in_threadpool(
        lambda: state.client.page_sessions(
            status=status,
            agent=request.query_params.get("agent"),
            limit=limit,
            cursor=cursor,
        )
    )
    return JSONResponse(
        {
            "sessions": [session_json(r, include_state=False) for r in rows],
            "next_cursor": next_cursor,
        }
    )


async def session_events(request: Request) -> Response:
    """A session's audit log.
    ---
    summary: List a session's audit events in order
    parameters:
      - {name: after, in: query, schema: {type: integer}}
      - {name: limit, in: query, schema: {type: integer, minimum: 1, maximum: 1000}}
    responses: {200: {description: "{events, next_after}"}, 404: {description: Unknown session}}
    """
    state = web_state(request)
    session_id = path_session_id(request)
    after = query_int(request, "after", 0, 0, 2**62)
    limit = query_int(request, "limit", 200, 1, 1000)

    def read() -> Any:
        state.client.get(session_id)
        return state.client.events(session_id, after=after, limit=limit)

    events = await run_in_threadpool(read)
    next_after = events[-1].id if len(events) == limit else None
    return JSONResponse({"events": [event_json(e) for e in events], "next_after": next_after})


async def cancel_session(request: Request) -> Response:
    """Cancel a session.
    ---
    summary: Cancel a session that has not finished
    requestBody:
      content:
        application/json:
          schema:
            type: object
            additionalProperties: false
            properties: {reason: {type: string, maxLength: 2000}}
    responses:
      200: {description: Cancelled}
      404: {description: Unknown session}
      409: {description: Already finished}
      422: {description: "Not {reason?}: unknown field, or reason not a string"}
    """
    state = web_state(request)
    actor = request_actor(request)
    session_id = path_session_id(request)
    body = parse_body(CancelSession, await json_body(request, empty={}))
    await run_in_threadpool(
        lambda: state.client.cancel(session_id, actor=actor, reason=body.reason)
    )
    return JSONResponse({"session_id": str(session_id), "status": "cancelled"})


async def post_signal(request: Request) -> Response:
    """Send a named signal (an approval, an internal event) to a session.
    ---
    summary: Signal a session
    description: >
      Kept until the session waits for this topic; Idempotency-Key dedupes.
      The JSON body is the signal's value.
    parameters:
      - {name: topic, in: path, required: true, schema: {type: string}}
    requestBody:
      content: {application/json: {schema: {}}}
    responses:
      202: {description: Accepted and stored}
      200: {description: Duplicate}
      400: {description: Malformed JSON, or an Idempotency-Key over 256 characters}
      404: {description: Unknown session}
      409: {description: "Session finished, or Idempotency-Key reused with another body"}
    """
    state = web_state(request)
    actor = request_actor(request)
    session_id = path_session_id(request)
    topic = request.path_params["topic"]
    if not _TOPIC.match(topic):
        raise ApiError(422, "invalid_request", "topic must be 1-100 of [A-Za-z0-9_.:-]")
    key = dedupe_key(request)
    payload = await json_body(request)
    receipt = await run_in_threadpool(state.inbox.signal, session_id, topic, payload, key, actor)
    state.metrics.deliveries.labels("signal", receipt.verdict.value).inc()
    if receipt.verdict.value == "unknown":
        raise SessionNotFoundError(f"no session {session_id}")
    return receipt_response(receipt)


routes = [
    Route("/v1/sessions", create_session, methods=["POST"]),
    Route("/v1/sessions", list_sessions, methods=["GET"]),
    Route("/v1/sessions/{session_id}", get_session, methods=["GET"]),
    Route("/v1/sessions/{session_id}/events", session_events, methods=["GET"]),
    Route("/v1/sessions/{session_id}/cancel", cancel_session, methods=["POST"]),
    Route("/v1/sessions/{session_id}/signals/{topic}", post_signal, methods=["POST"]),
]
