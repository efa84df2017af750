"""``/openapi.json``: the OpenAPI 3.1 document, generated from the routes'
operations (``operations.py``) and their pydantic models.

The answers every route shares come from the code that gives them: 401 from
the auth middleware (every route but ``auth.PUBLIC_ROUTES``), 400 and 431
from the guards, 400/413/415 from body parsing, 422 from the request models,
503 (with ``Retry-After``) from a database that cannot be reached.
"""

from __future__ import annotations

import functools
import re
import typing
from collections.abc import Iterable, Sequence
from importlib import metadata
from typing import Annotated, Any

from pydantic import TypeAdapter

from resumable.schemas import JsonValue
from resumable.webhooks.auth import PUBLIC_ROUTES
from resumable.webhooks.bodies import MAX_JSON_DEPTH
from resumable.webhooks.errors import RETRY_AFTER_SECONDS
from resumable.webhooks.guards import MAX_HEADER_BYTES
from resumable.webhooks.operations import Answer, ApiRoute, Header, Operation
from resumable.webhooks.response_models import ErrorResponse

OPENAPI_VERSION = "3.1.0"
COMPONENTS = "#/components/schemas/"

_TAGS = [
    {"name": "sessions", "description": "Start, read, list and cancel sessions."},
    {"name": "signals and callbacks", "description": "Deliver events to waiting sessions."},
    {"name": "time travel", "description": "Checkpoints, past states and forks."},
    {"name": "dead letters", "description": "Inspect, retry, discard and drain failures."},
    {"name": "schedules", "description": "Start sessions on a cron expression or an interval."},
    {"name": "shared state", "description": "Documents sessions share, and their history."},
    {"name": "operations", "description": "Health, readiness, metrics and this document."},
]

_DESCRIPTION = """\
A suspend-and-resume job queue for long-running AI agents.

Every route needs `Authorization: Bearer <token>` except `/healthz`, `/readyz` and
`/v1/callbacks/{token}`. Every error is `{"error": {"code", "message"}}`; `code` is stable.
Besides each route's own answers: a path no route serves (a trailing slash included;
nothing redirects) answers 404 `not_found`, a
method a path does not take 405 `method_not_allowed` (with `Allow`), and request headers
over 16 KiB 431 `headers_too_large`.
Names are one vocabulary across HTTP, Python and the CLI: `session_id`, `step`, `seq`,
`status`, and pages of `items` with a `next_cursor` to send back as `cursor`."""

# What an error's message typically says, for the examples.
_MESSAGE_AT = {(400, "invalid_request"): "the query string may not contain NUL (%00)"}
_EXAMPLE_MESSAGES = {
    "invalid_request": "limit: Input should be less than or equal to 200",
    "malformed_json": "request body is not valid JSON",
    "invalid_idempotency_key": "idempotency-key must be 1 to 256 bytes",
    "invalid_cursor": "not a cursor this API handed out",
    "unauthorized": "missing bearer token (Authorization: Bearer ...)",
    "invalid_signature": "webhook signature rejected: No matching signature found",
    "session_not_found": "no session 3f1c9b7e-8d2a-4c51-9a0e-6b7f2d9c1e45",
    "checkpoint_not_found": "session has no checkpoint 9 (compacted, or not reached)",
    "dead_letter_not_found": "no dead letter 7",
    "not_found": "no callback with this token",
    "idempotency_key_reused": "idempotency key 'order-42' was used for a different request",
    "session_exists": "a session with this id already exists",
    "invalid_session_state": "session is already completed",
    "invalid_dead_letter_state": "dead letter 7 is already retried",
    "wait_closed": "the wait is over: the session is completed",
    "payload_too_large": "request body is too large",
    "unsupported_media_type": "expected Content-Type application/json",
    "unknown_agent": "unknown agent 'support': no worker has registered it",
    "invalid_state_patch": "the state patch does not apply: member 'x' not found",
    "headers_too_large": f"request headers exceed {MAX_HEADER_BYTES} bytes",
    "database_unavailable": "the database cannot be reached; try again shortly",
    "reducer_not_loaded": "agent 'ledger' is event-sourced: its state between snapshots is"
    " its reducer folded over the events, and this process has not loaded it",
}


def _example_message(status: int, code: str) -> str:
    return _MESSAGE_AT.get((status, code)) or _EXAMPLE_MESSAGES.get(code, code)


