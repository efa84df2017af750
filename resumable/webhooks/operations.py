"""Each route declares its operation once: what it takes, what it answers.

The handler reads its parameters and body with the same models the operation
names, and ``/openapi.json`` and ``docs/api.md`` are generated from these
declarations (``openapi.py``, ``reference.py``), so none of the three can
drift from the others. Answers every route shares (401 from the auth
middleware, 400 and 431 from the guards, 413/415 for bodies, 503 while the
database is down) are added by ``openapi.py`` from the same facts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from resumable.webhooks.params import PathParam


@dataclass(frozen=True)
class Header:
    """A request or response header."""

    name: str
    description: str
    schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "string"})
    required: bool = False


@dataclass(frozen=True)
class Answer:
    """One documented response. ``model`` None on a 4xx/5xx means the error
    body, with ``codes`` its possible ``error.code`` values."""

    status: int
    description: str
    model: Any = None
    codes: tuple[str, ...] = ()
    headers: tuple[Header, ...] = ()
    media_type: str = "application/json"
    schema: Mapping[str, Any] | None = None  # for a body that is not a model
    links: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)  # hashed by identity: the document is cached per route set
class Operation:
    method: str
    path: str
    operation_id: str
    summary: str
    tag: str
    description: str = ""
    path_params: tuple[PathParam[Any], ...] = ()
    query: Any = None
    headers: tuple[Header, ...] = ()
    body: Any = None  # a model (or annotated union); True: any JSON value
    body_required: bool = False
    body_description: str = ""
    answers: tuple[Answer, ...] = ()
    database: bool = True  # reads PostgreSQL, so answers 503 while it is down


Endpoint = Callable[[Request], Awaitable[Response]]


class ApiRoute(Route):
    """A Starlette route that carries its operation."""

    def __init__(self, operation: Operation, endpoint: Endpoint) -> None:
        path = operation.path
        for param in operation.path_params:
            if param.convertor:
                path = path.replace(f"{{{param.name}}}", f"{{{param.name}:{param.convertor}}}")
        super().__init__(path, endpoint, methods=[operation.method], name=operation.operation_id)
        self.operation = operation


IDEMPOTENCY_KEY = Header(
    "Idempotency-Key",
    "Makes a retried request safe: the same key with the same body gets the first "
    "answer again; with another body, 409 `idempotency_key_reused`. At most 256 bytes.",
    {"type": "string", "minLength": 1, "maxLength": 256, "pattern": r"\S"},
)
ACTOR = Header(
    "X-Resumable-Actor",
    "Who is acting (recorded in the audit log with the token's fingerprint); at most "
    "200 characters are kept.",
)


def json_answer(
    body: BaseModel, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """A model as the response body, serialized the way ``/openapi.json`` describes it."""
    return Response(
        body.model_dump_json(by_alias=True),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )
