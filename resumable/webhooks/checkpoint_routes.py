"""Time travel over HTTP: checkpoints, past states, forks (bearer-authenticated)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from resumable.schemas import Checkpoint, CheckpointState, Page, Session
from resumable.services.time_travel import TimeTravel
from resumable.webhooks.auth import request_actor
from resumable.webhooks.bodies import json_body
from resumable.webhooks.database_calls import database_call
from resumable.webhooks.operations import ACTOR, Answer, ApiRoute, Operation, json_answer
from resumable.webhooks.params import SEQ, SESSION_ID, number_cursor
from resumable.webhooks.request_models import (
    MAX_SEQ,
    ForkSession,
    ListCheckpoints,
    parse_body,
    parse_query,
    patch_as_json,
)
from resumable.webhooks.session_routes import SESSION_LINKS
from resumable.webhooks.state import WebState, web_state

TAG = "time travel"
_NO_SESSION = Answer(404, "No such session.", codes=("session_not_found",))
# An event-sourced state between snapshots is the reducer folded over events.
_NO_REDUCER = Answer(
    409,
    "The checkpoint is an event-sourced agent's, between snapshots, and this web process "
    "has not loaded the agent's reducer (set `RESUMABLE_AGENTS` to its module).",
    codes=("reducer_not_loaded",),
)


def _history(state: WebState) -> TimeTravel:
    return TimeTravel(state.db, state.client.registry)


LIST = Operation(
    "GET",
    "/v1/sessions/{session_id}/checkpoints",
    "listCheckpoints",
    "List a session's checkpoints, oldest first",
    TAG,
    description="Compacted checkpoints are gone from the list (see RESUMABLE_COMPACT_KEEP).",
    path_params=(SESSION_ID,),
    query=ListCheckpoints,
    answers=(
        Answer(200, "A page of checkpoints.", Page[Checkpoint]),
        Answer(400, "`cursor` is not one this API handed out.", codes=("invalid_cursor",)),
        _NO_SESSION,
    ),
)


async def list_checkpoints(request: Request) -> Response:
    state = web_state(request)
    session_id = SESSION_ID(request)
    query = parse_query(ListCheckpoints, request.query_params)
    after = number_cursor(query.cursor, MAX_SEQ)
    rows = await database_call(
        _history(state).checkpoints, session_id, after=after, limit=query.limit + 1
    )
    items = [Checkpoint.from_row(session_id, row) for row in rows[: query.limit]]
    next_cursor = str(items[-1].seq) if len(rows) > query.limit else None
    return json_answer(Page[Checkpoint](items=items, next_cursor=next_cursor))


GET = Operation(
    "GET",
    "/v1/sessions/{session_id}/checkpoints/{seq}",
    "getCheckpoint",
    "Get a session's state as it was after a step",
    TAG,
    description="Rebuilt from the nearest snapshot; redacted where the history is.",
    path_params=(SESSION_ID, SEQ),
    answers=(
        Answer(200, "The state after step `seq`.", CheckpointState),
        Answer(
            404,
            "No such session, or no such checkpoint (not reached, or compacted).",
            codes=("session_not_found", "checkpoint_not_found"),
        ),
        _NO_REDUCER,
    ),
)


async def get_checkpoint(request: Request) -> Response:
    state = web_state(request)
    session_id = SESSION_ID(request)
    seq = SEQ(request)
    past = await database_call(_history(state).state_at, session_id, seq)
    return json_answer(
        CheckpointState(
            session_id=session_id,
            seq=past.seq,
            step=past.step,
            next_step=past.next_step,
            state=past.state,
        )
    )


FORK = Operation(
    "POST",
    "/v1/sessions/{session_id}/fork",
    "forkSession",
    "Start a new session from a past checkpoint of this one",
    TAG,
    description="The origin is left untouched. The fork keeps the tool results recorded "
    "before the fork point; if the origin's saga compensated any of them, the fork is "
    "refused unless `allow_compensated` is true.",
    path_params=(SESSION_ID,),
    headers=(ACTOR,),
    body=ForkSession,
    body_required=True,
    answers=(
        Answer(201, "The fork, queued to run.", Session, links=SESSION_LINKS),
        Answer(
            404,
            "No such session or checkpoint.",
            codes=("session_not_found", "checkpoint_not_found"),
        ),
        Answer(
            409,
            "The origin had finished at that checkpoint, the fork would reuse compensated "
            "effects, or `session_id` is taken; or the checkpoint is an event-sourced "
            "agent's and this web process has not loaded the agent's reducer "
            "(`RESUMABLE_AGENTS`).",
            codes=("invalid_session_state", "session_exists", "reducer_not_loaded"),
        ),
        Answer(422, "The state patch does not apply.", codes=("invalid_state_patch",)),
    ),
)


async def fork_session(request: Request) -> Response:
    state = web_state(request)
    actor = request_actor(request)
    session_id = SESSION_ID(request)
    body = parse_body(ForkSession, await json_body(request, empty={}))

    def fork() -> Any:
        # The client's fork reads the new session before it enqueues it: the
        # answer is the fork as created, not as a fast worker advanced it.
        return state.client.fork(
            session_id,
            body.at,
            actor=actor,
            state_patch=patch_as_json(body.state_patch),
            new_session_id=body.session_id,
            allow_compensated=body.allow_compensated,
        )

    return json_answer(await database_call(fork), 201)


routes = [
    ApiRoute(LIST, list_checkpoints),
    ApiRoute(GET, get_checkpoint),
    ApiRoute(FORK, fork_session),
]
