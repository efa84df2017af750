"""The async research agent (AsyncOpenAI) on real workers, against the fake
OpenAI-compatible server: a SIGKILL in the middle of its async step does not
make it pay for the LLM call it already recorded, and the loop goes on to a
human's approval."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from examples.fake_llm import FakeLLM
from resumable.client import Client
from resumable.models.database import Database
from tests.conftest import ManagedProcess, wait_until
from tests.integration.test_examples import (
    API_KEY,
    QUESTION,
    _recorded_llm_calls,
    _signal,
    _waiting_after,
    llm,
)

__all__ = ["llm"]  # the fixture, shared with the sync example's tests


@pytest.fixture
def start_async_research_worker(
    start_process: Callable[..., ManagedProcess], llm: FakeLLM
) -> Callable[[], ManagedProcess]:
    def start() -> ManagedProcess:
        return start_process(
            ["worker", "--agents", "examples.async_research_agent"],
            "worker started",
            OPENAI_BASE_URL=llm.base_url,
            OPENAI_API_KEY=API_KEY,
            OPENAI_MODEL="fake-model",
        )

    return start


def test_sigkill_in_an_async_step_does_not_pay_for_the_llm_call_twice(
    client: Client,
    db: Database,
    llm: FakeLLM,
    web_port: int,
    start_web: Callable[..., ManagedProcess],
    start_scheduler: Callable[..., ManagedProcess],
    start_async_research_worker: Callable[[], ManagedProcess],
) -> None:
    start_web()
    start_scheduler()  # its reconciler hands the session on once the lease expires
    llm.page_gate.clear()  # hold the tool call the model asks for
    victim = start_async_research_worker()
    session_id = client.start("async_research", {"question": QUESTION})

    # The model has answered through AsyncOpenAI (and the answer is recorded);
    # the async step is now fetching the page it asked for, and has not committed.
    wait_until(llm.page_requested.is_set, what="the tool call")
    assert llm.chat_calls == 1
    assert _recorded_llm_calls(db, session_id) == 1
    assert client.get(session_id).seq == 1  # only `start` (a sync step) committed
    victim.kill()
    llm.page_gate.set()

    start_async_research_worker()
    wait_until(
        lambda: _waiting_after(client, session_id, 1), timeout=30, what="recovery and a draft"
    )
    # The interrupted turn's LLM call came from the record: two calls in all.
    assert llm.chat_calls == 2
    assert llm.page_fetches == 2
    requests = [json.dumps(r, sort_keys=True) for r in llm.chat_requests]
    assert len(set(requests)) == len(requests)
    assert llm.authorizations == [f"Bearer {API_KEY}"] * 2
    events = client.events(session_id)
    think = next(e for e in events if e.type == "step_completed" and e.step == "think")
    assert think.payload["tool_calls_replayed"] == 1  # the LLM call
    assert think.payload["tool_calls"] == 1  # the fetch, made again

    assert _signal(web_port, session_id, {"approved": False, "feedback": "cite it"}) == 202
    wait_until(lambda: _waiting_after(client, session_id, 3), what="a revision")
    assert client.state(session_id)["draft"] == "Revised report, after 'Reviewer: cite it'."
    assert _signal(web_port, session_id, {"approved": True, "by": "bob"}) == 202
    wait_until(lambda: client.get(session_id).status == "completed", what="completion")
    assert client.get(session_id).result["llm_calls"] == 3
    assert llm.chat_calls == 3