def shared_answers(operation: Operation) -> list[Answer]:
    """The answers this operation gives because of what it is, not what it does."""
    answers = [
        Answer(
            400,
            "NUL (%00) in the path, the query string or a header, or a %-escape in the"
            " path or query string that is not UTF-8.",
            codes=("invalid_request",),
        ),
        Answer(
            431,
            f"Request headers over {MAX_HEADER_BYTES} bytes in total.",
            codes=("headers_too_large",),
        ),
    ]
    if operation.path not in PUBLIC_ROUTES:
        answers.append(
            Answer(
                401,
                "No bearer token, or a wrong one.",
                codes=("unauthorized",),
                headers=(Header("WWW-Authenticate", "`Bearer realm=...`", required=True),),
            )
        )
    if operation.body is not None:
        answers += [
            Answer(
                400,
                "The body is not UTF-8 JSON, nests deeper than "
                f"{MAX_JSON_DEPTH} levels, or holds NUL, a lone surrogate, NaN, an "
                "out-of-range number or an integer over 4,300 digits.",
                codes=("malformed_json",),
            ),
            Answer(
                413, "The body is over `RESUMABLE_MAX_BODY_BYTES`.", codes=("payload_too_large",)
            ),
            Answer(
                415,
                "A body whose Content-Type is not `application/json` (or `+json`).",
                codes=("unsupported_media_type",),
            ),
        ]
    if operation.query is not None or operation.body not in (None, True):
        answers.append(
            Answer(
                422,
                "A field or parameter is missing, of the wrong type, out of bounds or unknown "
                "(the message names it).",
                codes=("invalid_request",),
            )
        )
    if operation.database:
        answers.append(
            Answer(
                503,
                "The database cannot be reached.",
                codes=("database_unavailable",),
                headers=(
                    Header(
                        "Retry-After",
                        f"Seconds to wait ({RETRY_AFTER_SECONDS}).",
                        {"type": "string", "pattern": "^[0-9]+$"},
                        required=True,
                    ),
                ),
            )
        )
    return answers


def all_answers(operation: Operation) -> dict[int, Answer]:
    """Its own answers and the shared ones, merged per status."""
    merged: dict[int, Answer] = {}
    for answer in [*operation.answers, *shared_answers(operation)]:
        known = merged.get(answer.status)
        if known is None:
            merged[answer.status] = answer
            continue
        assert known.model is None and answer.model is None, (operation.operation_id, answer)
        first = (
            known.description if known.description.startswith("- ") else f"- {known.description}"
        )
        merged[answer.status] = Answer(
            answer.status,
            f"{first}\n- {answer.description}",
            codes=tuple(dict.fromkeys(known.codes + answer.codes)),
            headers=known.headers + tuple(h for h in answer.headers if h not in known.headers),
        )
    return dict(sorted(merged.items()))


def operations_of(routes: Iterable[Any]) -> list[Operation]:
    return [route.operation for route in routes if isinstance(route, ApiRoute)]


def openapi_document(routes: Iterable[Any], root_path: str = "") -> dict[str, Any]:
    """The document for these routes (as served under `root_path`, if mounted)."""
    return _document(tuple(operations_of(routes)), root_path)


@functools.lru_cache(maxsize=8)
def _document(operations: Sequence[Operation], root_path: str) -> dict[str, Any]:
    models = _Models(operations)
    paths: dict[str, dict[str, Any]] = {}
    for operation in operations:
        paths.setdefault(operation.path, {})[operation.method.lower()] = _operation(
            operation, models
        )
    document: dict[str, Any] = {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "resumable",
            "version": metadata.version("resumable"),
            "description": _DESCRIPTION,
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "tags": _TAGS,
        "paths": paths,
        "components": {
            "schemas": dict(sorted(models.definitions.items())),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token from `RESUMABLE_API_TOKENS` (or `<home>/api-token`).",
                }
            },
        },
        "security": [{"bearer": []}],
    }
    if root_path:
        document["servers"] = [{"url": root_path, "description": "Where this app is mounted."}]
    return document


