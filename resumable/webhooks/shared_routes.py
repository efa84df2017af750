"""Shared documents over HTTP (bearer-authenticated, read-only): a document
as committed now, and its history (each version with the session and step
that wrote it). Sessions change them only through ``ctx.update_shared``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from starlette.requests import Request
from starlette.responses import Response

from resumable.coordination.records import SharedDocument, SharedVersion
from resumable.coordination.shared import MAX_NAME_LENGTH
from resumable.schemas import Page
from resumable.webhooks.database_calls import database_call
from resumable.webhooks.errors import ApiError
from resumable.webhooks.operations import Answer, ApiRoute, Operation, json_answer
from resumable.webhooks.params import PathParam, number_cursor
from resumable.webhooks.request_models import MAX_ID, Digits, IdCursor, _Query, parse_query
from resumable.webhooks.state import web_state

TAG = "shared state"
NAME_PATTERN = rf"^[^\x00-\x1f/]{{1,{MAX_NAME_LENGTH}}}$"


def _name(raw: str) -> str | None:
    return raw if raw.isprintable() and 0 < len(raw) <= MAX_NAME_LENGTH else None


NAME: PathParam[str] = PathParam(
    "name",
    "The shared document's name (printable, at most 200 characters, no `/`).",
    {"type": "string", "pattern": NAME_PATTERN},
    _name,
    code="shared_document_not_found",
    example="customer:42",
    _what="shared document",
)
_NOT_FOUND = Answer(404, "No step has written this document.", codes=("shared_document_not_found",))


class ListVersions(_Query):
    limit: Annotated[int, Field(ge=1, le=1000, description="Versions per page."), Digits] = 100
    cursor: IdCursor | None = None


GET = Operation(
    "GET",
    "/v1/shared/{name}",
    "getSharedDocument",
    "Get a shared document",
    TAG,
    description="Its value and version as committed now, and the session that wrote it last.",
    path_params=(NAME,),
    answers=(Answer(200, "The document.", SharedDocument), _NOT_FOUND),
)


async def get_shared(request: Request) -> Response:
    state = web_state(request)
    name = NAME(request)
    document = await database_call(state.client.shared, name)
    if document is None:
        raise ApiError(404, "shared_document_not_found", f"shared document {name!r} does not exist")
    return json_answer(document)


HISTORY = Operation(
    "GET",
    "/v1/shared/{name}/history",
    "listSharedVersions",
    "List a shared document's versions, newest first",
    TAG,
    description="Each committed value with the session, step and checkpoint that wrote it.",
    path_params=(NAME,),
    query=ListVersions,
    answers=(
        Answer(200, "A page of versions (empty if never written).", Page[SharedVersion]),
        Answer(400, "`cursor` is not one this API handed out.", codes=("invalid_cursor",)),
        Answer(404, "No document can have this name.", codes=("shared_document_not_found",)),
    ),
)


async def shared_history(request: Request) -> Response:
    state = web_state(request)
    name = NAME(request)
    query = parse_query(ListVersions, request.query_params)
    before = number_cursor(query.cursor, MAX_ID) or None
    rows = await database_call(
        lambda: state.client.shared_history(name, limit=query.limit + 1, before=before)
    )
    items = rows[: query.limit]
    next_cursor = str(items[-1].version) if len(rows) > query.limit else None
    return json_answer(Page[SharedVersion](items=items, next_cursor=next_cursor))


routes = [ApiRoute(GET, get_shared), ApiRoute(HISTORY, shared_history)]
