"""Invariant 7 over HTTP: every route, walked from ``app.routes`` (so a new
route is swept without anyone adding it here), gets hostile input and answers
a 4xx in the API's error shape, never a 5xx, and the database is unchanged."""

from __future__ import annotations

import base64
import json
import re
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from resumable.client import Client
from resumable.errors import InvalidArgumentError
from resumable.models.database import Database
from resumable.webhooks import request_models
from resumable.webhooks.auth import PUBLIC_ROUTES
from tests.conftest import API_TOKEN, ManagedProcess, wait_until
from tests.fake_api import FakeAPI
from tests.signing import signed_bytes

AUTH = {"authorization": f"Bearer {API_TOKEN}"}
_PARAM = re.compile(r"{(\w+)(?::\w+)?}")


@pytest.fixture
def api(app: Starlette) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def snapshot(db: Database) -> dict[str, str]:
    """Every table's rows, hashed (`agents` and `workers` are the workers' heartbeats, not data)."""
    with db.connection() as conn:
        tables = [
            str(row["table_name"])
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            ).fetchall()
        ]
        assert "sessions" in tables
        hashes = {}
        for table in sorted(set(tables) - {"agents", "workers", "alembic_version"}):
            row = conn.execute(
                f"SELECT count(*) AS n, md5(coalesce(string_agg(t::text, '|' "
                f"ORDER BY t::text), '')) AS h FROM \"{table}\" t"
            ).fetchone()
            assert row is not None
            hashes[table] = f"{row['n']}:{row['h']}"
    return hashes


def check_error(answer: httpx2.Response, what: object) -> None:
    """No 5xx; every 4xx is exactly {"error": {"code", "message"}}."""
    assert answer.status_code < 500, (what, answer.status_code, answer.text[:300])
    if answer.status_code >= 400:
        body = answer.json()
        assert set(body) == {"error"}, (what, body)
        assert set(body["error"]) == {"code", "message"}, (what, body)
        assert all(isinstance(v, str) and v for v in body["error"].values()), (what, body)
        if answer.status_code == 405:
            assert answer.headers.get("allow"), what
        if answer.status_code == 401:
            assert answer.headers.get("www-authenticate"), what


def routes_of(app: Starlette) -> list[Route]:
    routes = list(app.routes)
    assert routes and all(isinstance(r, Route) for r in routes), "sweep walks Routes only"
    return [r for r in routes if isinstance(r, Route)]


