"""The operator console over HTTP, without a browser: every console route needs
the session cookie (but the login form and static files), every action needs
its CSRF token, every form refuses bad input with a visible message and no
change, and actions are audited as ``console:<name>``.

The app is the real one (``create_app``) on the real database; a real worker
makes the sessions the pages show, and is stopped before the database is
compared, so only a request could change it.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.testclient import TestClient

from resumable.client import Client
from resumable.models.database import Database
from resumable.settings import Settings
from resumable.webhooks.auth import CONSOLE_PUBLIC_ROUTES
from resumable.webhooks.console.session_cookie import SESSION_COOKIE, CookieSigner
from tests.conftest import API_TOKEN, ManagedProcess, wait_until
from tests.integration.test_hostile_http import snapshot

AGENTS = "tests.integration.console_agents"
_PARAM = re.compile(r"{(\w+)(?::\w+)?}")
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
def console(app: Starlette) -> Starlette:
    inner = app.console  # type: ignore[attr-defined]
    assert isinstance(inner, Starlette)
    return inner


@pytest.fixture
def browser(app: Starlette) -> Iterator[TestClient]:
    """A client that does not follow redirects, so each answer is seen as sent."""
    with TestClient(app, raise_server_exceptions=False, follow_redirects=False) as test_client:
        yield test_client


def log_in(browser: TestClient, name: str = "alice") -> str:
    """Log in through the form; the session's CSRF token."""
    form = browser.get("/ui/login")
    assert form.status_code == 200
    token = _CSRF.search(form.text)
    assert token is not None
    answer = browser.post(
        "/ui/login",
        data={"csrf": token.group(1), "name": name, "token": API_TOKEN, "next": "/ui/sessions"},
    )
    assert answer.status_code == 303, answer.text
    page = browser.get("/ui/sessions")
    assert page.status_code == 200
    csrf = _CSRF.search(page.text)
    assert csrf is not None
    return csrf.group(1)


@pytest.fixture
def world(
    client: Client, start_worker: Callable[..., ManagedProcess], db: Database
) -> dict[str, str]:
    """A suspended session, a dead letter that can be retried (with a checkpoint
    to fork at) and one that cannot (its compensation ran)."""
    worker = start_worker(AGENTS)
    waiting = client.start("console_waiting", {})
    fixable = client.start("console_fixable", {})
    compensated = client.start("console_compensated", {})
    wait_until(
        lambda: (
            client.get(waiting).status == "suspended"
            and client.get(fixable).status == "failed"
            and client.get(compensated).status == "failed"
        ),
        what="a suspended and two failed sessions",
    )
    worker.stop()
    with db.connection() as conn:
        letters = {
            str(row["session_id"]): str(row["id"])
            for row in conn.execute("SELECT id, session_id FROM dead_letters").fetchall()
        }
    return {
        "session_id": str(waiting),
        "fixable": str(fixable),
        "dead_letter_id": letters[str(fixable)],
        "compensated": str(compensated),
        "compensated_letter": letters[str(compensated)],
        "job_id": "no-such-drain",
        "name": "no-such-schedule",
    }


def console_routes(console: Starlette) -> list[BaseRoute]:
    return list(console.routes)


def path_of(route: BaseRoute, values: dict[str, str]) -> str:
    if isinstance(route, Mount):
        return route.path + "/console.css"
    assert isinstance(route, Route)
    return _PARAM.sub(lambda m: values[m.group(1)], route.path)


def methods_of(route: BaseRoute) -> list[str]:
    if isinstance(route, Mount):
        return ["GET"]
    assert isinstance(route, Route)
    return sorted((route.methods or set()) - {"HEAD"})


def is_login_redirect(answer: httpx2.Response) -> bool:
    return answer.status_code == 303 and answer.headers["location"].startswith("/ui/login?next=")


