"""The sessions API and signals (bearer-authenticated)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from resumable import tracing
from resumable.errors import ConfirmationRequiredError, SessionNotFoundError, UnknownAgentError
from resumable.models import agent_queries
from resumable.models.status import SessionStatus
from resumable.schemas import AcceptPreview, Event, Page, Session
from resumable.services.blocked import BlockedSessions
from resumable.webhooks.auth import request_actor
from resumable.webhooks.bodies import json_body
from resumable.webhooks.callback_routes import (
    RECEIPT_ANSWERS,
    dedupe_key,
    idempotency_key,
    receipt_response,
)
from resumable.webhooks.database_calls import database_call
from resumable.webhooks.operations import (
    ACTOR,
    IDEMPOTENCY_KEY,
    Answer,
    ApiRoute,
    Header,
    Operation,
    json_answer,
)
from resumable.webhooks.params import SESSION_ID, TOPIC, number_cursor
from resumable.webhooks.request_models import (
    MAX_ID,
    AcceptBlockedSession,
    BlockedSessionAction,
    CancelSession,
    CreateSession,
    ListEvents,
    ListSessions,
    SetPriority,
    parse_body,
    parse_query,
)
from resumable.webhooks.response_models import (
    BlockedSessionOutcome,
    ErrorDetail,
    ErrorResponse,
    SupersededCall,
)
from resumable.webhooks.state import WebState, web_state

TAG = "sessions"
_NOT_FOUND = Answer(404, "No such session.", codes=("session_not_found",))


def _link(operation_id: str, description: str, **constants: str) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "description": description,
        "parameters": {"session_id": "$response.body#/session_id", **constants},
    }


# Where a client (or a fuzzer) can go from a session it was handed.
SESSION_LINKS = {
    "GetSession": _link("getSession", "Read the session."),
    "ListSessionEvents": _link("listSessionEvents", "Its audit log."),
    "ListCheckpoints": _link("listCheckpoints", "Its checkpoints."),
    "SignalSession": _link("signalSession", "Send it a signal.", topic="approval"),
    "CancelSession": _link("cancelSession", "Cancel it."),
}


def _known_agent(state: WebState, agent: str) -> None:
    registry = state.client.registry
    if registry is not None:
        registry.get(agent)
        return
    with state.db.connection() as conn:
        known = agent_queries.agent_known(conn, agent)
    if not known:
        raise UnknownAgentError(f"unknown agent {agent!r}: no worker has registered it")


CREATE = Operation(
    "POST",
    "/v1/sessions",
    "createSession",
    "Start a session of an agent",
    TAG,
    description="The session is committed before it is queued, so a 201 means it will run.",
    headers=(IDEMPOTENCY_KEY,),
    body=CreateSession,
    body_required=True,
    answers=(
        Answer(
            201,
            "Created; or, for a repeated `Idempotency-Key`, the session it created "
            "(with `Idempotent-Replayed: true`).",
            Session,
            headers=(Header("Idempotent-Replayed", "`true` when this answer is a replay."),),
            links=SESSION_LINKS,
        ),
        Answer(
            400,
            "An `Idempotency-Key` that is empty or over 256 bytes.",
            codes=("invalid_idempotency_key",),
        ),
        Answer(
            409,
            "The `Idempotency-Key` was used for another request, or `session_id` is taken.",
            codes=("idempotency_key_reused", "session_exists"),
        ),
        Answer(422, "No worker has registered the agent.", codes=("unknown_agent",)),
    ),
)


async def create_session(request: Request) -> Response:
    state = web_state(request)
    key = idempotency_key(request, "idempotency-key")
    body = parse_body(CreateSession, await json_body(request))

    def start() -> Any:
        _known_agent(state, body.agent)
        started = state.client.start_session(
            body.agent,
            body.input,
            idempotency_key=key,
            session_id=body.session_id,
            priority=body.priority,
        )
        return started, state.client.get(started.session_id)

    with tracing.remote_parent(request.headers):  # a caller's `traceparent`
        started, session = await database_call(start)
    headers = {} if started.created else {"Idempotent-Replayed": "true"}
    return json_answer(session, 201, headers)


GET = Operation(
    "GET",
    "/v1/sessions/{session_id}",
    "getSession",
    "Get a session",
    TAG,
    description="Its status, where it is, its state, result or error, and what it waits for.",
    path_params=(SESSION_ID,),
    answers=(Answer(200, "The session.", Session), _NOT_FOUND),
)


async def get_session(request: Request) -> Response:
    state = web_state(request)
    return json_answer(await database_call(state.client.get, SESSION_ID(request)))


LIST = Operation(
    "GET",
    "/v1/sessions",
    "listSessions",
    "List sessions, newest first",
    TAG,
    description="Without their state (read one session for it).",
    query=ListSessions,
    answers=(
        Answer(200, "A page of sessions.", Page[Session]),
        Answer(400, "`cursor` is not one this API handed out.", codes=("invalid_cursor",)),
    ),
)


async def list_sessions(request: Request) -> Response:
    state = web_state(request)
    query = parse_query(ListSessions, request.query_params)
    page = await database_call(
        lambda: state.client.page_sessions(
            status=query.status,
            agent=query.agent,
            limit=query.limit,
            cursor=query.cursor,
            parent=query.parent,
        )
    )
    return json_answer(page)


EVENTS = Operation(
    "GET",
    "/v1/sessions/{session_id}/events",
    "listSessionEvents",
    "List a session's audit events, oldest first",
    TAG,
    path_params=(SESSION_ID,),
    query=ListEvents,
    answers=(
        Answer(200, "A page of events.", Page[Event]),
        Answer(400, "`cursor` is not one this API handed out.", codes=("invalid_cursor",)),
        _NOT_FOUND,
    ),
)


async def session_events(request: Request) -> Response:
    state = web_state(request)
    session_id = SESSION_ID(request)
    query = parse_query(ListEvents, request.query_params)
    after = number_cursor(query.cursor, MAX_ID)

    def read() -> Any:
        state.client.get(session_id)
        return state.client.events(session_id, after=after, limit=query.limit + 1)

    rows = await database_call(read)
    items = rows[: query.limit]
    next_cursor = str(items[-1].event_id) if len(rows) > query.limit else None
    return json_answer(Page[Event](items=items, next_cursor=next_cursor))


CANCEL = Operation(
    "POST",
    "/v1/sessions/{session_id}/cancel",
    "cancelSession",
    "Cancel a session that has not finished",
    TAG,
    description="Fences out a worker running it (its commit is refused) and closes its "
    "callbacks; the reason and the actor go to the audit log.",
    path_params=(SESSION_ID,),
    headers=(ACTOR,),
    body=CancelSession,
    answers=(
        Answer(200, "Cancelled.", Session),
        _NOT_FOUND,
        Answer(
            409,
            "It has already finished, or is compensating (its saga is undoing what it did).",
            codes=("invalid_session_state",),
        ),
    ),
)


async def cancel_session(request: Request) -> Response:
    state = web_state(request)
    actor = request_actor(request)
    session_id = SESSION_ID(request)
    body = parse_body(CancelSession, await json_body(request, empty={}))

    def cancel() -> Any:
        return state.client.cancel(session_id, actor=actor, reason=body.reason)

    return json_answer(await database_call(cancel))


PRIORITY = Operation(
    "POST",
    "/v1/sessions/{session_id}/priority",
    "setSessionPriority",
    "Change the priority of a session that has not finished",
    TAG,
    description="Which pending session a free worker takes first: `high`, `normal` or `low`"
    " (aged, so a low one is never starved). A pending session is sent again on its new lane"
    " at once; a suspended one is woken on it. The change, the reason and the actor go to the"
    " audit log (nothing is written when it already has that priority).",
    path_params=(SESSION_ID,),
    headers=(ACTOR,),
    body=SetPriority,
    body_required=True,
    answers=(
        Answer(200, "Its priority is the one asked for.", Session),
        _NOT_FOUND,
        Answer(409, "It has already finished.", codes=("invalid_session_state",)),
    ),
)


async def set_session_priority(request: Request) -> Response:
    state = web_state(request)
    actor = request_actor(request)
    session_id = SESSION_ID(request)
    body = parse_body(SetPriority, await json_body(request))

    def change() -> Any:
        return state.client.set_priority(session_id, body.priority, actor=actor, reason=body.reason)

    return json_answer(await database_call(change))


_BLOCKED_ACTIONS = {
    "resume": (
        "resumeSession",
        "Run a blocked session again",
        "After deploying code that matches its record: it runs its step again (and is "
        "blocked again if it still diverges).",
    ),
    "accept": (
        "acceptSession",
        "Accept a blocked session's new tool calls",
        "The recorded calls of the diverged step from the divergence point on are "
        "superseded (kept and audited, no longer replayed); the step runs with the calls "
        "it now makes. Their effects stay: when a call runs again (`tool_call_diverged`), "
        "`confirm` must name every superseded call by idempotency key, as "
        "`GET /v1/sessions/{session_id}/accept` lists them, or nothing is done (409 "
        "`confirmation_required`, with that preview in the error). Only for a "
        "`tool_call_diverged` or `tool_calls_missing` block.",
    ),
    "fail": (
        "failSession",
        "Fail a blocked session",
        "Only now does its saga run; then it is dead-lettered as after a permanent error.",
    ),
}


def _blocked_operation(action: str) -> Operation:
    operation_id, summary, description = _BLOCKED_ACTIONS[action]
    accept = action == "accept"
    return Operation(
        "POST",
        f"/v1/sessions/{{session_id}}/{action}",
        operation_id,
        summary,
        TAG,
        description=description + " The reason and the actor go to the audit log.",
        path_params=(SESSION_ID,),
        headers=(ACTOR,),
        body=AcceptBlockedSession if accept else BlockedSessionAction,
        body_required=True,
        answers=(
            Answer(200, "Done.", BlockedSessionOutcome),
            _NOT_FOUND,
            Answer(
                409,
                "The session is not blocked"
                + (
                    ", or its block is not a tool-call divergence (`invalid_session_state`); "
                    "or the accept makes a call again and `confirm` does not name exactly the "
                    "recorded calls it supersedes (`confirmation_required`: `error.preview` "
                    "lists them). Nothing was changed."
                    if accept
                    else "."
                ),
                codes=("invalid_session_state", "confirmation_required")
                if accept
                else ("invalid_session_state",),
            ),
        ),
    )


def _blocked_endpoint(action: str) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        state = web_state(request)
        actor = request_actor(request)
        session_id = SESSION_ID(request)
        blocked = BlockedSessions(state.settings, state.db, state.broker)
        if action == "accept":
            body = parse_body(AcceptBlockedSession, await json_body(request))
            try:
                outcome = await database_call(
                    blocked.accept,
                    session_id,
                    actor=actor,
                    reason=body.reason,
                    confirm=body.confirm,
                )
            except ConfirmationRequiredError as exc:
                preview = exc.preview if isinstance(exc.preview, AcceptPreview) else None
                detail = ErrorDetail(code=exc.code, message=exc.message, preview=preview)
                return json_answer(ErrorResponse(error=detail), 409)
        else:
            plain = parse_body(BlockedSessionAction, await json_body(request))
            act = {"resume": blocked.resume, "fail": blocked.fail}[action]
            outcome = await database_call(act, session_id, actor=actor, reason=plain.reason)
        return json_answer(
            BlockedSessionOutcome(
                session_id=outcome.session_id,
                action=outcome.action,
                status=SessionStatus(outcome.status),
                blocked=outcome.blocked,
                superseded=[SupersededCall(**call) for call in outcome.superseded],
            )
        )

    endpoint.__name__ = f"{action}_session"
    return endpoint


PREVIEW_ACCEPT = Operation(
    "GET",
    "/v1/sessions/{session_id}/accept",
    "previewAcceptSession",
    "What accepting a blocked session's new tool calls would do",
    TAG,
    description="Changes nothing. The calls that run again, with their new arguments "
    "(and the argument that changed) and the idempotency key each will be made under; the "
    "recorded calls superseded, whose effects stay; and `confirm`, what `POST` to this "
    "path must send to accept.",
    path_params=(SESSION_ID,),
    answers=(
        Answer(200, "What the accept would do.", AcceptPreview),
        _NOT_FOUND,
        Answer(
            409,
            "The session is not blocked, or its block is not a tool-call divergence.",
            codes=("invalid_session_state",),
        ),
    ),
)


async def preview_accept(request: Request) -> Response:
    state = web_state(request)
    session_id = SESSION_ID(request)
    blocked = BlockedSessions(state.settings, state.db, state.broker)
    return json_answer(await database_call(blocked.preview_accept, session_id))


SIGNAL = Operation(
    "POST",
    "/v1/sessions/{session_id}/signals/{topic}",
    "signalSession",
    "Send a session a signal (an approval, an internal event)",
    "signals and callbacks",
    description="The JSON body (any value; empty means null) is the signal's payload. It "
    "is committed before the answer and kept until the session waits for this topic; "
    "`Idempotency-Key` dedupes.",
    path_params=(SESSION_ID, TOPIC),
    headers=(IDEMPOTENCY_KEY, ACTOR),
    body=True,
    body_description="The signal's payload.",
    answers=(
        *RECEIPT_ANSWERS,
        Answer(
            400,
            "An `Idempotency-Key` that is empty or over 256 bytes.",
            codes=("invalid_idempotency_key",),
        ),
        _NOT_FOUND,
        Answer(
            409,
            "The session has finished, or the `Idempotency-Key` was used with another body.",
            codes=("wait_closed", "idempotency_key_reused"),
        ),
        Answer(422, "`topic` is not 1-100 of `[A-Za-z0-9_.:-]`.", codes=("invalid_request",)),
    ),
)


async def post_signal(request: Request) -> Response:
    state = web_state(request)
    actor = request_actor(request)
    session_id = SESSION_ID(request)
    topic = TOPIC(request)
    key = dedupe_key(request)
    payload = await json_body(request)
    began_ns = time.time_ns()
    receipt = await database_call(state.inbox.signal, session_id, topic, payload, key, actor)
    state.metrics.deliveries.labels("signal", receipt.verdict.value).inc()
    if tracing.enabled():  # a database thread only when there is something to record
        await database_call(tracing.delivery_received, state.db, "signal", receipt, began_ns)
    if receipt.verdict.value == "unknown":
        raise SessionNotFoundError(f"no session {session_id}")
    return receipt_response(receipt)


routes = [
    ApiRoute(CREATE, create_session),
    ApiRoute(LIST, list_sessions),
    ApiRoute(GET, get_session),
    ApiRoute(EVENTS, session_events),
    ApiRoute(CANCEL, cancel_session),
    ApiRoute(PRIORITY, set_session_priority),
    ApiRoute(_blocked_operation("resume"), _blocked_endpoint("resume")),
    ApiRoute(PREVIEW_ACCEPT, preview_accept),  # the accept's preview, before it
    ApiRoute(_blocked_operation("accept"), _blocked_endpoint("accept")),
    ApiRoute(_blocked_operation("fail"), _blocked_endpoint("fail")),
    ApiRoute(SIGNAL, post_signal),
]
