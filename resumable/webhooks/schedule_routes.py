"""Schedules over HTTP (bearer-authenticated): list, create, read, pause,
resume, trigger and delete (``resumable/schedules.py``)."""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from resumable.schedules import Schedule
from resumable.schemas import Page, ScheduleInfo
from resumable.services.schedules import Schedules
from resumable.webhooks.auth import request_actor
from resumable.webhooks.bodies import json_body
from resumable.webhooks.callback_routes import idempotency_key
from resumable.webhooks.database_calls import database_call
from resumable.webhooks.errors import ApiError
from resumable.webhooks.operations import (
    ACTOR,
    IDEMPOTENCY_KEY,
    Answer,
    ApiRoute,
    Operation,
    json_answer,
)
from resumable.webhooks.params import SCHEDULE_NAME
from resumable.webhooks.request_models import (
    CreateSchedule,
    ListSchedules,
    PauseSchedule,
    parse_body,
    parse_query,
)
from resumable.webhooks.response_models import TriggeredSchedule
from resumable.webhooks.state import WebState, web_state

TAG = "schedules"
_NOT_FOUND = Answer(404, "No such schedule.", codes=("schedule_not_found",))


def _schedules(state: WebState) -> Schedules:
    return Schedules(state.settings, state.db, state.broker)


LIST = Operation(
    "GET",
    "/v1/schedules",
    "listSchedules",
    "List schedules by name",
    TAG,
    query=ListSchedules,
    answers=(Answer(200, "A page of schedules.", Page[ScheduleInfo]),),
)


async def list_schedules(request: Request) -> Response:
    state = web_state(request)
    query = parse_query(ListSchedules, request.query_params)

    def page() -> Page[ScheduleInfo]:
        rows = _schedules(state).page(
            limit=query.limit + 1, agent=query.agent, after=query.cursor or ""
        )
        items = [ScheduleInfo.from_row(row) for row in rows[: query.limit]]
        more = len(rows) > query.limit
        return Page[ScheduleInfo](items=items, next_cursor=items[-1].name if more else None)

    return json_answer(await database_call(page))


CREATE = Operation(
    "POST",
    "/v1/schedules",
    "createSchedule",
    "Create a schedule that starts sessions of an agent",
    TAG,
    description="A cron expression (in a time zone) or an interval. The same definition "
    "under its name again answers the existing schedule (200).",
    headers=(ACTOR,),
    body=CreateSchedule,
    body_required=True,
    answers=(
        Answer(201, "Created.", ScheduleInfo),
        Answer(200, "It existed already, with this definition.", ScheduleInfo),
        Answer(409, "The name is taken by another definition.", codes=("schedule_exists",)),
        Answer(
            422,
            "A bad cron expression, interval, time zone or input, or an agent no worker "
            "has announced.",
            codes=("invalid_schedule", "unknown_agent"),
        ),
    ),
)


async def create_schedule(request: Request) -> Response:
    state = web_state(request)
    actor = request_actor(request)
    body = parse_body(CreateSchedule, await json_body(request))
    schedule = Schedule(  # ScheduleDefinitionError: a 422
        name=body.name,
        agent=body.agent,
        cron=body.cron,
        every=body.every_seconds,
        timezone=body.timezone,
        input=body.input,
        catch_up=body.catch_up,
        overlap=body.overlap,
    )

    row, created = await database_call(
        _schedules(state).create, schedule, actor=actor, paused=body.paused
    )
    return json_answer(ScheduleInfo.from_row(row), 201 if created else 200)


GET = Operation(
    "GET",
    "/v1/schedules/{name}",
    "getSchedule",
    "Get a schedule",
    TAG,
    path_params=(SCHEDULE_NAME,),
    answers=(Answer(200, "The schedule.", ScheduleInfo), _NOT_FOUND),
)


async def get_schedule(request: Request) -> Response:
    state = web_state(request)
    return json_answer(await database_call(state.client.schedule, SCHEDULE_NAME(request)))