def path_for(route: Route, values: dict[str, str], **override: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in override:
            return override[name]
        assert name in values, f"the sweep needs a real value for path parameter {name!r}"
        return values[name]

    return _PARAM.sub(value, route.path)


def methods_of(route: Route) -> list[str]:
    return sorted((route.methods or set()) - {"HEAD"})


def _field_names() -> list[str]:
    """Every field of every request body, and one free-form key (signals, callbacks)."""
    names = {"x"}
    for model in vars(request_models).values():
        if isinstance(model, type) and issubclass(model, request_models._Body):
            names |= set(model.model_fields)
    return sorted(names)


def hostile_bodies() -> dict[str, bytes]:
    bodies = {
        "nested arrays": b"[" * 50_000,
        "nested objects": b'{"a":' * 50_000,
        "nested past the bound": b"[" * 150 + b"]" * 150,
        "big integer": b'{"x": ' + b"9" * 4_400 + b"}",
        "big integer alone": b"9" * 4_400,
        "overflowing float": b'{"x": 1e400}',
        "underflowing float": b'{"x": 1e-400}',
        "NaN": b'{"x": NaN}',
        "NUL in a key": b'{"a\\u0000": 1}',
        "not UTF-8": b'{"x": "\xff"}',
    }
    for name in _field_names():
        bodies[f"NUL in {name}"] = b'{"%s": "a\\u0000b"}' % name.encode()
        bodies[f"lone surrogate in {name}"] = b'{"%s": "\\ud800"}' % name.encode()
        bodies[f"NUL nested in {name}"] = b'{"%s": [{"k": "\\u0000"}]}' % name.encode()
    return bodies


def nested_cursor() -> str:
    return base64.urlsafe_b64encode(b"[" * 5_000).decode().rstrip("=")


@pytest.fixture
def world(
    api: TestClient,
    client: Client,
    tmp_path: Path,
    start_worker: Callable[..., ManagedProcess],
) -> dict[str, str]:
    """Real values for every path parameter: a suspended session with an open
    callback, a dead letter, a checkpoint. The worker is stopped after, so the
    database only changes if a request changes it."""
    worker = start_worker()
    waiting = client.start("approval", {})
    dead = client.start("fragile", {"flag": str(tmp_path / "never")})
    wait_until(
        lambda: client.get(waiting).status == "suspended" and client.get(dead).status == "failed",
        what="a suspended and a failed session",
    )
    worker.stop()
    [letter] = api.get("/v1/dead-letters", headers=AUTH).json()["items"]
    token = urlsplit(client.state(waiting)["callback_url"]).path.rsplit("/", 1)[1]
    return {
        "session_id": str(waiting),
        "token": token,
        "dead_letter_id": str(letter["dead_letter_id"]),
        "seq": "1",
        "topic": "approval",
        "name": "customer:42",
    }


def test_every_route_refuses_hostile_input_without_a_5xx_or_a_change(
    app: Starlette, api: TestClient, db: Database, world: dict[str, str]
) -> None:
    before = snapshot(db)
    bodies = hostile_bodies()
    sent = 0

    def send(method: str, path: str, body: bytes = b"", **headers: str) -> httpx2.Response:
        nonlocal sent
        sent += 1
        if "/v1/callbacks/" in path:
            headers = {**signed_bytes(body), **headers}
        headers = {**AUTH, "content-type": "application/json", **headers}
        return api.request(method, path, content=body, headers=headers)

    for route in routes_of(app):
        for method in methods_of(route):
            path = path_for(route, world)
            if method == "POST":  # every POST route takes JSON
                for name, body in bodies.items():
                    answer = send(method, path, body)
                    check_error(answer, (method, path, name))
                    assert answer.status_code == 400, (method, path, name, answer.text)
            for query in ("agent=a%00b", "x%00=1", "cursor=%00"):
                answer = send(method, f"{path}?{query}")
                check_error(answer, (method, path, query))
                assert answer.status_code == 400, (method, path, query)
            if method == "GET":
                for name in ("status", "agent", "limit", "cursor", "after", "before", "since"):
                    for value in ("9" * 4_400, "x" * 5_000, nested_cursor()):
                        check_error(send(method, f"{path}?{name}={value}"), (path, name))
            for param in _PARAM.findall(route.path):
                for value in ("abc%00def", "x" * 3_000, "9" * 4_400):
                    bad_path = path_for(route, world, **{param: value})
                    answer = send(method, bad_path, b"{}" if method == "POST" else b"")
                    check_error(answer, (method, route.path, param, value[:12]))
                    assert 400 <= answer.status_code < 500, (method, route.path, param)

    for route in routes_of(app):
        path = path_for(route, world)
        # Every route whose pattern takes this path (drain is also a dead letter id).
        served = set().union(
            *(r.methods or set() for r in routes_of(app) if r.path_regex.match(path))
        )
        for method in {"GET", "POST", "PUT", "PATCH", "DELETE"} - served:
            answer = send(method, path)
            check_error(answer, (method, path))
            assert answer.status_code == 405, (method, path)
            assert set(answer.headers["allow"].split(", ")) == served, (method, path)

    assert sent > 500
    assert snapshot(db) == before


def test_every_route_but_the_public_ones_needs_the_token(app: Starlette, api: TestClient) -> None:
    assert {"/healthz", "/readyz", "/v1/callbacks/{token}"} == PUBLIC_ROUTES
    values = {name: "00000000-0000-0000-0000-000000000000" for name in ("session_id",)}
    values |= {"token": "t", "dead_letter_id": "1", "seq": "1", "topic": "go", "name": "doc"}
    for route in routes_of(app):
        for method in methods_of(route):
            path = path_for(route, values)
            for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "Basic x"}):
                answer = api.request(method, path, headers=headers)
                check_error(answer, (method, path, headers))
                challenge = answer.headers.get("www-authenticate", "")
                if route.path in PUBLIC_ROUTES:
                    assert not challenge.startswith("Bearer"), (method, path)
                else:
                    assert answer.status_code == 401, (method, path, headers)
                    assert challenge.startswith('Bearer realm="resumable"'), (method, path)
    wrong = api.get("/metrics", headers={"authorization": "Bearer wrong"})
    assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
    assert api.get("/metrics", headers=AUTH).status_code == 200
    assert api.get("/openapi.json", headers=AUTH).json()["paths"]

    # A route added later is protected without a line in its handler.
    async def leak(request: Any) -> JSONResponse:
        return JSONResponse({"secret": True})

    app.routes.append(Route("/v1/added-later", leak, methods=["GET"]))
    assert api.get("/v1/added-later").status_code == 401
    assert api.get("/v1/added-later", headers=AUTH).json() == {"secret": True}
    # A path no route serves is the documented 404, token or not (it was a
    # 401 without one); a path served with another method still needs it.
    for method, path in (
        ("GET", "/v1/no-such-route"),
        ("POST", "/v1/callbacks/"),
        ("GET", "/healthz/"),
        ("GET", "/v1/sessions/"),
        ("POST", "/v1/dead-letters/x/retry"),
    ):
        for headers in ({}, {"authorization": "Bearer wrong"}, AUTH):
            answer = api.request(method, path, headers=headers)
            check_error(answer, (method, path, headers))
            assert answer.status_code == 404, (method, path, headers, answer.status_code)
            assert answer.json()["error"]["code"] == "not_found"
            assert "www-authenticate" not in answer.headers
    assert api.delete("/v1/sessions").status_code == 401
    assert api.delete("/v1/sessions", headers=AUTH).status_code == 405


