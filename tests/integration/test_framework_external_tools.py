"""Tools executed elsewhere, answered at a single-use signed callback URL
(``durable(..., external_tools=...)``): in memory with resumable.testing, and
on real web, worker and scheduler processes, the result POSTed over HTTP."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from resumable.client import Client
from resumable.models.database import Database
from resumable.testing import TestSession, run_step
from tests.conftest import LocalDeployment, wait_until
from tests.framework_fake_openai import FakeOpenAI, media_reply
from tests.signing import signed

PYDANTIC = "tests.framework_pydantic_agents"
OPENAI = "tests.framework_openai_agents"
TRANSCODE = {"id": "t1", "tool": "transcode", "args": {"video": "v1", "format": "webm"}}
REFUND = {"id": "r1", "tool": "refund", "args": {"order": "o1", "amount": 10}, "kind": "approval"}
WEBM = {"url": "s3://v1.webm"}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """The fake server: the PydanticAI agents' model requests are counted
    there, the OpenAI Agents SDK's are answered by its media script."""
    with FakeOpenAI(media_reply) as api:
        monkeypatch.setenv("FAKE_OPENAI_URL", api.url)
        yield api


def _agent(name: str) -> Any:
    from tests import framework_openai_agents, framework_pydantic_agents

    module = framework_openai_agents if name.startswith("openai") else framework_pydantic_agents
    return getattr(module, name)


def _call(session: TestSession | dict[str, Any], call_id: str) -> dict[str, Any]:
    state = session.state if isinstance(session, TestSession) else session
    calls: list[dict[str, Any]] = [c for c in state["pending"] if c["id"] == call_id]
    [call] = calls
    return call


def _model_requests(api: FakeOpenAI) -> int:
    """Model requests sent: the SDK's chat completions, PydanticAI's counted posts."""
    with api.lock:
        counted = sum(1 for path, _ in api.order if path == "/model")
    return api.model_requests + counted


# -- in memory ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["pydantic_media", "pydantic_media_sync", "openai_media"])
def test_an_approval_and_an_external_call_in_one_turn(fake: FakeOpenAI, name: str) -> None:
    """The session waits on the external call's callback only; the approval,
    posted first, is kept by the signal route and taken once the result has
    arrived; the model sees both answers, and no request is sent twice."""
    session = TestSession(_agent(name), "transcode v1 and refund o1")
    wait = session.run_until_wait()
    transcode = _call(session, "t1")
    assert {k: transcode[k] for k in TRANSCODE} == TRANSCODE
    assert transcode["kind"] == "external"
    assert transcode["callback_url"].endswith(f"/v1/callbacks/{transcode['callback_token']}")
    assert _call(session, "r1") == REFUND
    assert [c.token for c in wait.conditions] == [transcode["callback_token"]]  # type: ignore[union-attr]

    session.signal("approval", {"approved": True})
    assert session.status == "suspended"  # kept: the callback's URL stays open
    session.deliver(transcode["callback_token"], {"result": WEBM})
    result = session.run_until_done()
    assert result.startswith("Done: ")
    assert sorted(result.removeprefix("Done: ").split(" | ")) == sorted(
        [
            json.dumps(WEBM, separators=(",", ":")) if "pydantic" in name else json.dumps(WEBM),
            "refunded 10 on o1",
        ]
    )
    assert _model_requests(fake) == 2
    assert [c.tool for c in session.calls] == ["model_request", "tool:refund", "model_request"]


@pytest.mark.parametrize("name", ["pydantic_media", "openai_media"])
def test_an_error_posted_to_the_url_is_what_the_model_sees(fake: FakeOpenAI, name: str) -> None:
    session = TestSession(_agent(name), "transcode v1")
    session.run_until_wait()
    session.deliver(_call(session, "t1")["callback_token"], {"error": "codec missing"})
    assert "codec missing" in session.run_until_done()


def test_two_external_calls_get_their_urls_one_after_the_other(fake: FakeOpenAI) -> None:
    """Any wake closes a session's open callbacks, so the second call's URL is
    made once the first is answered: a URL handed out stays valid."""
    from tests.framework_pydantic_agents import pydantic_media

    session = TestSession(pydantic_media, "transcode twice")
    session.run_until_wait()
    assert _call(session, "t2")["callback_url"] is None
    session.deliver(_call(session, "t1")["callback_token"], "v1 done")
    session.run_until_wait()
    second = _call(session, "t2")
    assert second["callback_url"] is not None
    session.deliver(second["callback_token"], {"result": "v2 done"})
    assert session.run_until_done() == "Done: v1 done | v2 done"