def test_every_console_route_needs_the_session_cookie(
    app: Starlette, console: Starlette, browser: TestClient
) -> None:
    assert {"/", "/ui/login", "/ui/static"} == CONSOLE_PUBLIC_ROUTES
    values = {"session_id": str(uuid.uuid4()), "dead_letter_id": "1", "job_id": "x", "name": "x"}
    signer = CookieSigner([API_TOKEN])
    forged = {
        "no cookie": None,
        "garbage": "garbage",
        "signed by another deployment": CookieSigner(["other-token"]).sign(
            "session", {"name": "mallory", "csrf": "c"}, 3600
        ),
        "expired": signer.sign("session", {"name": "mallory", "csrf": "c"}, -1),
        "a login-form cookie": signer.sign("login", {"name": "mallory", "csrf": "c"}, 3600),
        "tampered": signer.sign("session", {"name": "mallory", "csrf": "c"}, 3600)[:-2] + "AA",
    }
    walked = 0
    for route in console_routes(console):
        for method in methods_of(route):
            path = path_of(route, values)
            public = getattr(route, "path", None) in CONSOLE_PUBLIC_ROUTES
            for what, cookie in forged.items():
                browser.cookies.clear()
                if cookie is not None:
                    browser.cookies.set(SESSION_COOKIE, cookie, path="/ui")
                headers = {"authorization": f"Bearer {API_TOKEN}"}  # not a console login
                answer = browser.request(method, path, headers=headers)
                walked += 1
                assert answer.status_code < 500, (method, path, what)
                if public:
                    assert not is_login_redirect(answer), (method, path, what)
                else:
                    assert is_login_redirect(answer), (method, path, what, answer.status_code)
    assert walked > 60
    browser.cookies.clear()
    # The page asked for comes back after logging in; a POST goes to the home page.
    answer = browser.get("/ui/sessions?status=failed")
    assert parse_qs(urlsplit(answer.headers["location"]).query)["next"] == [
        "/ui/sessions?status=failed"
    ]
    assert is_login_redirect(browser.get("/ui/no-such-page"))
    assert browser.get("/").headers["location"] == "/ui"  # the cookie's path starts there
    assert is_login_redirect(browser.get("/ui"))
    assert browser.post("/").status_code == 405

    # A console route added later is protected without a line in its handler.
    async def leak(request: Any) -> PlainTextResponse:
        return PlainTextResponse("secret")

    console.routes.append(Route("/ui/added-later", leak, methods=["GET"]))
    assert is_login_redirect(browser.get("/ui/added-later"))
    log_in(browser)
    assert browser.get("/ui/added-later").text == "secret"
    assert browser.get("/ui/no-such-page").status_code == 404
    assert browser.get("/ui").headers["location"] == "/ui/sessions"
    assert "GET" in browser.delete("/ui/sessions").headers["allow"]
    # The API is unchanged: a console cookie is not an API credential.
    assert browser.get("/v1/sessions").status_code == 401


