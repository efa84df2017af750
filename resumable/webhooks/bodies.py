"""Reading request bodies: JSON only, size-capped by the app, clear 4xx otherwise.

Valid JSON is not yet storable: PostgreSQL refuses NUL (``\\u0000``) in
``jsonb`` and ``text``, psycopg refuses lone surrogates (``"\\ud800"``), Python's
parser gives up on deep nesting and on integers over 4,300 digits, turns
``1e400`` into infinity and ``1e-400`` into 0. Each is refused here, as a 400, before any handler
sees the value, so no route can fail on it later.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, NoReturn

from starlette.requests import Request

from resumable._internal.serialization import read_float
from resumable.webhooks.errors import ApiError

# Deeper than any request the API takes; far below where Python's own
# recursion (the parser, the encoder, the serializer's walk) would fail.
MAX_JSON_DEPTH = 100

_UNSTORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")


def require_json_content_type(request: Request, body: bytes) -> None:
    if not body:
        return
    content_type = request.headers.get("content-type", "")
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise ApiError(
            415,
            "unsupported_media_type",
            f"expected Content-Type application/json, got {content_type[:100] or 'none'!r}",
        )


def _malformed(message: str) -> NoReturn:
    raise ApiError(400, "malformed_json", message)


def _reject_constant(name: str) -> NoReturn:
    _malformed(f"{name} is not a JSON number")


def _check_storable(value: Any) -> None:
    """Walk the parsed value (without recursion) for what cannot be stored."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _UNSTORABLE_TEXT.search(item):
                _malformed("JSON strings may not contain NUL (\\u0000) or lone surrogates")
        elif isinstance(item, float):
            if not math.isfinite(item):
                _malformed("a JSON number is out of range")
        elif isinstance(item, list | dict):
            if depth > MAX_JSON_DEPTH:
                _malformed(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)


def parse_json(body: bytes, *, empty: Any = None) -> Any:
    if not body.strip():
        return empty
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        _malformed("request body is not UTF-8")
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=read_float)
    except json.JSONDecodeError as exc:
        _malformed(f"request body is not valid JSON: {exc}")
    except RecursionError:
        _malformed(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    except ValueError as exc:  # an integer over 4,300 digits, a float that underflows
        _malformed(f"request body has a number that cannot be read: {str(exc)[:120]}")
    _check_storable(value)
    return value


async def json_body(request: Request, *, empty: Any = None) -> Any:
    """The parsed body (reading it enforces the app's size limit, answering 413)."""
    body = await request.body()
    require_json_content_type(request, body)
    return parse_json(body, empty=empty)
