"""A small real HTTP server standing in for the outside world.

The demo's shop, the tests' payment API and alert receiver and the example's
fake LLM are each a ``FakeServer`` that says what it answers in ``handle``;
this module does the HTTP, the same way for all: a threading server on
127.0.0.1 (port 0: a free one) serving from a daemon thread while the
``with`` block lasts, bodies read by their Content-Length, JSON answers with
their length, no access log on the terminal, and a client that hung up
(a test killed the worker waiting for the answer) is not an error.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def json(self) -> Any:
        """The body as JSON; an empty body reads as ``{}``."""
        return json.loads(self.body or b"{}")


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any = None  # sent as JSON, unless str or bytes; None: no body
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = "application/json"

    def encoded(self) -> bytes:
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


NOT_FOUND = Reply(404, {"error": "not found"})


class FakeServer:
    """Answers every request with ``handle(request)`` (404 unless overridden)."""

    def __init__(self, *, port: int = 0) -> None:
        self.server = _Server(("127.0.0.1", port), _Handler)
        self.server.fake = self
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, name=type(self).__name__, daemon=True
        )

    def handle(self, request: Request) -> Reply:
        return NOT_FOUND

    def close(self) -> None:
        """Stop serving (a subclass first releases requests it holds)."""
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 refused connections when hundreds
    # of async steps called a fake at once (ReadError in the steps).
    request_queue_size = 1024
    fake: FakeServer


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        request = Request(
            method=self.command,
            path=self.path,
            headers={name.lower(): value for name, value in self.headers.items()},
            body=self.rfile.read(length),
        )
        reply = self.server.fake.handle(request)
        data = reply.encoded()
        try:
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if data:
                self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client is gone

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch  # noqa: N815 - http.server names

    def log_message(self, format: str, *args: Any) -> None:
        pass
