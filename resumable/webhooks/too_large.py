"""Giving Starlette's 413 the API's JSON error shape.

Starlette's ``max_body_size`` answers an oversized request itself with a
plain-text 413, and when the request declares a Content-Length over the limit
it replaces whatever response the app started with that plain text. This
wrapper sits outside it and rewrites exactly that response.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_BODY = json.dumps(
    {"error": {"code": "payload_too_large", "message": "request body is too large"}}
).encode()


class JsonTooLarge:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rewriting = False

        async def send_json(message: Message) -> None:
            nonlocal rewriting
            if message["type"] == "http.response.start" and message["status"] == 413:
                headers = dict(message.get("headers", []))
                if headers.get(b"content-type", b"").startswith(b"text/plain"):
                    rewriting = True
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 413,
                            "headers": [
                                (b"content-type", b"application/json"),
                                (b"content-length", str(len(_BODY)).encode()),
                            ],
                        }
                    )
                    return
            if rewriting and message["type"] == "http.response.body":
                if not message.get("more_body", False):
                    await send({"type": "http.response.body", "body": _BODY})
                return
            await send(message)

        await self.app(scope, receive, send_json)
