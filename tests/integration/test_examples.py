"""The research agent example on real workers, against the fake OpenAI-compatible
server: it loops until a human approves, and a SIGKILL in the middle of a step
never makes it pay for an LLM call twice. The framework examples (PydanticAI,
OpenAI Agents SDK) on real workers, each approved or refused through the HTTP
signal route while it holds no worker."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from examples.fake_llm import FakeLLM
from resumable.client import Client
from resumable.models.database import Database
from tests.conftest import API_TOKEN, ManagedProcess, wait_until

API_KEY = "sk-test-" + "k" * 16
AUTH = {"authorization": f"Bearer {API_TOKEN}"}
QUESTION = "How does a durable agent survive a crash?"


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(api_key=API_KEY) as fake:
        yield fake


@pytest.fixture
def start_research_worker(
    start_process: Callable[..., ManagedProcess], llm: FakeLLM
) -> Callable[[], ManagedProcess]:
    def start() -> ManagedProcess:
        return start_process(
            ["worker", "--agents", "examples.research_agent"],
            "worker started",
            OPENAI_BASE_URL=llm.base_url,
            OPENAI_API_KEY=API_KEY,
            OPENAI_MODEL="fake-model",
        )

    return start


def _signal(web_port: int, session_id: uuid.UUID, payload: dict[str, Any]) -> int:
    answer = httpx.post(
        f"http://127.0.0.1:{web_port}/v1/sessions/{session_id}/signals/approval",
        json=payload,
        headers={**AUTH, "Idempotency-Key": uuid.uuid4().hex},
        timeout=10,
    )
    return answer.status_code


def _waiting_after(client: Client, session_id: uuid.UUID, seq: int) -> bool:
    """Suspended for approval at a later step than `seq`."""
    row = client.get(session_id)
    return row.status == "suspended" and row.seq > seq


def _recorded_llm_calls(db: Database, session_id: uuid.UUID) -> int:
    with db.connection() as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM tool_execution_cache "
            "WHERE session_id = %s AND tool = 'llm' AND status = 'completed'",
            (session_id,),
        ).fetchone()
    assert row is not None
    count = row["n"]
    assert isinstance(count, int)
    return count


def test_research_agent_loops_with_a_tool_and_a_human_until_approved(
    client: Client,
    db: Database,
    llm: FakeLLM,
    web_port: int,
    start_web: Callable[..., ManagedProcess],
    start_research_worker: Callable[[], ManagedProcess],
) -> None:
    start_web()
    start_research_worker()
    session_id = client.start("research", {"question": QUESTION})

    wait_until(lambda: _waiting_after(client, session_id, 0), what="the first draft")
    first = client.get(session_id)
    # Turn 1 asked for fetch_url, the tool ran, turn 2 wrote the report.
    assert llm.chat_calls == 2
    assert llm.page_fetches == 1
    assert client.state(session_id)["draft"].startswith("Report: A suspend-and-resume job queue")

    assert _signal(web_port, session_id, {"approved": False, "feedback": "cite it"}) == 202
    wait_until(lambda: _waiting_after(client, session_id, first.seq), what="a revision")
    revised = client.state(session_id)
    assert llm.chat_calls == 3
    assert revised["draft"] == "Revised report, after 'Reviewer: cite it'."

    assert _signal(web_port, session_id, {"approved": True, "by": "alice"}) == 202
    wait_until(lambda: client.get(session_id).status == "completed", what="completion")
    assert client.get(session_id).result == {
        "status": "approved",
        "report": revised["draft"],
        "approved_by": "alice",
        "llm_calls": 3,
    }
    # Every call carried the key from the worker's environment and the model from
    # the input defaults; none was repeated.
    assert llm.authorizations == [f"Bearer {API_KEY}"] * 3
    assert {r["model"] for r in llm.chat_requests} == {"fake-model"}
    assert _recorded_llm_calls(db, session_id) == 3
    # The conversation handed to the model grew turn by turn: tool call, tool
    # result, then the reviewer's feedback.
    last = llm.chat_requests[-1]["messages"]
    assert [m["role"] for m in last] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert json.loads(last[3]["content"])["status"] == 200


def test_sigkill_in_the_middle_of_a_step_does_not_repeat_the_llm_call(
    client: Client,
    db: Database,
    llm: FakeLLM,
    web_port: int,
    start_web: Callable[..., ManagedProcess],
    start_scheduler: Callable[..., ManagedProcess],
    start_research_worker: Callable[[], ManagedProcess],
) -> None:
    start_web()
    start_scheduler()  # its reconciler hands the session on once the lease expires
    llm.page_gate.clear()  # hold the tool call the model asks for
    victim = start_research_worker()
    session_id = client.start("research", {"question": QUESTION})

    # The model has answered (and the answer is recorded); the step is now
    # fetching the page it asked for, and has not committed.
    wait_until(llm.page_requested.is_set, what="the tool call")
    assert llm.chat_calls == 1
    assert _recorded_llm_calls(db, session_id) == 1
    assert client.get(session_id).seq == 1  # only `start` committed
    victim.kill()
    llm.page_gate.set()

    start_research_worker()
    wait_until(
        lambda: _waiting_after(client, session_id, 1), timeout=30, what="recovery and a draft"
    )
    # The interrupted turn's LLM call came from the record: two calls in all,
    # the second made with the fetched page. The page itself was read again,
    # as a read that never finished should be.
    assert llm.chat_calls == 2
    assert llm.page_fetches == 2
    requests = [json.dumps(r, sort_keys=True) for r in llm.chat_requests]
    assert len(set(requests)) == len(requests)
    events = client.events(session_id)
    assert [e.type for e in events].count("lease_recovered") == 1
    think = next(e for e in events if e.type == "step_completed" and e.step == "think")
    assert think.payload["tool_calls_replayed"] == 1  # the LLM call
    assert think.payload["tool_calls"] == 1  # the fetch, made again

    assert _signal(web_port, session_id, {"approved": True, "by": "bob"}) == 202
    wait_until(lambda: client.get(session_id).status == "completed", what="completion")
    assert client.get(session_id).result["llm_calls"] == 2
    assert llm.chat_calls == 2


# -- the framework examples: a human's approval through the signal route --------------------


def _post(web_port: int, path: str, payload: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{web_port}{path}", json=payload, headers=AUTH, timeout=10)


def _held_by_nobody(db: Database, session_id: str) -> bool:
    """Suspended with no lease: no worker, thread or task holds the session."""
    with db.connection() as conn:
        row = conn.execute(
            "SELECT status, lease_owner, lease_expires_at FROM sessions WHERE id = %s",
            (session_id,),
        ).fetchone()
    assert row is not None
    return bool(
        row["status"] == "suspended" and row["lease_owner"] is None and not row["lease_expires_at"]
    )


def _approve_over_http(
    client: Client, db: Database, web_port: int, agent: str, session_input: Any, decision: Any
) -> tuple[list[dict[str, Any]], Any]:
    """Start `agent` over HTTP, wait until it waits for approval holding no
    worker, POST `decision` to its signal route; its pending calls and result."""
    created = _post(web_port, "/v1/sessions", {"agent": agent, "input": session_input})
    assert created.status_code == 201, created.text
    session_id = created.json()["session_id"]
    wait_until(lambda: _held_by_nobody(db, session_id), what="the approval wait")
    pending = client.state(uuid.UUID(session_id))["pending"]
    signal = _post(web_port, f"/v1/sessions/{session_id}/signals/approval", decision)
    assert signal.status_code == 202, signal.text
    wait_until(lambda: client.get(uuid.UUID(session_id)).status == "completed", what="completion")
    return pending, client.get(uuid.UUID(session_id)).result


def test_the_pydantic_ai_example_reads_a_refusal_posted_to_the_signal_route(
    client: Client,
    db: Database,
    web_port: int,
    start_web: Callable[..., ManagedProcess],
    start_process: Callable[..., ManagedProcess],
) -> None:
    start_web()
    start_process(["worker", "--agents", "examples.pydantic_ai_approval"], "worker started")
    reason = "Refunds over 20 EUR need a receipt."
    pending, result = _approve_over_http(
        client,
        db,
        web_port,
        "pydantic_refunds",
        {"prompt": "Refund order o-17", "deps": {"currency": "EUR"}},
        {"approved": False, "reason": reason},
    )
    assert [(p["tool"], p["args"], p["kind"]) for p in pending] == [
        ("refund", {"order": "o-17", "amount": 30}, "approval")
    ]
    assert result == f"Refund outcome: {reason}"


def test_the_openai_agents_example_fetches_once_approved_through_the_signal_route(
    client: Client,
    db: Database,
    llm: FakeLLM,
    web_port: int,
    start_web: Callable[..., ManagedProcess],
    start_process: Callable[..., ManagedProcess],
) -> None:
    start_web()
    start_process(
        ["worker", "--agents", "examples.openai_agents_approval"],
        "worker started",
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY=API_KEY,
        OPENAI_MODEL="fake-model",
    )
    pending, result = _approve_over_http(
        client,
        db,
        web_port,
        "openai_research",
        {"prompt": QUESTION},
        {"approved": True},
    )
    assert [(p["tool"], p["args"]) for p in pending] == [
        ("fetch_url", {"url": f"{llm.url}/pages/durable-agents"})
    ]
    assert result == (
        "Report: A suspend-and-resume job queue keeps an agent's state in a database after"
    )
    # One request before the approval, one after; the page fetched once, after it.
    assert llm.chat_calls == 2
    assert llm.page_fetches == 1
    assert llm.authorizations == [f"Bearer {API_KEY}"] * 2