def test_method_not_allowed_names_every_method_of_the_path(api: TestClient) -> None:
    answer = api.delete("/v1/sessions", headers=AUTH)
    assert answer.status_code == 405
    assert answer.headers["allow"] == "GET, HEAD, POST"
    assert answer.json()["error"]["code"] == "method_not_allowed"
    assert api.get("/v1/callbacks/x").headers["allow"] == "POST"


def test_idempotency_keys_are_bounded_with_a_400(
    api: TestClient, db: Database, world: dict[str, str]
) -> None:
    before = snapshot(db)
    long_key = "k" * 3_000
    create = api.post(
        "/v1/sessions", json={"agent": "five"}, headers={**AUTH, "Idempotency-Key": long_key}
    )
    assert (create.status_code, create.json()["error"]["code"]) == (400, "invalid_idempotency_key")
    assert "256" in create.json()["error"]["message"]
    empty = api.post(
        "/v1/sessions", json={"agent": "five"}, headers={**AUTH, "Idempotency-Key": ""}
    )
    assert empty.status_code == 400
    signal = api.post(
        f"/v1/sessions/{world['session_id']}/signals/go",
        json={"ok": 1},
        headers={**AUTH, "Idempotency-Key": long_key},
    )
    assert (signal.status_code, signal.json()["error"]["code"]) == (400, "invalid_idempotency_key")
    body = b'{"approved": true}'
    callback = api.post(
        f"/v1/callbacks/{world['token']}",
        content=body,
        headers=signed_bytes(body, msg_id="m" * 3_000),
    )
    assert (callback.status_code, callback.json()["error"]["code"]) == (
        400,
        "invalid_idempotency_key",
    )
    assert snapshot(db) == before
    ok = api.post(
        "/v1/sessions", json={"agent": "five"}, headers={**AUTH, "Idempotency-Key": "k" * 256}
    )
    assert ok.status_code == 201


def test_callbacks_refuse_an_empty_body_and_a_signed_non_utf8_one_and_stay_open(
    api: TestClient, db: Database, world: dict[str, str]
) -> None:
    before = snapshot(db)
    path = f"/v1/callbacks/{world['token']}"
    empty = api.post(path, content=b"", headers=signed_bytes(b""))
    assert (empty.status_code, empty.json()["error"]["code"]) == (400, "malformed_json")
    latin1 = b'{"name": "Jos\xe9"}'
    answer = api.post(path, content=latin1, headers=signed_bytes(latin1))
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "malformed_json")
    assert "UTF-8" in answer.json()["error"]["message"]
    forged = {**signed_bytes(b"{}"), "webhook-signature": signed_bytes(latin1)["webhook-signature"]}
    unsigned = api.post(path, content=latin1, headers=forged)
    assert unsigned.status_code == 401
    assert unsigned.headers["www-authenticate"].startswith("Webhook-Signature")
    assert snapshot(db) == before
    body = b'{"approved": true}'
    assert api.post(path, content=body, headers=signed_bytes(body)).status_code == 202


