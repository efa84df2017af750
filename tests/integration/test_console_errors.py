"""Every answer of the operator console, errors included, over real HTTP to a
real ``resumable web``: the console's security headers and its own HTML error
page. Starlette answers a body over the limit (413) and an unexpected
exception (500) outside the middleware an app lists, so those two once went
out as plain text or without the headers.

The 500 is forced without touching the code: the database loses a table the
sessions page reads (a schema changed under a running process), and gets it
back before the test ends.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import httpx
import pytest

from resumable.models.database import Database
from resumable.webhooks.console.app import SECURITY_HEADERS
from tests.conftest import API_TOKEN, LocalDeployment

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_FORM = {"content-type": "application/x-www-form-urlencoded"}
# The default RESUMABLE_MAX_BODY_BYTES is 1 MiB.
_OVER_THE_LIMIT = b"reason=" + b"x" * 1_100_000


@pytest.fixture
def web(deployment: LocalDeployment) -> Iterator[httpx.Client]:
    deployment.web()
    with httpx.Client(base_url=deployment.url, timeout=30) as http:
        yield http


def log_in(http: httpx.Client) -> str:
    """Log in through the form; the session's CSRF token."""
    form = http.get("/ui/login")
    token = _CSRF.search(form.text)
    assert token is not None, form.text[:300]
    data = {"csrf": token.group(1), "name": "ops", "token": API_TOKEN, "next": "/ui/sessions"}
    assert http.post("/ui/login", data=data).status_code == 303
    page = http.get("/ui/sessions")
    assert page.status_code == 200, page.text[:300]
    csrf = _CSRF.search(page.text)
    assert csrf is not None
    return csrf.group(1)


def check_console_answer(answer: httpx.Response, status: int, what: str) -> None:
    """The console's headers on any answer; on an error, its HTML page."""
    assert answer.status_code == status, (what, answer.status_code, answer.text[:300])
    for name, value in SECURITY_HEADERS:
        assert answer.headers.get(name.decode()) == value.decode(), (what, name)
    assert answer.headers.get("cache-control") == "no-store", what
    if status >= 400:
        assert answer.headers["content-type"].startswith("text/html"), (what, answer.headers)
        assert answer.text.startswith("<!doctype html>"), (what, answer.text[:200])
        assert 'role="alert"' in answer.text, (what, answer.text[:500])
        assert "Traceback" not in answer.text, what


def _chunked(body: bytes) -> Iterator[bytes]:
    """The body without a Content-Length (chunked), so the limit is met mid-read."""
    for start in range(0, len(body), 64 * 1024):
        yield body[start : start + 64 * 1024]


def _raw(port: int, request: bytes) -> bytes:
    """A request httpx would not send as it is (a declared length over the
    limit, and no body after it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(request)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    return received


def test_every_console_error_is_its_html_page_with_its_security_headers(
    web: httpx.Client, deployment: LocalDeployment, db: Database
) -> None:
    # Before logging in: the login form's own errors, and the redirect to it.
    check_console_answer(web.get("/ui/sessions"), 303, "redirect to the login")
    check_console_answer(
        web.post("/ui/login", content=_OVER_THE_LIMIT, headers=_FORM), 413, "413 on the login"
    )
    check_console_answer(web.get("/ui/login?next=%00"), 400, "NUL in the query string")
    check_console_answer(web.post("/"), 405, "405 before logging in")

    csrf = log_in(web)
    cancel = "/ui/sessions/00000000-0000-0000-0000-000000000000/cancel"
    for what, answer, status in (
        ("a page", web.get("/ui/sessions"), 200),
        ("unknown page", web.get("/ui/no-such-page"), 404),
        ("wrong method", web.delete("/ui/sessions"), 405),
        ("age before year 1", web.get("/ui/sessions?older_than=999999d"), 422),
        ("age before year 1", web.get("/ui/sessions?newer_than=999999d"), 422),
        (
            "a time before year 1 in UTC",
            web.get("/ui/dead-letters/drain?action=retry&until=0001-01-01T00:00:00%2B01:00"),
            422,
        ),
        ("NUL in a filter", web.get("/ui/sessions?agent=a%00b"), 400),
        ("huge headers", web.get("/ui/sessions", headers={"x-big": "a" * 20_000}), 431),
        (
            "a form over the limit",
            web.post(cancel, content=_OVER_THE_LIMIT + f"&csrf={csrf}".encode(), headers=_FORM),
            413,
        ),
        (
            "a form over the limit, chunked",
            web.post(cancel, content=_chunked(_OVER_THE_LIMIT), headers=_FORM),
            413,
        ),
    ):
        check_console_answer(answer, status, what)
    assert "Content Too Large" not in web.post(cancel, content=_OVER_THE_LIMIT).text
    assert "36500d" in web.get("/ui/sessions?older_than=999999d").text

    # Declared over the limit, with no body sent: Starlette answers before reading it.
    cookie = "; ".join(f"{name}={value}" for name, value in web.cookies.items())
    raw = _raw(
        deployment.port,
        f"POST {cancel} HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\nConnection: close\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(_OVER_THE_LIMIT)}\r\n\r\n".encode(),
    )
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), raw[:300]
    assert b"content-security-policy: default-src 'none'" in head.lower(), head
    assert body.startswith(b"<!doctype html>") and b'role="alert"' in body, body[:300]

    # A bug's 500: the sessions page reads a table the database no longer has.
    with db.connection() as conn:
        conn.execute("ALTER TABLE agents RENAME TO agents_gone")
    try:
        # Closed after it (uvicorn closes a connection whose app raised, and
        # Starlette re-raises after its 500 page): not one to reuse.
        broken = web.get("/ui/sessions", headers={"connection": "close"})
    finally:
        with db.connection() as conn:
            conn.execute("ALTER TABLE agents_gone RENAME TO agents")
    check_console_answer(broken, 500, "an unexpected exception")
    assert "See the server log." in broken.text
    assert "does not exist" not in broken.text  # nothing of the exception leaves
    check_console_answer(web.get("/ui/sessions"), 200, "the page again")
