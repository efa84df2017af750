"""The dead-letter queue over HTTP (bearer-authenticated)."""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from resumable.models import event_queries
from resumable.models.database import Database
from resumable.schemas import DeadLetter, Event, Page
from resumable.services.dead_letters import DeadLetterFilter, DeadLetters
from resumable.webhooks import response_models
from resumable.webhooks.auth import request_actor
from resumable.webhooks.bodies import json_body
from resumable.webhooks.database_calls import DATABASE_DEADLINE_SECONDS, database_call
from resumable.webhooks.errors import ApiError
from resumable.webhooks.operations import ACTOR, Answer, ApiRoute, Operation, json_answer
from resumable.webhooks.params import DEAD_LETTER_ID, number_cursor
from resumable.webhooks.request_models import (
    MAX_ID,
    MAX_PACED_DRAIN_SECONDS,
    DiscardDeadLetter,
    DrainDeadLetters,
    ListDeadLetters,
    RetryDeadLetter,
    parse_body,
    parse_query,
    patch_as_json,
)
from resumable.webhooks.state import WebState, web_state

TAG = "dead letters"
# How much of the session's audit log a dead letter's detail shows.
RECENT_EVENTS = 20
_NOT_FOUND = Answer(404, "No such dead letter.", codes=("dead_letter_not_found",))
_NOT_OPEN = Answer(409, "It is no longer open.", codes=("invalid_dead_letter_state",))


def _letters(state: WebState) -> DeadLetters:
    return DeadLetters(state.settings, state.db, state.broker)


def _recent_events(db: Database, session_id: uuid.UUID) -> list[Event]:
    with db.connection() as conn:
        rows = event_queries.latest_events(conn, session_id, limit=RECENT_EVENTS)
    return [Event.from_row(row) for row in rows]


LIST = Operation(
    "GET",
    "/v1/dead-letters",
    "listDeadLetters",
    "List dead letters, newest first",
    TAG,
    description="Without their tracebacks (read one dead letter for it).",
    query=ListDeadLetters,
    answers=(
        Answer(200, "A page of dead letters.", Page[DeadLetter]),
        Answer(400, "`cursor` is not one this API handed out.", codes=("invalid_cursor",)),
    ),
)


async def list_dead_letters(request: Request) -> Response:
    state = web_state(request)
    query = parse_query(ListDeadLetters, request.query_params)
    where = DeadLetterFilter(
        status=None if query.status == "all" else query.status,
        agent=query.agent,
        error_type=query.error_type,
        step=query.step,
        since=query.since,
        until=query.until,
        compensation=query.compensation,
    )
    before = number_cursor(query.cursor, MAX_ID) or None
    rows, next_before = await database_call(
        _letters(state).find, where, limit=query.limit, before_id=before
    )
    items = [DeadLetter.from_row(row, include_traceback=False) for row in rows]
    next_cursor = None if next_before is None else str(next_before)
    return json_answer(Page[DeadLetter](items=items, next_cursor=next_cursor))


SHOW = Operation(
    "GET",
    "/v1/dead-letters/{dead_letter_id}",
    "getDeadLetter",
    "Show a dead letter with its traceback, its session and its last events",
    TAG,
    path_params=(DEAD_LETTER_ID,),
    answers=(Answer(200, "The dead letter.", response_models.DeadLetterDetail), _NOT_FOUND),
)


async def show_dead_letter(request: Request) -> Response:
    state = web_state(request)
    dead_letter_id = DEAD_LETTER_ID(request)

    def show() -> response_models.DeadLetterDetail:
        letter = _letters(state).get(dead_letter_id)
        return response_models.DeadLetterDetail(
            dead_letter=DeadLetter.from_row(letter),
            session=state.client.get(letter.session_id),
            events=_recent_events(state.db, letter.session_id),
        )

    return json_answer(await database_call(show))


RETRY = Operation(
    "POST",
    "/v1/dead-letters/{dead_letter_id}/retry",
    "retryDeadLetter",
    "Retry a dead letter from the session's latest checkpoint",
    TAG,
    description="Attempts start again; an optional RFC 6902 patch fixes the state first.",
    path_params=(DEAD_LETTER_ID,),
    headers=(ACTOR,),
    body=RetryDeadLetter,
    answers=(
        Answer(200, "Retrying: the dead letter, now `retried`.", DeadLetter),
        _NOT_FOUND,
        Answer(
            409,
            "It is no longer open, or its compensations ran (start a new session instead).",
            codes=("invalid_dead_letter_state",),
        ),
        Answer(422, "The state patch does not apply.", codes=("invalid_state_patch",)),
    ),
)


