"""Concurrency keys over HTTP (bearer-authenticated): how many sessions of
each key run in its slots and how many wait for one (``resumable/limits.py``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from resumable.client import concurrency_keys
from resumable.schemas import ConcurrencyKey, Page
from resumable.webhooks.database_calls import database_call
from resumable.webhooks.operations import Answer, ApiRoute, Operation, json_answer
from resumable.webhooks.request_models import ListConcurrencyKeys, parse_query
from resumable.webhooks.state import web_state

LIST = Operation(
    "GET",
    "/v1/concurrency-keys",
    "listConcurrencyKeys",
    "List concurrency keys with sessions running or waiting",
    "sessions",
    description="The keys of agents (or steps) declared with a concurrency limit that have a "
    "session running in a slot or waiting for one, the most waiting first. One page: "
    "next_cursor is always null.",
    query=ListConcurrencyKeys,
    answers=(Answer(200, "The busiest concurrency keys.", Page[ConcurrencyKey]),),
)


async def list_concurrency_keys(request: Request) -> Response:
    state = web_state(request)
    query = parse_query(ListConcurrencyKeys, request.query_params)

    def page() -> Page[ConcurrencyKey]:
        keys = concurrency_keys(state.db, limit=query.limit)
        return Page[ConcurrencyKey](items=keys, next_cursor=None)

    return json_answer(await database_call(page))


routes = [ApiRoute(LIST, list_concurrency_keys)]
