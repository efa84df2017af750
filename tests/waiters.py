"""Sessions that wait on a signal or a callback, and the answers that wake
them: shared by the workloads that run through PgBouncer and on RabbitMQ."""

from __future__ import annotations

import json
import uuid

import httpx

from resumable.client import Client
from tests.conftest import wait_until
from tests.signing import signed_headers


def wait_suspended(client: Client, ids: list[uuid.UUID], what: str) -> None:
    wait_until(lambda: all(client.get(i).status == "suspended" for i in ids), 60, what=what)


def approve(client: Client, session_id: uuid.UUID, timeout: float = 5.0) -> int:
    """POST a signed approval to the session's callback URL (through the
    web process); its status code."""
    url = client.state(session_id)["callback_url"]
    body = json.dumps({"approved": True})
    return httpx.post(url, content=body, headers=signed_headers(body), timeout=timeout).status_code


def answer_waiters(client: Client, signalled: list[uuid.UUID], approvals: list[uuid.UUID]) -> None:
    """Once they all wait: a signal to each of `signalled` (topic ``go``), an
    approval through the web to each of `approvals`."""
    wait_suspended(client, [*signalled, *approvals], "the signalled and approval sessions to wait")
    for session_id in signalled:
        client.signal(session_id, "go", {"ok": True})
    for session_id in approvals:
        assert approve(client, session_id) == 202