def test_a_token_with_another_sessions_prefix_or_a_made_up_secret_is_404(
    api: TestClient, db: Database, world: dict[str, str]
) -> None:
    """A callback token is its session's id in hex and a secret: neither half
    alone opens a callback, and a NUL byte or a near-copy changes nothing."""
    token = world["token"]
    prefix, secret = token[:32], token[32:]
    assert prefix == uuid.UUID(world["session_id"]).hex
    before = snapshot(db)
    body = b'{"approved": true}'
    for forged in (
        uuid.uuid4().hex + secret,  # the real secret under another session
        prefix + "A" * len(secret),  # the real session with a made-up secret
        prefix + secret[:-1] + ("B" if secret[-1] != "B" else "C"),  # one character off
        secret,  # the secret alone, as a token made before prefixes
    ):
        answer = api.post(f"/v1/callbacks/{forged}", content=body, headers=signed_bytes(body))
        assert (answer.status_code, answer.json()["error"]["code"]) == (404, "not_found"), forged
    nul = api.post(f"/v1/callbacks/{prefix}%00{secret}", content=body, headers=signed_bytes(body))
    assert 400 <= nul.status_code < 500
    assert snapshot(db) == before
    assert (
        api.post(f"/v1/callbacks/{token}", content=body, headers=signed_bytes(body)).status_code
        == 202
    )


def test_a_delivery_id_reused_for_another_body_is_409(
    api: TestClient, client: Client, world: dict[str, str]
) -> None:
    path = f"/v1/callbacks/{world['token']}"
    body = b'{"approved": true}'
    first = api.post(path, content=body, headers=signed_bytes(body, msg_id="msg_1"))
    assert first.status_code == 202
    respaced = b'{ "approved" : true }'
    again = api.post(path, content=respaced, headers=signed_bytes(respaced, msg_id="msg_1"))
    assert (again.status_code, again.json()["status"]) == (200, "duplicate")
    other = b'{"approved": false}'
    reused = api.post(path, content=other, headers=signed_bytes(other, msg_id="msg_1"))
    assert (reused.status_code, reused.json()["error"]["code"]) == (409, "idempotency_key_reused")

    session_id = client.start("five")
    signal = f"/v1/sessions/{session_id}/signals/go"
    headers = {**AUTH, "Idempotency-Key": "approve-1"}
    assert api.post(signal, json={"ok": True}, headers=headers).status_code == 202
    assert api.post(signal, json={"ok": True}, headers=headers).status_code == 200
    changed = api.post(signal, json={"ok": False}, headers=headers)
    assert (changed.status_code, changed.json()["error"]["code"]) == (409, "idempotency_key_reused")
    create = {**AUTH, "Idempotency-Key": "order-1"}
    assert api.post("/v1/sessions", json={"agent": "five"}, headers=create).status_code == 201
    other_input = api.post("/v1/sessions", json={"agent": "five", "input": 1}, headers=create)
    assert (other_input.status_code, other_input.json()["error"]["code"]) == (
        409,
        "idempotency_key_reused",
    )