async def retry_dead_letter(request: Request) -> Response:
    state = web_state(request)
    actor = request_actor(request)
    dead_letter_id = DEAD_LETTER_ID(request)
    body = parse_body(RetryDeadLetter, await json_body(request, empty={}))

    def retry() -> Any:
        letters = _letters(state)
        letters.retry(
            dead_letter_id,
            actor=actor,
            reason=body.reason,
            state_patch=patch_as_json(body.state_patch),
        )
        return letters.get(dead_letter_id)

    return json_answer(DeadLetter.from_row(await database_call(retry)))


DISCARD = Operation(
    "POST",
    "/v1/dead-letters/{dead_letter_id}/discard",
    "discardDeadLetter",
    "Discard a dead letter (a reason is required)",
    TAG,
    path_params=(DEAD_LETTER_ID,),
    headers=(ACTOR,),
    body=DiscardDeadLetter,
    body_required=True,
    answers=(Answer(200, "The dead letter, now `discarded`.", DeadLetter), _NOT_FOUND, _NOT_OPEN),
)


async def discard_dead_letter(request: Request) -> Response:
    state = web_state(request)
    actor = request_actor(request)
    dead_letter_id = DEAD_LETTER_ID(request)
    body = parse_body(DiscardDeadLetter, await json_body(request, empty={}))

    def discard() -> Any:
        letters = _letters(state)
        letters.discard(dead_letter_id, actor=actor, reason=body.reason)
        return letters.get(dead_letter_id)

    return json_answer(DeadLetter.from_row(await database_call(discard)))


DRAIN = Operation(
    "POST",
    "/v1/dead-letters/drain",
    "drainDeadLetters",
    "Retry or discard every open dead letter that matches",
    TAG,
    description="At most `limit`, at most `rate` per second, newest first; the whole "
    "request is validated before anything is drained.",
    headers=(ACTOR,),
    body=DrainDeadLetters,
    body_required=True,
    answers=(
        Answer(200, "What was matched, done and not done.", response_models.DrainReport),
        Answer(
            422,
            f"A paced drain (`limit / rate`) that would take over {MAX_PACED_DRAIN_SECONDS:g} s"
            " (its dry run too: it previews the real run).",
            codes=("drain_too_slow",),
        ),
    ),
)


async def drain_dead_letters(request: Request) -> Response:
    state = web_state(request)
    actor = request_actor(request)
    body = parse_body(DrainDeadLetters, await json_body(request, empty={}))
    # A dry run is refused as its real run would be: it is that run's preview.
    if body.rate and body.limit / body.rate > MAX_PACED_DRAIN_SECONDS:
        raise ApiError(
            422,
            "drain_too_slow",
            f"limit / rate is {body.limit / body.rate:g} s, over the"
            f" {MAX_PACED_DRAIN_SECONDS:g} s one request may take: lower limit, raise rate,"
            " or drain with `resumable dlq drain`",
        )
    where = DeadLetterFilter(
        agent=body.agent,
        error_type=body.error_type,
        step=body.step,
        since=body.since,
        until=body.until,
        compensation=body.compensation,
    )
    report = await database_call(
        lambda: _letters(state).drain(
            body.action,
            where,
            actor=actor,
            reason=body.reason,
            dry_run=body.dry_run,
            limit=body.limit,
            rate=body.rate,
        ),
        # A paced drain takes up to that long by design.
        deadline=MAX_PACED_DRAIN_SECONDS + DATABASE_DEADLINE_SECONDS,
    )
    return json_answer(response_models.DrainReport.model_validate(report.as_json()))


routes = [
    ApiRoute(LIST, list_dead_letters),
    ApiRoute(DRAIN, drain_dead_letters),
    ApiRoute(SHOW, show_dead_letter),
    ApiRoute(RETRY, retry_dead_letter),
    ApiRoute(DISCARD, discard_dead_letter),
]