def test_login_sets_a_strict_httponly_cookie_and_logout_ends_it(browser: TestClient) -> None:
    form = browser.get("/ui/login")
    token = _CSRF.search(form.text)
    assert token is not None
    for name, api_token, expected in (
        ("alice", "wrong-token", "not accepted"),
        ("", API_TOKEN, "Your name is required"),
        ("<script>", API_TOKEN, "Your name is not valid"),
        ("a" * 65, API_TOKEN, "too long"),
        ("alice", "", "The API token is required"),
    ):
        answer = browser.post(
            "/ui/login", data={"csrf": token.group(1), "name": name, "token": api_token}
        )
        assert answer.status_code in (401, 422), (name, answer.status_code)
        assert expected in answer.text, (name, expected)
        assert f"{SESSION_COOKIE}=" not in answer.headers.get("set-cookie", "")
        token = _CSRF.search(answer.text)
        assert token is not None
    no_csrf = browser.post("/ui/login", data={"name": "alice", "token": API_TOKEN})
    assert no_csrf.status_code == 403
    assert f"{SESSION_COOKIE}=" not in no_csrf.headers.get("set-cookie", "")

    answer = browser.post(
        "/ui/login",
        data={"csrf": token.group(1), "name": "Zoë Ops", "token": API_TOKEN, "next": "//evil"},
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/sessions"  # never off the console
    cookie = next(
        v for k, v in answer.headers.multi_items() if k == "set-cookie" and SESSION_COOKIE in v
    )
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert {"httponly", "samesite", "path", "max-age"} <= attributes
    assert "SameSite=strict" in cookie or "samesite=strict" in cookie.lower()
    assert "Path=/ui" in cookie
    page = browser.get("/ui/sessions")
    assert page.status_code == 200 and "Zoë Ops" in page.text
    for header in ("content-security-policy", "x-frame-options", "referrer-policy"):
        assert page.headers[header]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"

    csrf = _CSRF.search(page.text)
    assert csrf is not None
    out = browser.post("/ui/logout", data={"csrf": csrf.group(1)})
    assert out.status_code == 303 and out.headers["location"] == "/ui/login"
    assert is_login_redirect(browser.get("/ui/sessions"))


def test_every_console_action_refuses_a_missing_or_wrong_csrf_token(
    console: Starlette, browser: TestClient, db: Database, world: dict[str, str]
) -> None:
    csrf = log_in(browser)
    other = TestClient(browser.app, follow_redirects=False)
    other_csrf = log_in(other, "mallory")
    assert other_csrf != csrf
    fields = {"reason": "r", "topic": "approve", "payload": "{}", "at": "1", "action": "discard"}
    before = snapshot(db)
    posted = 0
    for route in console_routes(console):
        if "POST" not in methods_of(route) or getattr(route, "path", "") == "/ui/login":
            continue
        path = path_of(route, world)
        for token in (None, "", "wrong", other_csrf, csrf + "x"):
            data = dict(fields) if token is None else {**fields, "csrf": token}
            answer = browser.post(path, data=data)
            posted += 1
            assert answer.status_code == 403, (path, token, answer.status_code)
            assert "CSRF" in answer.text and "Nothing was changed" in answer.text
    assert posted >= 35
    assert snapshot(db) == before
    # The same forms with the token do act (so the refusals above were the token's).
    done = browser.post(
        f"/ui/sessions/{world['session_id']}/cancel", data={"csrf": csrf, "reason": "r"}
    )
    assert done.status_code == 303
    assert snapshot(db) != before


def _alert(answer: httpx2.Response) -> str:
    match = re.search(r'role="alert"[^>]*>(.*?)</', answer.text, re.S)
    assert match is not None, answer.text[:500]
    return match.group(1)


def test_bad_input_on_every_form_shows_an_error_and_changes_nothing(
    browser: TestClient, db: Database, world: dict[str, str]
) -> None:
    csrf = log_in(browser)
    session, fixable = world["session_id"], world["fixable"]
    letter, compensated_letter = world["dead_letter_id"], world["compensated_letter"]
    huge = "x" * 300_000
    cases: list[tuple[str, dict[str, str], str]] = [
        (f"/ui/sessions/{session}/signal", {"topic": "approve", "payload": "{"}, "not valid JSON"),
        (
            f"/ui/sessions/{session}/signal",
            {"topic": "approve", "payload": "[" * 200 + "]" * 200},
            "nested",
        ),
        (f"/ui/sessions/{session}/signal", {"topic": "approve", "payload": '"a\\u0000"'}, "NUL"),
        (f"/ui/sessions/{session}/signal", {"topic": "approve", "payload": "NaN"}, "number"),
        (f"/ui/sessions/{session}/signal", {"topic": "approve", "payload": "9" * 5000}, "number"),
        (f"/ui/sessions/{session}/signal", {"topic": "approve", "payload": huge}, "too long"),
        (f"/ui/sessions/{session}/signal", {"topic": "<b>", "payload": "{}"}, "topic"),
        (f"/ui/sessions/{session}/signal", {"topic": "", "payload": "{}"}, "required"),
        (f"/ui/sessions/{session}/signal", {"topic": "a", "key": "k" * 300}, "too long"),
        (f"/ui/sessions/{session}/cancel", {"reason": "r" * 2001}, "too long"),
        (f"/ui/sessions/{fixable}/fork", {"at": "x"}, "whole number"),
        (f"/ui/sessions/{fixable}/fork", {"at": "99"}, "no checkpoint 99"),
        (f"/ui/sessions/{fixable}/fork", {"at": "9" * 30}, "whole number"),
        (f"/ui/sessions/{fixable}/fork", {"at": "1", "patch": '{"op": 1}'}, "list of operations"),
        (f"/ui/dead-letters/{letter}/retry", {"patch": "[1]"}, "list of operations"),
        (
            f"/ui/dead-letters/{letter}/retry",
            {"patch": '[{"op": "remove", "path": "/nope"}]'},
            "does not apply",
        ),
        (
            f"/ui/dead-letters/{letter}/retry",
            {"patch": '[{"op": "replace", "path": "", "value": 1}]'},
            "JSON object",
        ),
        (f"/ui/dead-letters/{letter}/retry", {"patch": "[{"}, "not valid JSON"),
        (f"/ui/dead-letters/{compensated_letter}/retry", {}, "compensations ran"),
        (f"/ui/dead-letters/{letter}/discard", {"reason": "   "}, "reason is required"),
    ]
    before = snapshot(db)
    for path, data, expected in cases:
        answer = browser.post(path, data={"csrf": csrf, **data})
        assert 400 <= answer.status_code < 500, (path, data.keys(), answer.status_code)
        assert expected in _alert(answer), (path, expected, _alert(answer)[:300])
        assert snapshot(db) == before, (path, expected)
    # What was typed comes back in the form, escaped.
    answer = browser.post(
        f"/ui/sessions/{session}/signal",
        data={"csrf": csrf, "topic": "approve", "payload": '{"x": "</textarea><b>"'},
    )
    assert answer.status_code == 422
    assert "&#34;x&#34;: &#34;&lt;/textarea&gt;&lt;b&gt;&#34;</textarea>" in answer.text
    assert "</textarea><b>" not in answer.text
    # Whole-form problems: NUL, bad UTF-8, the wrong content type, duplicates, too big.
    raw_cases: list[tuple[bytes, str, int]] = [
        (f"csrf={csrf}&reason=a%00b".encode(), "NUL", 400),
        (f"csrf={csrf}&reason=%FF".encode(), "UTF-8", 400),
        (f"csrf={csrf}&reason=a&reason=b".encode(), "twice", 400),
        (b"&".join([f"csrf={csrf}".encode()] + [b"f%d=1" % i for i in range(50)]), "fields", 400),
    ]
    path = f"/ui/sessions/{session}/cancel"
    form_type = {"content-type": "application/x-www-form-urlencoded"}
    for body, expected, status in raw_cases:
        answer = browser.post(path, content=body, headers=form_type)
        assert answer.status_code == status, (body[:60], answer.status_code)
        assert expected in answer.text
    as_json = browser.post(path, content=b'{"csrf": "x"}', headers={"content-type": "text/json"})
    assert as_json.status_code == 415
    too_big = browser.post(path, content=b"reason=" + b"x" * 1_100_000, headers=form_type)
    assert too_big.status_code == 413
    assert snapshot(db) == before

    # Bad filters and parameters on pages: a message, not a 5xx.
    for url, expected in (
        ("/ui/sessions?status=nope", "Status must be one of"),
        ("/ui/sessions?id=zz", "hexadecimal"),
        ("/ui/sessions?older_than=yesterday", "duration"),
        ("/ui/sessions?older_than=999999d", "at most 36500d"),
        ("/ui/sessions?newer_than=740000d", "at most 36500d"),
        ("/ui/sessions?cursor=" + "A" * 150, "cursor"),
        ("/ui/sessions?limit=0", "page size"),
        ("/ui/dead-letters?status=lost", "status must be one of"),
        ("/ui/dead-letters?since=tomorrow", "must be a time"),
        # Year 1 at +01:00 is before year 1 in UTC, which Python cannot hold (a 500).
        ("/ui/dead-letters/drain?action=retry&until=0001-01-01T00:00%2B01:00", "from 0001-01-01"),
        ("/ui/dead-letters?since=9999-12-31T23:59-01:00", "to 9999-12-31"),
        ("/ui/dead-letters?compensation=some", "compensation must be one of"),
        ("/ui/dead-letters/drain?action=explode", "retry or discard"),
        ("/ui/dead-letters/drain?action=discard", "needs a reason"),
        ("/ui/dead-letters/drain?action=retry&limit=0", "limit"),
        ("/ui/dead-letters/drain?action=retry&rate=inf", "rate"),
        (f"/ui/sessions/{session}?at=abc", "whole number"),
    ):
        answer = browser.get(url)
        assert 400 <= answer.status_code < 500, (url, answer.status_code)
        assert expected.lower() in _alert(answer).lower(), (url, _alert(answer)[:200])
    for url in (
        "/ui/sessions/not-a-uuid",
        f"/ui/sessions/{uuid.uuid4()}",
        "/ui/drains/unknown",
        "/ui/dead-letters/999999999/retry",
    ):
        method = "POST" if url.endswith("retry") else "GET"
        answer = browser.request(method, url, data={"csrf": csrf} if method == "POST" else None)
        assert answer.status_code == 404, (url, answer.status_code)
    assert browser.get("/ui/sessions?agent=a%00b").status_code == 400
    assert snapshot(db) == before


def test_actions_are_audited_with_the_operators_name(
    browser: TestClient, client: Client, db: Database, world: dict[str, str]
) -> None:
    csrf = log_in(browser, "Zoë")
    session = world["session_id"]
    sent = browser.post(
        f"/ui/sessions/{session}/signal",
        data={"csrf": csrf, "topic": "later", "payload": '{"ok": true}', "key": "sig-1"},
    )
    assert sent.status_code == 303
    assert sent.headers["location"].endswith("done=signal_accepted")
    again = browser.post(
        f"/ui/sessions/{session}/signal",
        data={"csrf": csrf, "topic": "later", "payload": '{"ok": true}', "key": "sig-1"},
    )
    assert again.headers["location"].endswith("done=signal_duplicate")
    reused = browser.post(
        f"/ui/sessions/{session}/signal",
        data={"csrf": csrf, "topic": "later", "payload": '{"ok": false}', "key": "sig-1"},
    )
    assert reused.status_code == 409 and "different body" in _alert(reused)

    fork = browser.post(f"/ui/sessions/{world['fixable']}/fork", data={"csrf": csrf, "at": "1"})
    assert fork.status_code == 303
    fork_id = fork.headers["location"].split("/ui/sessions/")[1].split("?")[0]
    page = browser.get(fork.headers["location"])
    assert "forked from a checkpoint" in page.text

    discard = browser.post(
        f"/ui/dead-letters/{world['compensated_letter']}/discard",
        data={"csrf": csrf, "reason": "refunded by hand"},
    )
    assert discard.status_code == 303
    retry = browser.post(
        f"/ui/dead-letters/{world['dead_letter_id']}/retry",
        data={"csrf": csrf, "patch": '[{"op": "add", "path": "/fixed", "value": true}]'},
    )
    assert retry.status_code == 303, _alert(retry)
    assert client.state(world["fixable"])["fixed"] is True
    cancel = browser.post(f"/ui/sessions/{session}/cancel", data={"csrf": csrf, "reason": "r"})
    assert cancel.status_code == 303
    assert client.get(session).status == "cancelled"
    twice = browser.post(f"/ui/sessions/{session}/cancel", data={"csrf": csrf})
    assert twice.status_code == 409 and "already cancelled" in _alert(twice)

    with db.connection() as conn:
        actors = {
            (str(row["event_type"]), str(row["by"]))
            for row in conn.execute(
                "SELECT event_type, payload->>'by' AS by FROM audit_events WHERE payload ? 'by'"
            ).fetchall()
        }
    assert {
        ("session_cancelled", "console:Zoë"),
        ("dead_letter_retried", "console:Zoë"),
        ("dead_letter_discarded", "console:Zoë"),
        ("signal_received", "console:Zoë"),
    } <= actors, actors
    assert any(e.payload.get("by") == "console:Zoë" for e in client.events(uuid.UUID(fork_id)))


def test_the_sessions_list_filters_and_pages(
    browser: TestClient, client: Client, world: dict[str, str]
) -> None:
    log_in(browser)
    extra = [client.start("console_waiting", {}) for _ in range(3)]
    listed = browser.get("/ui/sessions?agent=console_waiting&limit=2")
    ids = re.findall(r'href="/ui/sessions/([0-9a-f-]{36})"', listed.text)
    assert ids == [str(extra[2]), str(extra[1])]
    next_page = re.search(r'href="(/ui/sessions\?[^"]*cursor=[^"]+)"', listed.text)
    assert next_page is not None
    second = browser.get(next_page.group(1).replace("&amp;", "&"))
    ids = re.findall(r'href="/ui/sessions/([0-9a-f-]{36})"', second.text)
    assert ids == [str(extra[0]), world["session_id"]]

    failed = browser.get("/ui/sessions?status=failed")
    failed_ids = set(re.findall(r'href="/ui/sessions/([0-9a-f-]{36})"', failed.text))
    assert failed_ids == {world["fixable"], world["compensated"]}
    prefix = world["fixable"][:6].upper()
    by_id = browser.get(f"/ui/sessions?id={prefix}")
    assert world["fixable"] in by_id.text
    assert world["compensated"] not in by_id.text or world["compensated"].startswith(prefix.lower())
    old = browser.get("/ui/sessions?older_than=1d")
    assert "No sessions match." in old.text
    recent = browser.get("/ui/sessions?newer_than=1h&status=suspended")
    assert world["session_id"] in recent.text
    counts = re.search(r"status-failed\">failed</span> <b>(\d+)</b>", failed.text)
    assert counts is not None and counts.group(1) == "2"


def _listed(browser: TestClient, query: str) -> set[str]:
    answer = browser.get(f"/ui/sessions?{query}")
    assert answer.status_code == 200, answer.text
    return set(re.findall(r'href="/ui/sessions/([0-9a-f-]{36})"', answer.text))


def test_sessions_are_found_by_a_value_in_their_input_or_state_and_by_their_error(
    browser: TestClient, client: Client, world: dict[str, str]
) -> None:
    """Issue 41: an operator looking for customer 42's session had to know its id."""
    log_in(browser)
    number = client.start("console_waiting", {"customer": {"id": 42, "tier": "gold"}})
    text = client.start("console_waiting", {"customer": {"id": "42"}})
    other = client.start("console_waiting", {"customer": {"id": 7}, "tags": ["a_b", "50%"]})
    assert _listed(browser, "path=customer.id&value=42") == {str(number), str(text)}
    assert _listed(browser, "in=input&path=customer.id&value=%2242%22") == {str(text)}
    assert _listed(browser, "path=customer.tier&value=gold") == {str(number)}
    assert _listed(browser, "path=tags.1&value=50%25") == {str(other)}
    # The state as each session last wrote it: the one waiting set `asked`.
    assert _listed(browser, "in=state&path=asked&value=true") == {world["session_id"]}
    assert _listed(browser, "in=result&path=payload&value=1") == set()
    # The error's type or message, any case; LIKE's wildcards are only text.
    assert _listed(browser, "error=needs+state.FIXED") == {world["fixable"]}
    assert _listed(browser, "error=%25") == set()
    assert _listed(browser, "error=permanenterror") >= {world["fixable"]}
    for query, message in (
        ("path=customer.id", "needs both a path"),
        ("value=42", "needs both a path"),
        ("path=a..b&value=1", "joined by dots"),
        ("in=secrets&path=a&value=1", "Search in must be one of input, state, result"),
    ):
        answer = browser.get(f"/ui/sessions?{query}")
        assert answer.status_code == 422 and message in answer.text, (query, answer.text[:300])


def test_the_session_page_shows_history_tool_calls_wait_and_traceback(
    browser: TestClient, world: dict[str, str], settings: Settings
) -> None:
    log_in(browser)
    waiting = browser.get(f"/ui/sessions/{world['session_id']}")
    assert waiting.status_code == 200
    assert "Signal topics" in waiting.text and "<code>approve</code>" in waiting.text
    failed = browser.get(f"/ui/sessions/{world['compensated']}")
    text = failed.text
    assert "Traceback (most recent call last)" in text
    assert "the card was declined" in text
    assert "reserve" in text and "undo: release" in text
    key = re.search(r'class="mono key[^"]*">([^<]+)<', text)
    assert key is not None and len(key.group(1)) > 20  # the idempotency key
    assert "&#34;reserved&#34;" in text  # the recorded result
    fixable = browser.get(f"/ui/sessions/{world['fixable']}")
    # Checkpoint 1 (prepare) with its diff from the empty start state, and the state.
    assert "1 change" in fixable.text and "&#34;/order&#34;" in fixable.text
    assert "State after checkpoint 1" in fixable.text
    assert "run_started" in fixable.text and "session_failed" in fixable.text
    started = time.monotonic()
    for _ in range(5):
        browser.get(f"/ui/sessions/{world['fixable']}")
    assert time.monotonic() - started < 5


def test_a_blocked_session_is_resumed_or_failed_from_its_page(
    browser: TestClient, client: Client, db: Database
) -> None:
    """The page shows why the session is blocked and offers the operator's
    three actions; each goes through the same rules as the CLI and the API."""
    csrf = log_in(browser, "Ada")
    reason = {"kind": "missing_step", "step": "one", "message": "no step 'one' <here>"}
    first, second = client.start("five"), client.start("five")
    with db.connection() as conn:
        conn.execute(
            "UPDATE sessions SET status = 'blocked', blocked_reason = %s::jsonb WHERE id = ANY(%s)",
            (json.dumps(reason), [first, second]),
        )
    page = browser.get(f"/ui/sessions/{first}")
    assert "Blocked: its replay diverged" in page.text and "&lt;here&gt;" in page.text
    for action in ("resume", "accept", "fail"):
        assert f'action="/ui/sessions/{first}/{action}"' in page.text
    no_reason = browser.post(f"/ui/sessions/{first}/resume", data={"csrf": csrf})
    assert no_reason.status_code == 422 and client.get(first).status == "blocked"
    resumed = browser.post(
        f"/ui/sessions/{first}/resume", data={"csrf": csrf, "reason": "step is back"}
    )
    assert resumed.status_code == 303 and resumed.headers["location"].endswith(
        "done=blocked_resumed"
    )
    assert client.get(first).status == "pending"
    again = browser.post(f"/ui/sessions/{first}/resume", data={"csrf": csrf, "reason": "r"})
    assert again.status_code == 409 and "not blocked" in _alert(again)
    failed = browser.post(f"/ui/sessions/{second}/fail", data={"csrf": csrf, "reason": "give up"})
    assert failed.status_code == 303 and client.get(second).status != "blocked"
    by = {(e.type, e.payload.get("by")) for e in client.events(first)}
    assert ("blocked_resumed", "console:Ada") in by


def test_a_cursor_or_id_as_long_as_its_range_is_taken_and_one_past_it_refused(
    browser: TestClient, world: dict[str, str]
) -> None:
    """`before` (a dead letter id) and `events_after` (an event id) run to 19
    digits; the console refused anything over 12 as not a whole number."""
    csrf = log_in(browser)
    largest = str(2**62)
    letters = browser.get(f"/ui/dead-letters?status=all&before={largest}")
    assert letters.status_code == 200, _alert(letters)
    assert world["fixable"][:8] in letters.text and world["compensated"][:8] in letters.text
    for zeros in ("000", "0" * 50_000):  # int() refuses over 4,300 digits, zeros included
        padded = browser.get(f"/ui/dead-letters?status=all&before={zeros}{largest}")
        assert padded.status_code == 200, _alert(padded)
    session = browser.get(f"/ui/sessions/{world['fixable']}?events_after={largest}")
    assert session.status_code == 200, _alert(session)
    for past in (str(2**62 + 1), "9" * 400):
        refused = browser.get(f"/ui/dead-letters?status=all&before={past}")
        assert refused.status_code == 422
        assert "must be a whole number" in _alert(refused)
    for number in (str(2**63), "0" * 30 + "1" * 20):
        retried = browser.post(f"/ui/dead-letters/{number}/retry", data={"csrf": csrf})
        assert retried.status_code == 404, retried.text[:300]


def test_a_selection_of_dead_letters_drains_those_alone(
    browser: TestClient, client: Client, world: dict[str, str]
) -> None:
    csrf = log_in(browser)
    picked = world["dead_letter_id"]
    preview = browser.get(f"/ui/dead-letters/drain?action=discard&reason=r&pick={picked}")
    assert preview.status_code == 200 and f'name="ids" value="{picked}"' in preview.text
    for ids, message in (("x,1", "numbers separated by commas"), (",", "from 1 to 1000")):
        bad = browser.get(f"/ui/dead-letters/drain?action=retry&ids={ids}")
        assert bad.status_code == 422 and message in bad.text, bad.text[:300]
    # The confirmation carries the preview's fields (the selection among them).
    form = preview.text[preview.text.index('id="run-drain"') :]
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form))
    assert fields["ids"] == picked and fields["csrf"] == csrf
    run = browser.post("/ui/dead-letters/drain", data=fields)
    assert run.status_code == 303, run.text[:300]
    wait_until(
        lambda: client.dead_letter(int(picked)).status == "discarded", what="the pick discarded"
    )
    assert client.dead_letter(int(world["compensated_letter"])).status == "open"  # not picked


