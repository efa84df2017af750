"""Giving Starlette's 413 the app's own shape: the API's JSON error, the
console's HTML page.

Starlette's ``max_body_size`` answers an oversized request itself with a
plain-text 413, outside every middleware the app lists, and when the request
declares a Content-Length over the limit it replaces whatever response the
app started with that plain text. This wrapper sits outside it and replaces
exactly that response.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from resumable.webhooks.errors import error_response


class ReplaceTooLarge:
    """ASGI: Starlette's plain-text 413 replaced by `answer(scope)`."""

    def __init__(self, app: ASGIApp, answer: Callable[[Scope], Response]) -> None:
        self.app = app
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replacing = False

        async def send_replaced(message: Message) -> None:
            nonlocal replacing
            if message["type"] == "http.response.start" and message["status"] == 413:
                headers = dict(message.get("headers", []))
                if headers.get(b"content-type", b"").startswith(b"text/plain"):
                    replacing = True
                    return
            if replacing and message["type"] == "http.response.body":
                if not message.get("more_body", False):
                    await self.answer(scope)(scope, receive, send)
                return
            await send(message)

        await self.app(scope, receive, send_replaced)


def _json_too_large(scope: Scope) -> Response:
    return error_response(413, "payload_too_large", "request body is too large")


class JsonTooLarge(ReplaceTooLarge):
    """The API's 413: ``{"error": {"code": "payload_too_large", ...}}``."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app, _json_too_large)