def test_reasons_are_strings_and_bodies_are_closed(
    api: TestClient, db: Database, world: dict[str, str]
) -> None:
    before = snapshot(db)
    session = world["session_id"]
    letter = world["dead_letter_id"]
    cases = [
        (f"/v1/sessions/{session}/cancel", {"reason": 5}),
        (f"/v1/sessions/{session}/cancel", {"reason": "ok", "force": True}),
        (f"/v1/sessions/{session}/cancel", {"reason": ["a"]}),
        (f"/v1/dead-letters/{letter}/retry", {"reason": 5}),
        (f"/v1/dead-letters/{letter}/discard", {"reason": 5}),
        (f"/v1/dead-letters/{letter}/discard", {"reason": "   "}),
        ("/v1/dead-letters/drain", {"action": "discard", "reason": 5}),
        (f"/v1/sessions/{session}/fork", {"at": True}),
        (f"/v1/sessions/{session}/fork", {"at": 10**30}),
        (f"/v1/sessions/{session}/fork", {"at": 1, "allow_compensated": "yes"}),
        ("/v1/sessions", {"agent": "five", "session_id": 5}),
    ]
    for path, body in cases:
        answer = api.post(path, json=body, headers=AUTH)
        check_error(answer, (path, body))
        assert answer.status_code == 422, (path, body, answer.text)
    assert "reason" in api.post(cases[0][0], json=cases[0][1], headers=AUTH).text
    assert snapshot(db) == before


def test_drain_validates_before_it_acts(
    api: TestClient, db: Database, world: dict[str, str]
) -> None:
    before = snapshot(db)
    for body in (
        {"action": "discard", "reason": "r", "rate": 1e-300},
        {"action": "discard", "reason": "r", "rate": 0},
        {"action": "discard", "reason": "r", "rate": True},
        {"action": "discard", "reason": "r", "rate": "fast"},
        {"action": "discard", "reason": "r", "rate": 10_001},
        # Paced past what one request may take (100 / 1 per s > 60 s).
        {"action": "discard", "reason": "r", "rate": 1, "limit": 100},
        {"action": "discard", "reason": "r", "limit": 0},
        {"action": "discard", "reason": "r", "limit": 100_001},
        {"action": "discard", "reason": "r", "limit": 1.5},
        {"action": "discard", "reason": "r", "dry_run": "no"},
        {"action": "discard"},
        {"action": "retry", "since": "yesterday"},
        {"action": "retry", "flavour": "x"},
    ):
        answer = api.post("/v1/dead-letters/drain", json=body, headers=AUTH)
        check_error(answer, body)
        assert answer.status_code == 422, (body, answer.text)
    answer = api.post(
        "/v1/dead-letters/drain",
        content=b'{"action": "retry", "rate": 1e400}',
        headers={**AUTH, "content-type": "application/json"},
    )
    assert answer.status_code == 400
    assert snapshot(db) == before
    # A dry run previews its real run, refusal included.
    too_slow = {"action": "discard", "reason": "r", "rate": 0.01, "limit": 100_000}
    dry = api.post("/v1/dead-letters/drain", json={**too_slow, "dry_run": True}, headers=AUTH)
    assert dry.status_code == 422 and dry.json()["error"]["code"] == "drain_too_slow", dry.text
    paced = {"action": "discard", "reason": "r", "rate": 1, "limit": 60, "dry_run": True}
    dry = api.post("/v1/dead-letters/drain", json=paced, headers=AUTH)
    assert dry.status_code == 200 and dry.json()["matched"] == [int(world["dead_letter_id"])]
    assert snapshot(db) == before


def test_fork_onto_a_taken_session_id_is_409(
    api: TestClient, client: Client, db: Database, world: dict[str, str]
) -> None:
    source = world["session_id"]
    for taken in (source, str(client.start("five"))):
        before = snapshot(db)
        answer = api.post(
            f"/v1/sessions/{source}/fork", json={"at": 1, "session_id": taken}, headers=AUTH
        )
        assert (answer.status_code, answer.json()["error"]["code"]) == (409, "session_exists")
        assert snapshot(db) == before
    chosen = str(uuid.uuid4())
    made = api.post(
        f"/v1/sessions/{source}/fork", json={"at": 1, "session_id": chosen}, headers=AUTH
    )
    assert made.status_code == 201 and made.json()["session_id"] == chosen
    assert made.json()["status"] == "pending"  # as created, before any worker took it


