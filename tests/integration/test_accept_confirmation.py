"""Accepting a blocked session repeats effects only when told which (issue
41, "guard rails"): on real workers, a session blocked because a tool call's
arguments changed (tests/deploy_agents_v1.py books 2 nights, v2 books 3).

The recorded booking stays in the outside world and the new one goes out
under a new idempotency key, so the accept shows both first and refuses,
changing nothing, until a confirmation names the recorded call it supersedes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from resumable.client import Client
from resumable.errors import ConfirmationRequiredError
from resumable.models.database import Database
from resumable.settings import Settings
from resumable.webhooks.app import create_app
from tests.conftest import API_TOKEN, LocalDeployment, run_cli, wait_until
from tests.fake_api import FakeAPI

V1, V2 = "tests.deploy_agents_v1", "tests.deploy_agents_v2"
AUTH = {"authorization": f"Bearer {API_TOKEN}", "x-resumable-actor": "ops:cy"}


@pytest.fixture
def http(settings: Settings, db: Database, client: Client) -> Iterator[TestClient]:
    configured = settings.model_copy(update={"api_tokens": [API_TOKEN]})
    app = create_app(configured, settings.database_url or "", settings.redis_url or "")
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _status(db: Database, session_id: uuid.UUID) -> str:
    with db.connection() as conn:
        row = conn.execute("SELECT status FROM sessions WHERE id = %s", (session_id,)).fetchone()
    assert row is not None
    return str(row["status"])


def _nothing_changed(db: Database, session_id: uuid.UUID, api: FakeAPI) -> None:
    """Still blocked, no acceptance audited, no record superseded, no call made."""
    with db.connection() as conn:
        row = conn.execute(
            "SELECT (SELECT status FROM sessions WHERE id = %(id)s) AS status,"
            " (SELECT count(*) FROM audit_events WHERE session_id = %(id)s"
            "  AND event_type = 'divergence_accepted') AS accepted,"
            " (SELECT count(*) FROM tool_execution_cache WHERE session_id = %(id)s"
            "  AND superseded_at IS NOT NULL) AS superseded",
            {"id": session_id},
        ).fetchone()
    assert row == {"status": "blocked", "accepted": 0, "superseded": 0}
    assert api.total_calls() == 1


def _blocked_by_changed_arguments(
    client: Client, db: Database, deployment: LocalDeployment, api: FakeAPI
) -> uuid.UUID:
    v1 = deployment.worker(V1)
    sid = client.start("trip", {"api": api.url, "payments_down": True})
    # Booked (2 nights), then retrying the step: its call is recorded.
    wait_until(lambda: api.total_calls() == 1 and _status(db, sid) == "retrying", what="retrying")
    v1.stop()
    deployment.worker(V2)  # books 3 nights at the same position
    wait_until(lambda: _status(db, sid) == "blocked", what="blocked")
    return sid


def test_accept_shows_what_runs_again_and_refuses_without_naming_the_recorded_call(
    client: Client, db: Database, deployment: LocalDeployment, http: TestClient
) -> None:
    with FakeAPI() as api:
        sid = _blocked_by_changed_arguments(client, db, deployment, api)
        [recorded_key] = api.calls

        # The preview: what runs again, with what and under which key; what stays.
        preview = http.get(f"/v1/sessions/{sid}/accept", headers=AUTH)
        assert preview.status_code == 200, preview.text
        shown = preview.json()
        assert (shown["kind"], shown["step"], shown["call_index"]) == (
            "tool_call_diverged",
            "book",
            0,
        )
        [new] = shown["new_calls"]
        assert (new["tool"], new["call_index"], new["replaces"]) == ("hotel", 0, recorded_key)
        assert new["request"]["args"][1] == {"what": "hotel", "nights": 3}
        assert new["changes"] == [
            {"path": "args[1].nights", "change": "changed", "recorded": 2, "requested": 3}
        ]
        new_key = new["idempotency_key"]
        assert new_key and new_key.startswith("rsm_") and new_key != recorded_key
        [effect] = shown["superseded"]
        assert (effect["tool"], effect["call_index"], effect["status"]) == ("hotel", 0, "completed")
        assert effect["idempotency_key"] == recorded_key
        assert effect["request"]["args"][1]["nights"] == 2 and effect["result"]
        assert shown["confirmation_required"] and shown["confirm"] == [recorded_key]
        assert (
            "argument `args[1].nights` changed from `2` to `3` in call `hotel` #0"
            in shown["summary"]
        )
        _nothing_changed(db, sid, api)

        # No confirmation, or one that does not name exactly the recorded call.
        for body in (
            {"reason": "3 nights is right"},
            {"reason": "3 nights is right", "confirm": []},
            {"reason": "3 nights is right", "confirm": [new_key]},
            {"reason": "3 nights is right", "confirm": [recorded_key, new_key]},
        ):
            refused = http.post(f"/v1/sessions/{sid}/accept", json=body, headers=AUTH)
            assert refused.status_code == 409, refused.text
            error = refused.json()["error"]
            assert error["code"] == "confirmation_required", error
            assert "`hotel` #0" in error["message"] and recorded_key in error["message"]
            assert error["preview"] == shown
            _nothing_changed(db, sid, api)
        with pytest.raises(ConfirmationRequiredError) as python:
            client.accept(sid, reason="3 nights is right")
        assert python.value.preview == client.preview_accept(sid)
        _nothing_changed(db, sid, api)

        # The command line prints the preview and, without --yes, does nothing.
        accept = ["sessions", "accept", str(sid), "--reason", "3 nights is right", "--by", "ops"]
        done = run_cli(client.settings, *accept)
        assert done.returncode == 1, done.stderr
        assert "re-run with --yes" in done.stderr and "Traceback" not in done.stderr
        for text in (
            "calls that run again:",
            f"hotel #0  key {new_key}",
            '"nights":3',
            "recorded effects that stay",
            f"hotel #0  completed  key {recorded_key}",
            "argument `args[1].nights` changed from `2` to `3` in call `hotel` #0",
        ):
            assert text in done.stdout, (text, done.stdout)
        _nothing_changed(db, sid, api)

        # With --yes: accepted, and the new booking is made once, under the key shown.
        done = run_cli(client.settings, *accept, "--yes")
        assert done.returncode == 0, done.stderr
        assert "1 recorded call(s) superseded" in done.stdout
        wait_until(lambda: _status(db, sid) == "completed", what="completed")
        assert [body["nights"] for _, body in api.order] == [2, 3]
        assert dict(api.calls) == {recorded_key: 1, new_key: 1}
        events = [e for e in client.events(sid) if e.type == "divergence_accepted"]
        assert [e.payload["by"] for e in events] == ["ops"]
        assert [c["idempotency_key"] for c in events[0].payload["superseded"]] == [recorded_key]


def test_a_confirmation_from_a_preview_that_is_no_longer_true_is_refused(
    client: Client, db: Database, deployment: LocalDeployment, http: TestClient
) -> None:
    """A confirmation is checked against the record as it is when the accept
    runs, not as an earlier preview showed it: here the recorded call was
    superseded by hand meanwhile, so the stale confirmation names a call the
    accept no longer supersedes."""
    with FakeAPI() as api:
        sid = _blocked_by_changed_arguments(client, db, deployment, api)
        [recorded_key] = api.calls
        stale: dict[str, Any] = http.get(f"/v1/sessions/{sid}/accept", headers=AUTH).json()
        with db.connection() as conn:  # an operator superseded that call by hand meanwhile
            conn.execute(
                "UPDATE tool_execution_cache SET superseded_at = now(), superseded_by = 'dba'"
                " WHERE idempotency_key = %s",
                (recorded_key,),
            )
        refused = http.post(
            f"/v1/sessions/{sid}/accept",
            json={"reason": "r", "confirm": stale["confirm"]},
            headers=AUTH,
        )
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["preview"]["superseded"] == []
        assert _status(db, sid) == "blocked" and api.total_calls() == 1
