"""PydanticAI agents on resumable (resumable.integrations.pydantic_ai): in
memory with resumable.testing, and on real workers SIGKILLed mid-run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from resumable.client import Client
from resumable.testing import TestSession
from tests.conftest import LocalDeployment
from tests.framework_checks import (
    PENDING_REFUND,
    assert_crashes_repeated_nothing,
    assert_the_paused_worker_was_fenced,
    without_clock,
)
from tests.framework_crash import crash_twice, pause_past_lease
from tests.framework_fake_openai import FakeOpenAI

AGENTS = "tests.framework_pydantic_agents"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as api:
        monkeypatch.setenv("FAKE_OPENAI_URL", api.url)
        yield api


@pytest.mark.parametrize("name", ["pydantic_refunds", "pydantic_refunds_sync"])
def test_an_approved_refund_runs_one_turn_per_step(fake: FakeOpenAI, name: str) -> None:
    from tests import framework_pydantic_agents as agents

    session = TestSession(getattr(agents, name), {"prompt": "refund o1", "deps": {"api": fake.url}})
    wait = session.run_until_wait()
    assert wait.then == "decide"
    assert session.state["pending"] == PENDING_REFUND
    session.signal("approval", {"approved": True})
    result = session.run_until_done()
    assert result.startswith("Done: refunded 30 as ")
    assert [c.tool for c in session.calls] == [
        "model_request",
        "tool:lookup",
        "model_request",
        "tool:refund",
        "model_request",
    ]
    assert fake.model_requests == 3
    assert fake.effect_count() == 2
    kinds = [m["kind"] for m in session.state["messages"]]
    assert kinds == ["request", "response"] * 3


def test_a_rejection_reason_reaches_the_model_and_nothing_is_refunded(fake: FakeOpenAI) -> None:
    from tests.framework_pydantic_agents import pydantic_refunds

    session = TestSession(pydantic_refunds, {"prompt": "refund o1", "deps": {"api": fake.url}})
    session.run_until_wait()
    session.signal(
        "approval", {"decisions": {"call_2": {"approved": False, "reason": "no receipt"}}}
    )
    assert session.run_until_done() == "Done: no receipt"
    assert [path for path, _ in fake.order] == ["/lookup"]


def test_no_decision_in_time_rejects_the_call(fake: FakeOpenAI) -> None:
    from resumable.integrations.pydantic_ai import durable
    from tests.framework_pydantic_agents import _deps, support

    agent = durable(support, name="pydantic_timeout", deps=_deps, approval_timeout=3600)
    session = TestSession(agent, {"prompt": "refund o1", "deps": {"api": fake.url}})
    assert session.run_until_done() == "Done: No decision arrived in time."
    assert [path for path, _ in fake.order] == ["/lookup"]


def test_a_replayed_turn_sends_nothing_again(fake: FakeOpenAI) -> None:
    from resumable.testing import run_step
    from tests.framework_pydantic_agents import pydantic_refunds

    first = run_step(
        pydantic_refunds, "turn", input={"prompt": "refund o1", "deps": {"api": fake.url}}
    )
    assert (fake.model_requests, fake.total_calls()) == (1, 1)
    again = first.rerun()
    assert [c.replayed for c in again.calls] == [True, True]
    assert (fake.model_requests, fake.total_calls()) == (1, 1)
    assert without_clock(again.state) == without_clock(first.state)


@pytest.mark.parametrize("name", ["pydantic_refunds", "pydantic_refunds_sync"])
def test_sigkill_in_a_model_request_and_in_a_tool_call_repeats_nothing(
    client: Client, reconciler: None, tmp_path: Path, deployment: LocalDeployment, name: str
) -> None:
    """Async steps, and sync ones, whose answers and deferred tool records
    ride with the step thread's claims and commits."""
    assert_crashes_repeated_nothing(crash_twice(client, deployment, tmp_path, AGENTS, name))


def test_a_decision_on_some_calls_keeps_the_others_deadline() -> None:
    """Two refunds wait for approval with a one-hour timeout. Half an hour
    in, one is approved: the other keeps the half hour it had left (it is
    refused at the first deadline), not a new hour."""
    from resumable.integrations.pydantic_ai import durable
    from tests.framework_pydantic_agents import two_refunds

    agent = durable(two_refunds, name="two_refunds", approval_timeout=3600)
    session = TestSession(agent, "refund o1 and o2")
    session.run_until_wait()
    paused_at = session.now
    assert [call["id"] for call in session.state["pending"]] == ["r1", "r2"]
    session.advance(1800)
    session.signal("approval", {"decisions": {"r1": {"approved": True}}})
    session.run_until_wait()
    assert session.state["decided"] == {"r1": {"approved": True, "reason": None}}
    result = session.run_until_done()
    assert result == "refunded 10 on o1 | No decision arrived in time."
    waited = (session.now - paused_at).total_seconds()
    assert 3599 <= waited <= 3601, waited


def test_a_worker_paused_past_its_lease_in_a_model_request_is_fenced(
    client: Client, reconciler: None, deployment: LocalDeployment
) -> None:
    assert_the_paused_worker_was_fenced(
        pause_past_lease(client, deployment, AGENTS, "pydantic_refunds")
    )
