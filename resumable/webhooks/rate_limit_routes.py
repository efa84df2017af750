"""Rate limits over HTTP (bearer-authenticated): when each limit's next turn
comes, what the provider refused, and the sessions waiting for a turn
(``resumable/limits.py``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from resumable.schemas import Page, RateLimitInfo
from resumable.webhooks.database_calls import database_call
from resumable.webhooks.operations import Answer, ApiRoute, Operation, json_answer
from resumable.webhooks.request_models import ListRateLimits, parse_query
from resumable.webhooks.state import web_state

LIST = Operation(
    "GET",
    "/v1/rate-limits",
    "listRateLimits",
    "List rate limits in use and the sessions waiting for a turn",
    "sessions",
    description="The named rate limits that gave a turn in their last period or that a "
    "session waits for (holding no worker), the most sessions waiting first. One page: "
    "next_cursor is always null.",
    query=ListRateLimits,
    answers=(Answer(200, "The rate limits in use.", Page[RateLimitInfo]),),
)


async def list_rate_limits(request: Request) -> Response:
    state = web_state(request)
    query = parse_query(ListRateLimits, request.query_params)

    def page() -> Page[RateLimitInfo]:
        return Page[RateLimitInfo](
            items=state.client.rate_limits(limit=query.limit), next_cursor=None
        )

    return json_answer(await database_call(page))


routes = [ApiRoute(LIST, list_rate_limits)]