DELETE = Operation(
    "DELETE",
    "/v1/schedules/{name}",
    "deleteSchedule",
    "Delete a schedule",
    TAG,
    description="The sessions it started go on. A schedule defined in code comes back when "
    "a worker that loads its agent starts.",
    path_params=(SCHEDULE_NAME,),
    headers=(ACTOR,),
    answers=(Answer(204, "Deleted."), _NOT_FOUND),
)


async def delete_schedule(request: Request) -> Response:
    state = web_state(request)
    actor = request_actor(request)
    await database_call(state.client.delete_schedule, SCHEDULE_NAME(request), actor=actor)
    return Response(status_code=204)


PAUSE = Operation(
    "POST",
    "/v1/schedules/{name}/pause",
    "pauseSchedule",
    "Pause a schedule",
    TAG,
    description="It starts nothing until resumed.",
    path_params=(SCHEDULE_NAME,),
    headers=(ACTOR,),
    body=PauseSchedule,
    answers=(Answer(200, "The schedule, paused.", ScheduleInfo), _NOT_FOUND),
)


async def pause_schedule(request: Request) -> Response:
    state = web_state(request)
    actor = request_actor(request)
    body = parse_body(PauseSchedule, await json_body(request, empty={}))
    name = SCHEDULE_NAME(request)
    return json_answer(
        await database_call(state.client.pause_schedule, name, reason=body.reason, actor=actor)
    )


RESUME = Operation(
    "POST",
    "/v1/schedules/{name}/resume",
    "resumeSchedule",
    "Resume a paused schedule",
    TAG,
    description="From now on: the due times of the pause start nothing.",
    path_params=(SCHEDULE_NAME,),
    headers=(ACTOR,),
    answers=(Answer(200, "The schedule, running.", ScheduleInfo), _NOT_FOUND),
)


async def resume_schedule(request: Request) -> Response:
    state = web_state(request)
    actor = request_actor(request)
    await _no_body(request)
    name = SCHEDULE_NAME(request)
    return json_answer(await database_call(state.client.resume_schedule, name, actor=actor))


TRIGGER = Operation(
    "POST",
    "/v1/schedules/{name}/trigger",
    "triggerSchedule",
    "Start a session of a schedule now",
    TAG,
    description="Whatever its overlap policy, paused or not; its due times stay as they were. "
    "The same `Idempotency-Key` again answers the session it started (a retry starts none).",
    path_params=(SCHEDULE_NAME,),
    headers=(ACTOR, IDEMPOTENCY_KEY),
    answers=(
        Answer(
            201,
            "The session it started (or started before, for a repeated key).",
            TriggeredSchedule,
        ),
        Answer(
            400,
            "An `Idempotency-Key` that is empty or over 256 bytes.",
            codes=("invalid_idempotency_key",),
        ),
        _NOT_FOUND,
    ),
)


async def trigger_schedule(request: Request) -> Response:
    state = web_state(request)
    actor = request_actor(request)
    key = idempotency_key(request, "idempotency-key")
    await _no_body(request)
    name = SCHEDULE_NAME(request)
    session_id: uuid.UUID = await database_call(
        state.client.trigger_schedule, name, actor=actor, idempotency_key=key
    )
    return json_answer(TriggeredSchedule(schedule=name, session_id=session_id), 201)


async def _no_body(request: Request) -> Any:
    """An action that takes no body takes an empty one, or `{}`."""
    body = await json_body(request, empty={})
    if body != {}:
        raise ApiError(422, "invalid_request", "this action takes no body (or `{}`)")
    return body


routes = [
    ApiRoute(LIST, list_schedules),
    ApiRoute(CREATE, create_schedule),
    ApiRoute(GET, get_schedule),
    ApiRoute(DELETE, delete_schedule),
    ApiRoute(PAUSE, pause_schedule),
    ApiRoute(RESUME, resume_schedule),
    ApiRoute(TRIGGER, trigger_schedule),
]