@pytest.mark.parametrize("name", ["pydantic_media_timeout", "openai_media_timeout"])
def test_no_result_in_time_is_what_the_model_sees_and_an_approval_in_time_counts(
    fake: FakeOpenAI, name: str
) -> None:
    """The deadline passes while the session waits on the callback: the call
    gets "No result arrived in time.", and the approval that was posted in
    time (kept while the signal was not waited on) is still applied."""
    session = TestSession(_agent(name), "transcode v1 and refund o1")
    session.run_until_wait()
    session.signal("approval", {"approved": True})
    result = session.run_until_done()
    assert "No result arrived in time." in result
    assert "refunded 10 on o1" in result


def test_a_replayed_pausing_turn_hands_out_the_same_url(fake: FakeOpenAI) -> None:
    """A turn replayed after a crash sends nothing again and makes no new
    callback: the URL already handed out stays the one waited on."""
    from tests.framework_pydantic_agents import pydantic_media

    first = run_step(pydantic_media, "turn", input="transcode v1")
    again = first.rerun()
    assert [c.replayed for c in again.calls] == [True]
    assert _model_requests(fake) == 1
    assert _call(again.state, "t1")["callback_url"] == _call(first.state, "t1")["callback_url"]


# -- real processes ----------------------------------------------------------------------


def _status(client: Client, session_id: uuid.UUID) -> str:
    return str(client.get(session_id).status)


def _lease(db: Database, session_id: uuid.UUID) -> tuple[Any, Any]:
    with db.connection() as conn:
        row = conn.execute(
            "SELECT lease_owner, lease_expires_at FROM sessions WHERE id = %s", [session_id]
        ).fetchone()
    assert row is not None
    return row["lease_owner"], row["lease_expires_at"]


def _post(url: str, payload: Any, msg_id: str) -> httpx.Response:
    body, headers = signed(payload, msg_id=msg_id)
    return httpx.post(url, content=body, headers=headers, timeout=10)


@pytest.mark.parametrize(
    ("module", "agent"),
    [(PYDANTIC, "pydantic_media"), (PYDANTIC, "pydantic_media_sync"), (OPENAI, "openai_media")],
)
def test_a_signed_post_to_the_url_resumes_the_run_once(
    client: Client, db: Database, deployment: LocalDeployment, module: str, agent: str
) -> None:
    with FakeOpenAI(media_reply) as api:
        deployment.web()
        deployment.worker(module, FAKE_OPENAI_URL=api.url)
        session_id = client.start(agent, {"prompt": "transcode v1 and refund o1"})
        wait_until(lambda: _status(client, session_id) == "suspended", what="the external call")
        assert _lease(db, session_id) == (None, None)  # no worker holds it
        transcode = _call(client.state(session_id), "t1")
        url = transcode["callback_url"]
        assert url == f"{deployment.url}/v1/callbacks/{transcode['callback_token']}"

        client.signal(session_id, "approval", {"approved": True})
        assert _status(client, session_id) == "suspended"  # kept until the result is in

        answer = _post(url, {"result": WEBM}, "msg_result")
        assert answer.status_code == 202, answer.text
        wait_until(lambda: _status(client, session_id) == "completed", what="completion")
        result = client.get(session_id).result
        assert "s3://v1.webm" in result and "refunded 10 on o1" in result
        assert _model_requests(api) == 2

        # The same delivery again is a duplicate; another one is refused.
        assert _post(url, {"result": WEBM}, "msg_result").status_code == 200
        again = _post(url, {"result": "other"}, "msg_other")
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "wait_closed"
        assert client.get(session_id).result == result
        events = [e.type for e in client.events(session_id)]
        assert events.count("callback_received") == 1


def test_no_result_in_time_reaches_the_model_and_a_late_post_is_refused(
    client: Client, deployment: LocalDeployment
) -> None:
    with FakeOpenAI() as api:
        deployment.web()
        deployment.scheduler()
        deployment.worker(PYDANTIC, FAKE_OPENAI_URL=api.url)
        session_id = client.start("pydantic_media_timeout", "transcode v1 and refund o1")
        wait_until(lambda: _status(client, session_id) == "suspended", what="the external call")
        url = _call(client.state(session_id), "t1")["callback_url"]
        client.signal(session_id, "approval", {"approved": True})
        wait_until(lambda: _status(client, session_id) == "completed", what="the timeout")
        result = client.get(session_id).result
        assert "No result arrived in time." in result and "refunded 10 on o1" in result
        assert _model_requests(api) == 2

        late = _post(url, {"result": WEBM}, "msg_late")
        assert late.status_code == 409
        assert client.get(session_id).result == result