def test_the_workers_page_charts_the_schedulers_activity_samples(
    browser: TestClient, client: Client, db: Database, settings: Settings, world: dict[str, str]
) -> None:
    """Issue 41: no picture of throughput, failures or queue depth over time."""
    from resumable.scheduler.jobs import SchedulerJobs

    log_in(browser)
    empty = browser.get("/ui/workers").text
    assert "No activity samples yet" in empty and "<polyline" not in empty
    # Two schedulers in the same minute write one sample, counting what is live now.
    for _ in range(2):
        assert SchedulerJobs(settings, db, client.broker).sample_activity()
    with db.connection() as conn:
        [sample] = conn.execute("SELECT * FROM activity_samples").fetchall()
        conn.execute("UPDATE activity_samples SET steps = 1000")  # a count to draw from
        conn.execute(
            "INSERT INTO activity_samples SELECT at - make_interval(mins => m), pending, running,"
            " suspended, retrying, blocked, 1000 - 10 * m, failures, last_event_id,"
            " resumes, resume_p50_ms, resume_p95_ms"
            " FROM activity_samples, generate_series(1, 30) AS m"
        )
    assert sample["suspended"] == client.count_by_status().get("suspended", 0) == 1
    page = browser.get("/ui/workers").text
    hour = page[page.index('id="charts-hour"') : page.index('id="charts-day"')]
    assert hour.count("<polyline") >= 4 and "peak 10, now 10" in hour  # steps a minute
    assert "Waiting (suspended)" in hour


