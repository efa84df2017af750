"""Reading request bodies: JSON only, size-capped by the app, clear 4xx otherwise."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from resumable.webhooks.errors import ApiError


def require_json_content_type(request: Request, body: bytes) -> None:
    if not body:
        return
    content_type = request.headers.get("content-type", "")
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise ApiError(
            415,
            "unsupported_media_type",
            f"expected Content-Type application/json, got {content_type or 'none'!r}",
        )


def parse_json(body: bytes, *, empty: Any = None) -> Any:
    if not body.strip():
        return empty
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise ApiError(400, "malformed_json", "request body is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise ApiError(400, "malformed_json", f"request body is not valid JSON: {exc}") from None


async def json_body(request: Request, *, empty: Any = None) -> Any:
    """The parsed body (reading it enforces the app's size limit, answering 413)."""
    body = await request.body()
    require_json_content_type(request, body)
    return parse_json(body, empty=empty)