def test_fork_of_a_compensated_saga_is_refused_unless_allowed(
    api: TestClient, client: Client, db: Database, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()
    with FakeAPI() as fake:
        session_id = client.start("saga", {"api": fake.url})
        wait_until(lambda: client.get(session_id).status == "failed", what="the saga")
        assert [path for path, _ in fake.order].count("/undo") == 3
        before = snapshot(db)
        for at in (1, 2, 3):
            refused = api.post(f"/v1/sessions/{session_id}/fork", json={"at": at}, headers=AUTH)
            assert refused.status_code == 409, refused.text
            message = refused.json()["error"]["message"]
            assert "compensated" in message and "allow_compensated" in message
        assert snapshot(db) == before
        allowed = api.post(
            f"/v1/sessions/{session_id}/fork",
            json={"at": 2, "allow_compensated": True},
            headers=AUTH,
        )
        assert allowed.status_code == 201
    fork_id = uuid.UUID(allowed.json()["session_id"])
    [created] = [e for e in client.events(fork_id) if e.type == "session_created"]
    assert created.payload["compensated_calls_reused"] == 2
    assert json.loads(json.dumps(created.payload))["forked_from"] == str(session_id)


def _raw_http(port: int, head: bytes) -> tuple[int, dict[str, str], bytes]:
    """One request over a plain socket (http clients refuse NUL in headers)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head_part, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head_part.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def test_a_real_web_process_bounds_header_size_and_refuses_nul_headers(
    start_web: Callable[..., ManagedProcess], web_port: int
) -> None:
    start_web()

    def get(*extra: bytes) -> tuple[int, dict[str, str], bytes]:
        lines = [b"GET /healthz HTTP/1.1", b"Host: x", b"Connection: close", *extra]
        return _raw_http(web_port, b"\r\n".join(lines) + b"\r\n\r\n")

    assert get(b"X-Filler: " + b"a" * 8_000)[0] == 200
    for size in (20_000, 1_000_000):
        status, headers, body = get(b"X-Filler: " + b"a" * size)
        assert status == 431, size
        assert headers["content-type"] == "application/json"
        assert json.loads(body)["error"]["code"] == "headers_too_large"
    many = [b"X-%d: %s" % (i, b"b" * 50) for i in range(1_000)]
    assert get(*many)[0] == 431
    # uvicorn's parser refuses this one itself (plain text); the app's guard
    # covers servers that pass it on.
    assert get(b"X-Resumable-Actor: a\x00b")[0] == 400


def _deep(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    "patch",
    [
        # Each copy doubles the state: 30 of them, under a kilobyte, make gigabytes.
        [{"op": "add", "path": "/d", "value": ["x" * 100]}]
        + [{"op": "copy", "from": "/d", "path": "/d/0"}] * 30,
        # Values each within the request's 100 levels, nested into one another.
        [
            {"op": "add", "path": "/a", "value": _deep(95)},
            {"op": "add", "path": "/a/0/0/0/0/0/0/0/0/0/0", "value": _deep(95)},
        ],
    ],
    ids=["copies", "nesting"],
)
def test_a_state_patch_that_makes_an_unstorable_state_is_422(
    api: TestClient, db: Database, world: dict[str, str], patch: list[dict[str, Any]]
) -> None:
    """The patched state is what must be storable, not only the patch: a fork
    or a retry whose patch would build a huge or too deep state is refused as
    it applies, and nothing is written (it once answered 500 after committing
    the fork, or 200 with a dead letter no one could read again)."""
    before = snapshot(db)
    for path in (
        f"/v1/sessions/{world['session_id']}/fork",
        f"/v1/dead-letters/{world['dead_letter_id']}/retry",
    ):
        body = {"state_patch": patch, **({"at": 1} if path.endswith("fork") else {})}
        answer = api.post(path, json=body, headers=AUTH)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["code"] == "invalid_state_patch"
    assert snapshot(db) == before


def test_a_dead_letter_id_out_of_range_is_a_dead_letter_not_found(api: TestClient) -> None:
    """A number past any id is a dead letter that is not there (as the
    documented code says), not a path the API has no route for."""
    for digits in ("9" * 19, "1" * 20, "9" * 400):
        for method, suffix in (("GET", ""), ("POST", "/retry")):
            answer = api.request(
                method, f"/v1/dead-letters/{digits}{suffix}", json={}, headers=AUTH
            )
            assert answer.status_code == 404, (digits[:5], answer.text)
            assert answer.json()["error"]["code"] == "dead_letter_not_found"


def test_an_id_with_a_trailing_newline_names_nothing(
    api: TestClient, db: Database, world: dict[str, str]
) -> None:
    """``$`` in a Python pattern also matches before a final newline: a real
    session id + ``%0A`` passed the UUID check and failed in uuid.UUID (500),
    and Starlette's own route patterns made ``/v1/dead-letters/7%0A`` dead
    letter 7. A path ending in a newline is a 404; an id with one inside is
    the session or checkpoint that is not there."""
    before = snapshot(db)
    session = world["session_id"]
    for method, path, code in (
        ("GET", f"/v1/sessions/{session}%0A", "not_found"),
        ("GET", "/v1/sessions%0A", "not_found"),
        ("POST", f"/v1/sessions/{session}%0A/cancel", "session_not_found"),
        ("POST", f"/v1/sessions/{session}%0A/signals/approval", "session_not_found"),
        ("GET", f"/v1/sessions/{session}%0A/events", "session_not_found"),
        ("GET", f"/v1/sessions/{session}/checkpoints/1%0A", "not_found"),
        ("GET", f"/v1/dead-letters/{world['dead_letter_id']}%0A", "not_found"),
    ):
        answer = api.request(method, path, json={}, headers=AUTH)
        check_error(answer, path)
        assert answer.status_code == 404, (path, answer.status_code, answer.text[:200])
        assert answer.json()["error"]["code"] == code, path
    assert snapshot(db) == before


def test_a_path_with_a_trailing_slash_is_a_404_not_a_redirect(
    api: TestClient, db: Database, world: dict[str, str]
) -> None:
    """Starlette redirects `/v1/sessions/` to `/v1/sessions` (307) by default:
    a client that follows it sends its token and body twice, and the API's
    contract has no such answer. Every route with a slash added is a 404."""
    before = snapshot(db)
    session = world["session_id"]
    for method, path in (
        ("GET", "/v1/sessions/"),
        ("POST", "/v1/sessions/"),
        ("GET", f"/v1/sessions/{session}/"),
        ("POST", f"/v1/sessions/{session}/cancel/"),
        ("GET", "/v1/dead-letters/"),
        ("GET", "/healthz/"),
        ("GET", "/openapi.json/"),
    ):
        answer = api.request(method, path, json={}, headers=AUTH, follow_redirects=False)
        check_error(answer, path)
        assert answer.status_code == 404, (path, answer.status_code, answer.text[:200])
        assert answer.json()["error"]["code"] == "not_found", path
    assert snapshot(db) == before


def test_an_idempotency_key_is_bounded_in_bytes_on_every_way_in(
    api: TestClient, client: Client, db: Database
) -> None:
    """256 bytes, counted the same over HTTP (a header is bytes), in the CLI
    and in the Python API: 128 two-byte characters fit, 129 do not."""
    fits, too_long = "é" * 128, "é" * 129
    before = snapshot(db)
    over_http = api.post(
        "/v1/sessions",
        json={"agent": "five"},
        headers={
            b"authorization": AUTH["authorization"].encode(),
            b"idempotency-key": too_long.encode(),
        },
    )
    assert (over_http.status_code, over_http.json()["error"]["code"]) == (
        400,
        "invalid_idempotency_key",
    )
    with pytest.raises(InvalidArgumentError, match="256 bytes"):
        client.start("five", idempotency_key=too_long)
    with pytest.raises(InvalidArgumentError, match="not blank"):
        client.start("five", idempotency_key="   ")
    assert snapshot(db) == before
    first = client.start("five", idempotency_key=fits)
    assert client.start("five", idempotency_key=fits) == first


def test_a_number_too_small_for_a_float_is_refused_not_stored_as_zero(
    api: TestClient, db: Database, client: Client, world: dict[str, str]
) -> None:
    """1e-400 reads as 0.0 in Python: storing that would store another number."""
    before = snapshot(db)
    for body in (
        b'{"agent": "five", "input": {"a": 1e-400}}',
        b'{"agent": "five", "input": -5E-999}',
    ):
        answer = api.post(
            "/v1/sessions", content=body, headers={**AUTH, "content-type": "application/json"}
        )
        assert (answer.status_code, answer.json()["error"]["code"]) == (400, "malformed_json")
        assert "too small" in answer.json()["error"]["message"]
    assert snapshot(db) == before
    zero = api.post(
        "/v1/sessions", json={"agent": "five", "input": {"a": 0.0, "b": 1e-300}}, headers=AUTH
    )
    assert zero.status_code == 201, zero.text
    assert client.get(zero.json()["session_id"]).input == {"a": 0.0, "b": 1e-300}


def test_escapes_that_are_not_utf8_are_refused_not_read_as_another_name(
    api: TestClient, db: Database, world: dict[str, str]
) -> None:
    """``%FF`` and ``%ED%A0%80`` (a lone surrogate) were decoded to U+FFFD, so
    ``/v1/shared/%FF`` read the document named "\\ufffd" and a filter matched
    it: in the path or the query string they answer 400, as in a body."""
    before = snapshot(db)
    for escape in ("%FF", "%ED%A0%80", "%C0%AF", "a%E2%82"):
        for path in (
            f"/v1/shared/{escape}",
            f"/v1/shared/{escape}/history",
            f"/v1/sessions/{escape}",
            f"/v1/dead-letters?error_type={escape}",
            f"/v1/sessions?agent={escape}",
            f"/v1/sessions?{escape}=1",
            f"/ui/sessions?agent={escape}",
        ):
            answer = api.get(path, headers=AUTH)
            assert answer.status_code == 400, (path, answer.status_code, answer.text[:200])
            if not path.startswith("/ui"):
                check_error(answer, path)
                assert answer.json()["error"]["code"] == "invalid_request"
    # Escaped UTF-8 is still a name like any other.
    assert api.get("/v1/dead-letters?error_type=%C3%A9", headers=AUTH).status_code == 200
    assert api.get("/v1/shared/caf%C3%A9", headers=AUTH).status_code == 404
    assert snapshot(db) == before


def test_the_actor_header_is_read_as_utf8(
    start_web: Callable[..., ManagedProcess], web_port: int, client: Client, db: Database
) -> None:
    """Starlette decodes headers as Latin-1: "José" reached the audit log as
    "JosÃ©". Bytes that are not UTF-8 are kept as escapes. (Raw sockets: an
    HTTP client re-encodes header values its own way.)"""
    start_web()
    for raw, expected in (("José".encode(), "José"), (b"\xed\xa0\x80", "\\xed\\xa0\\x80")):
        session = client.start("five")
        body = b'{"reason": "r"}'
        head = b"\r\n".join(
            [
                f"POST /v1/sessions/{session}/cancel HTTP/1.1".encode(),
                b"Host: x",
                b"Connection: close",
                f"Authorization: Bearer {API_TOKEN}".encode(),
                b"Content-Type: application/json",
                b"Content-Length: %d" % len(body),
                b"X-Resumable-Actor: " + raw,
            ]
        )
        status, _, answer = _raw_http(web_port, head + b"\r\n\r\n" + body)
        assert status == 200, answer
        with db.connection() as conn:
            row = conn.execute(
                "SELECT payload FROM audit_events WHERE session_id = %s"
                " AND event_type = 'session_cancelled'",
                [session],
            ).fetchone()
        assert row is not None
        payload = cast(dict[str, Any], row["payload"])
        assert str(payload["by"]).startswith(f"{expected} (token "), row


def test_a_client_that_hangs_up_mid_body_is_one_info_line_not_a_traceback(
    start_web: Callable[..., ManagedProcess], web_port: int
) -> None:
    """Anyone could fill the ERROR log operators alert on by hanging up in
    the middle of a body; it is not an error of the server's."""
    web = start_web()
    paths = ("/v1/callbacks/abc", "/v1/sessions", "/v1/dead-letters/drain")
    for path in paths:
        with socket.create_connection(("127.0.0.1", web_port), timeout=10) as sock:
            head = (
                f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_TOKEN}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            )
            sock.sendall(head.encode())
    wait_until(
        lambda: (
            web.output().count("client disconnected before sending its whole body") >= len(paths)
        ),
        timeout=15,
        what="a line per hung-up request",
    )
    log = web.output()
    assert "Traceback" not in log and "ClientDisconnect" not in log, log[-3000:]
    assert "Exception in ASGI application" not in log
    assert " ERROR " not in log and '"level": "error"' not in log.lower()