class _Models:
    """Every model the operations use, as JSON schemas referencing shared components."""

    def __init__(self, operations: Sequence[Operation]) -> None:
        types: dict[str, Any] = {}
        kinds = [JsonValue, ErrorResponse]
        for operation in operations:
            if operation.body not in (None, True):
                kinds.append(operation.body)
            kinds += [answer.model for answer in operation.answers if answer.model is not None]
        for kind in kinds:
            assert types.setdefault(_key(kind), kind) is kind, f"two models named {_key(kind)}"
        self.definitions: dict[str, Any] = {}
        inputs = [(key, "validation", TypeAdapter(kind)) for key, kind in types.items()]
        schemas, definitions = TypeAdapter.json_schemas(
            inputs,  # type: ignore[arg-type]
            ref_template=COMPONENTS + "{model}",
        )
        self.definitions.update(_renamed(definitions.get("$defs", {})))
        self._schemas = {key: _renamed(schema) for (key, _), schema in schemas.items()}
        self._queries: dict[Any, list[dict[str, Any]]] = {}
        for operation in operations:
            if operation.query is not None and operation.query not in self._queries:
                self._queries[operation.query] = self._query_parameters(operation.query)

    def schema(self, kind: Any) -> dict[str, Any]:
        schema: dict[str, Any] = self._schemas[_key(kind)]
        return schema

    def query(self, kind: Any) -> list[dict[str, Any]]:
        return self._queries[kind]

    def _query_parameters(self, model: Any) -> list[dict[str, Any]]:
        schema = model.model_json_schema(ref_template=COMPONENTS + "{model}")
        self.definitions.update(schema.pop("$defs", {}))
        required = set(schema.get("required", []))
        parameters = []
        for name, property_schema in schema["properties"].items():
            field_schema = {k: v for k, v in property_schema.items() if k != "title"}
            description = field_schema.pop("description", None)
            # Absent is how a query string says "none": drop the null branch.
            options = [s for s in field_schema.pop("anyOf", []) if s != {"type": "null"}]
            if len(options) == 1:
                field_schema = {**options[0], **field_schema}
            elif options:
                field_schema["anyOf"] = options
            if field_schema.get("default", 0) is None:
                del field_schema["default"]
            parameter = {
                "name": name,
                "in": "query",
                "required": name in required,
                "schema": field_schema,
            }
            if description:
                parameter["description"] = description
            parameters.append(parameter)
        return parameters


_GENERIC_NAME = re.compile(r"Page_(\w+?)_$")


def _renamed(value: Any) -> Any:
    """Pydantic names ``Page[Session]``'s definition ``Page_Session_``; call it
    ``SessionPage``, as the class is named."""
    if isinstance(value, dict):
        return {_GENERIC_NAME.sub(r"\1Page", key): _renamed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_renamed(item) for item in value]
    if isinstance(value, str) and value.startswith(COMPONENTS):
        return COMPONENTS + _GENERIC_NAME.sub(r"\1Page", value.removeprefix(COMPONENTS))
    return value


def _key(kind: Any) -> str:
    """A unique name for a model, or for an annotated type (named by its members)."""
    if kind is JsonValue:
        return "JsonValue"
    name = getattr(kind, "__name__", None)
    if name is not None:
        return str(name)
    inner = typing.get_args(kind)[0] if typing.get_origin(kind) is Annotated else kind
    members = typing.get_args(inner)
    assert members, f"cannot name {kind!r}"
    return "Or".join(member.__name__ for member in members)


def _header(header: Header, where: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "description": header.description,
        "required": header.required,
        "schema": dict(header.schema),
    }
    if where:
        spec = {"name": header.name, "in": where, **spec}
    return spec


def _operation(operation: Operation, models: _Models) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "operationId": operation.operation_id,
        "summary": operation.summary,
        "tags": [operation.tag],
    }
    if operation.description:
        spec["description"] = operation.description
    if operation.path in PUBLIC_ROUTES:
        spec["security"] = []
    parameters: list[dict[str, Any]] = []
    for param in operation.path_params:
        path_param = {
            "name": param.name,
            "in": "path",
            "required": True,
            "description": param.description,
            "schema": param.schema,
        }
        if param.example is not None:
            path_param["example"] = param.example
        parameters.append(path_param)
    if operation.query is not None:
        parameters += models.query(operation.query)
    parameters += [_header(header, "header") for header in operation.headers]
    if parameters:
        spec["parameters"] = parameters
    if operation.body is not None:
        schema = models.schema(JsonValue if operation.body is True else operation.body)
        body: dict[str, Any] = {
            "required": operation.body_required,
            "content": {"application/json": {"schema": schema}},
        }
        if operation.body_description:
            body["description"] = operation.body_description
        spec["requestBody"] = body
    spec["responses"] = {
        str(status): _response(answer, models) for status, answer in all_answers(operation).items()
    }
    return spec


def _response(answer: Answer, models: _Models) -> dict[str, Any]:
    spec: dict[str, Any] = {"description": answer.description}
    content: dict[str, Any] = {}
    if answer.model is not None:
        content["schema"] = models.schema(answer.model)
    elif answer.schema is not None:
        content["schema"] = dict(answer.schema)
    elif answer.status >= 400:
        content["schema"] = models.schema(ErrorResponse)
        content["examples"] = {
            code: {
                "summary": code,
                "value": {
                    "error": {"code": code, "message": _example_message(answer.status, code)}
                },
            }
            for code in answer.codes
        }
    if content:
        spec["content"] = {answer.media_type: content}
    if answer.headers:
        spec["headers"] = {header.name: _header(header, None) for header in answer.headers}
    if answer.links:
        spec["links"] = dict(answer.links)
    return spec