def test_a_resume_s_latency_is_recorded_by_its_claim_and_charted(
    browser: TestClient,
    client: Client,
    db: Database,
    settings: Settings,
    start_worker: Callable[..., ManagedProcess],
) -> None:
    """From the signal's arrival to the claim of the session it woke: in the
    claim's audit event, and in the next minute's sample."""
    from resumable.scheduler.jobs import SchedulerJobs

    start_worker(AGENTS)
    session = client.start("console_waiting", {})
    wait_until(lambda: client.get(session).status == "suspended", what="suspended")
    assert SchedulerJobs(settings, db, client.broker).sample_activity()
    with db.connection() as conn:  # as if that sample were a minute old
        conn.execute("UPDATE activity_samples SET at = at - interval '1 minute'")
    client.signal(session, "approve", {"ok": True})
    wait_until(lambda: client.get(session).status == "completed", what="completed")
    [run, resumed] = [e for e in client.events(session) if e.type == "run_started"]
    assert "waited_ms" not in run.payload  # a new session is no resume
    assert 0 < resumed.payload["waited_ms"] < 30_000
    assert SchedulerJobs(settings, db, client.broker).sample_activity()
    with db.connection() as conn:
        first, latest = conn.execute(
            "SELECT resumes, resume_p95_ms FROM activity_samples ORDER BY at"
        ).fetchall()
    assert first["resumes"] is None  # nothing before it to count from
    assert latest["resumes"] == 1
    assert latest["resume_p95_ms"] == pytest.approx(resumed.payload["waited_ms"])
    log_in(browser)
    hour = browser.get("/ui/workers").text
    assert "Resume latency, p95" in hour
